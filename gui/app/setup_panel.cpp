// SetupPanel: a form of fields, each with a hidden red label beneath it for
// its problems.
#include "gui/app/setup_panel.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QVBoxLayout>

#include "model/presets.hpp"
#include "model/suggest.hpp"

namespace meshplan::studio {
namespace {

QSpinBox* spin(int lo, int hi, const QString& special = {}) {
  auto* box = new QSpinBox;
  box->setRange(lo, hi);
  if (!special.isEmpty()) box->setSpecialValueText(special);
  box->setAccelerated(true);
  return box;
}

// Where the studio keeps an overlap switch between runs.
QString settings_key(const OverlapSwitch& s) {
  return QStringLiteral("setup/") + QString::fromUtf8(s.studio_key.data(), static_cast<qsizetype>(s.studio_key.size()));
}

QComboBox* preset_combo(PresetKind kind) {
  auto* box = new QComboBox;
  box->setEditable(true);
  for (const auto& name : list_presets(kind)) box->addItem(QString::fromStdString(name));
  box->setInsertPolicy(QComboBox::NoInsert);
  return box;
}

}  // namespace

SetupPanel::SetupPanel(QWidget* parent) : QWidget(parent) {
  auto* outer = new QVBoxLayout(this);
  form_ = new QFormLayout;
  form_->setFieldGrowthPolicy(QFormLayout::AllNonFixedFieldsGrow);
  outer->addLayout(form_);

  model_ = preset_combo(PresetKind::model);
  cluster_ = preset_combo(PresetKind::cluster);
  auto with_browse = [this](QComboBox* combo, const QString& folder) {
    auto* row = new QWidget;
    auto* layout = new QHBoxLayout(row);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(combo, 1);
    auto* button = new QPushButton(tr("File..."));
    connect(button, &QPushButton::clicked, this, [this, combo, folder] { browse(combo, folder); });
    layout->addWidget(button);
    return row;
  };
  addField("model", tr("Model"), with_browse(model_, "models"), tr("A model preset, or a model YAML file"));
  editors_["model"] = model_;
  addField("cluster", tr("Cluster"), with_browse(cluster_, "clusters"), tr("A cluster preset, or a cluster YAML file"));
  editors_["cluster"] = cluster_;
  layers_ = spin(0, 100000, tr("preset"));
  hidden_ = spin(0, 1 << 20, tr("preset"));
  heads_ = spin(0, 1 << 16, tr("preset"));
  seq_ = spin(0, 1 << 22, tr("preset"));
  addField("layers", tr("Layers"), layers_, tr("Transformer layers (preset value when 'preset')"));
  addField("hidden", tr("Hidden"), hidden_, tr("Model width h"));
  addField("heads", tr("Heads"), heads_, tr("Attention heads"));
  addField("seq", tr("Sequence"), seq_, tr("Tokens per sequence"));
  per_node_ = spin(0, 4096, tr("preset"));
  nodes_ = spin(0, 1 << 20);
  gpus_ = new QLabel;
  addField("devices_per_node", tr("GPUs per node"), per_node_, tr("Devices in one node"));
  addField("nodes", tr("Nodes"), nodes_, tr("Nodes in the job; GPUs = nodes x GPUs per node"));
  form_->addRow(tr("GPUs"), gpus_);
  batch_ = spin(0, 1 << 30, tr("by rule"));
  addField("global_batch", tr("Global batch"), batch_,
           tr("Sequences (samples) per optimizer step, all ranks; 'by rule': GPT-3's batch in tokens for the nearest "
              "GPT-3 size over the sequence length (as the CLI; the status line names it)"));
  axes_ = new QLineEdit;
  axes_->setPlaceholderText(tr("dp,fsdp,tp,pp (+ ep for MoE)"));
  addField("axes", tr("Axes"), axes_,
           tr("Mesh axes to search: any of dp, fsdp, tp, pp, cp, ep; empty: dp,fsdp,tp,pp, and ep for a "
              "mixture-of-experts model"));
  max_tp_ = spin(0, 1 << 16, tr("per node"));
  max_pp_ = spin(0, 1 << 16, tr("no limit"));
  addField("max_tp", tr("Max tp"), max_tp_, tr("Largest tensor-parallel degree"));
  addField("max_pp", tr("Max pp"), max_pp_, tr("Largest pipeline degree"));
  max_cp_ = spin(0, 1 << 16, tr("no limit"));
  max_ep_ = spin(0, 1 << 16, tr("no limit"));
  addField("max_cp", tr("Max cp"), max_cp_, tr("Largest context-parallel degree (where Axes has cp)"));
  addField("max_ep", tr("Max ep"), max_ep_, tr("Largest expert-parallel degree (where ep is searched)"));
  headroom_ = new QDoubleSpinBox;
  headroom_->setRange(0, 0.99);
  headroom_->setSingleStep(0.01);
  headroom_->setDecimals(2);
  addField("headroom", tr("Memory headroom"), headroom_, tr("Fraction of device memory kept free"));
  schedules_ = new QLineEdit;
  addField("schedules", tr("Schedules"), schedules_, tr("gpipe, 1f1b, interleaved, zb-h1"));
  zero_ = new QLineEdit;
  addField("zero", tr("ZeRO stages"), zero_, tr("ZeRO stages on dp to try (0-3)"));
  recompute_ = new QLineEdit;
  addField("recompute", tr("Recompute"), recompute_, tr("none, selective, full, selective-op"));
  recompute_modules_ = new QLineEdit;
  addField("recompute_modules", tr("Selective modules"), recompute_modules_,
           tr("What selective recompute repeats (Megatron-Core's --recompute-modules): core_attn, layernorm, "
              "mla_up_proj, moe_act, mlp, shared_experts, comma-separated"));
  attention_ = new QComboBox;
  for (const char* choice : kAttentionChoices) attention_->addItem(QString::fromLatin1(choice));
  addField("attention", tr("Attention"), attention_,
           tr("fused (FlashAttention / cuDNN / SDPA: no s x s scores), unfused (Megatron-LM 2022), or both searched"));
  cp_comm_ = new QComboBox;
  for (const std::string& choice : choice_words(cp_comm_choices)) cp_comm_->addItem(QString::fromStdString(choice));
  addField("cp_comm", tr("Context parallel"), cp_comm_,
           tr("How cp moves keys and values: ring (hidden under the attention), all-gather (Llama 3) or "
              "all-to-all (DeepSpeed-Ulysses), both exposed"));
  loss_ = new QComboBox;
  for (const std::string& choice : choice_words(loss_choices)) loss_->addItem(QString::fromStdString(choice));
  addField("loss", tr("Loss"), loss_,
           tr("How the cross-entropy runs: eager (fp32 log-probabilities kept, PyTorch without compile) or fused "
              "(torch.compile, Megatron's loss fusion, Liger: the logits kept in bf16); memory only"));
  fp32_gradients_ = new QCheckBox(tr("fp32"));
  addField("fp32_gradients", tr("Gradients"), fp32_gradients_,
           tr("Keep and reduce gradients in fp32, as Megatron-LM does for bf16 and torchtitan's FSDP2 by default "
              "(4 bytes per parameter instead of 2)"));
  bf16_moments_ = new QCheckBox(tr("bf16"));
  addField("bf16_moments", tr("Adam moments"), bf16_moments_,
           tr("Keep Adam's two moments in bf16 beside fp32 master weights, as Megatron-Core's precision-aware "
              "optimizer and DeepSeek-V3 do (4 bytes per parameter of optimizer state fewer)"));
  for (std::size_t i = 0; i < kOverlapSwitches.size(); ++i) {
    const OverlapSwitch& s = kOverlapSwitches[i];
    overlaps_[i] = new QCheckBox(QString::fromUtf8(s.studio_check.data(), static_cast<qsizetype>(s.studio_check.size())));
    addField(QString::fromUtf8(s.studio_key.data(), static_cast<qsizetype>(s.studio_key.size())),
             QString::fromUtf8(s.studio_label.data(), static_cast<qsizetype>(s.studio_label.size())), overlaps_[i],
             QString::fromUtf8(s.help.data(), static_cast<qsizetype>(s.help.size())) +
                 tr("; applied to the candidates where it can run"));
  }
  expert_tp_ = new QComboBox;
  for (const char* choice : {"tp,1", "tp", "1"}) expert_tp_->addItem(QString::fromLatin1(choice));
  addField("expert_tp", tr("Experts' tp"), expert_tp_,
           tr("Mixtures of experts: split each expert over tp (tp), run it whole with the tp ranks in ep (1, "
              "Megatron-Core's expert tensor parallelism 1; needs sequence parallelism), or search both"));
  ep_dispatch_ = new QComboBox;
  for (const std::string& choice : choice_words(ep_dispatch_choices)) ep_dispatch_->addItem(QString::fromStdString(choice));
  addField("ep_dispatch", tr("Expert dispatch"), ep_dispatch_,
           tr("How routed tokens reach their experts across nodes: all-to-all (NCCL: once per expert) or "
              "deduplicated (DeepEP: once per node holding any of the token's experts)"));
  threads_ = spin(0, 4096, tr("one per core"));
  addField("threads", tr("Search threads"), threads_, tr("Threads of the search"));

  general_ = new QLabel;
  general_->setWordWrap(true);
  general_->setStyleSheet("color: #c62828;");
  general_->hide();
  outer->addWidget(general_);

  auto* buttons = new QHBoxLayout;
  run_ = new QPushButton(tr("Search plans"));
  run_->setToolTip(tr("Run the plan search (Ctrl+R)"));
  cancel_ = new QPushButton(tr("Cancel"));
  cancel_->setEnabled(false);
  buttons->addWidget(run_);
  buttons->addWidget(cancel_);
  outer->addLayout(buttons);
  progress_ = new QProgressBar;
  progress_->setRange(0, 1);
  progress_->setValue(0);
  outer->addWidget(progress_);
  outer->addStretch(1);
  connect(run_, &QPushButton::clicked, this, &SetupPanel::runRequested);
  connect(cancel_, &QPushButton::clicked, this, &SetupPanel::cancelRequested);

  connect(model_, &QComboBox::currentTextChanged, this, [this] { refreshPresetFigures(); });
  connect(cluster_, &QComboBox::currentTextChanged, this, [this] { refreshPresetFigures(); });
  auto update_gpus = [this] {
    const std::int64_t per = per_node_->value() > 0 ? per_node_->value() : preset_per_node_;
    gpus_->setText(QString::number(per * nodes_->value()));
  };
  connect(per_node_, &QSpinBox::valueChanged, this, update_gpus);
  connect(nodes_, &QSpinBox::valueChanged, this, update_gpus);
  setInputs(SetupInputs{});
}

void SetupPanel::addField(const QString& key, const QString& label, QWidget* editor, const QString& tip) {
  auto* box = new QWidget;
  auto* layout = new QVBoxLayout(box);
  layout->setContentsMargins(0, 0, 0, 0);
  layout->setSpacing(1);
  layout->addWidget(editor);
  auto* error = new QLabel;
  error->setWordWrap(true);
  error->setStyleSheet("color: #c62828; font-size: 9pt;");
  error->hide();
  layout->addWidget(error);
  editor->setToolTip(tip);
  editor->setObjectName("field_" + key);
  form_->addRow(label, box);
  editors_[key] = editor;
  errors_[key] = error;
}

void SetupPanel::browse(QComboBox* combo, const QString& folder) {
  const QString start = QString::fromStdString(presets_root()) + "/" + folder;
  const QString path = QFileDialog::getOpenFileName(this, tr("Open %1 YAML").arg(folder), start, tr("YAML (*.yaml *.yml)"));
  if (!path.isEmpty()) combo->setEditText(path);
}

void SetupPanel::refreshPresetFigures() {
  auto model = load_model(model_->currentText().trimmed().toStdString());
  if (model.ok() && model.value.kind == ModelKind::transformer) {
    const TransformerDims& t = model.value.transformer;
    layers_->setSpecialValueText(tr("preset (%1)").arg(t.layers));
    hidden_->setSpecialValueText(tr("preset (%1)").arg(t.hidden));
    heads_->setSpecialValueText(tr("preset (%1)").arg(t.heads));
    seq_->setSpecialValueText(tr("preset (%1)").arg(t.seq_len));
  } else if (model.ok()) {  // an MLP or a CNN: these figures do not apply
    for (QSpinBox* box : {layers_, hidden_, heads_, seq_}) box->setSpecialValueText(tr("n/a (%1)").arg(QString::fromStdString(to_string(model.value.kind))));
  }
  for (QSpinBox* box : {layers_, hidden_, heads_, seq_}) box->setEnabled(!model.ok() || model.value.kind == ModelKind::transformer);
  auto cluster = load_cluster(cluster_->currentText().trimmed().toStdString());
  if (cluster.ok()) {
    preset_per_node_ = cluster.value.devices_per_node;
    per_node_->setSpecialValueText(tr("preset (%1)").arg(preset_per_node_));
  }
  const std::int64_t per = per_node_->value() > 0 ? per_node_->value() : preset_per_node_;
  gpus_->setText(QString::number(per * nodes_->value()));
}

SetupInputs SetupPanel::inputs() const {
  SetupInputs in;
  in.model = model_->currentText().trimmed().toStdString();
  in.cluster = cluster_->currentText().trimmed().toStdString();
  in.layers = layers_->value();
  in.hidden = hidden_->value();
  in.heads = heads_->value();
  in.seq = seq_->value();
  in.devices_per_node = per_node_->value();
  in.nodes = nodes_->value();
  in.global_batch = batch_->value();
  in.axes = axes_->text().toStdString();
  in.max_tp = max_tp_->value();
  in.max_pp = max_pp_->value();
  in.max_cp = max_cp_->value();
  in.max_ep = max_ep_->value();
  in.headroom = headroom_->value();
  in.schedules = schedules_->text().toStdString();
  in.zero = zero_->text().toStdString();
  in.recompute = recompute_->text().toStdString();
  in.recompute_modules = recompute_modules_->text().toStdString();
  in.attention = attention_->currentText().toStdString();
  in.cp_comm = cp_comm_->currentText().toStdString();
  in.loss = loss_->currentText().toStdString();
  in.fp32_gradients = fp32_gradients_->isChecked();
  in.bf16_moments = bf16_moments_->isChecked();
  for (std::size_t i = 0; i < kOverlapSwitches.size(); ++i) in.overlaps.*kOverlapSwitches[i].wanted = overlaps_[i]->isChecked();
  in.expert_tp = expert_tp_->currentText().toStdString();
  in.ep_dispatch = ep_dispatch_->currentText().toStdString();
  in.threads = threads_->value();
  return in;
}

void SetupPanel::setInputs(const SetupInputs& in) {
  model_->setEditText(QString::fromStdString(in.model));
  cluster_->setEditText(QString::fromStdString(in.cluster));
  layers_->setValue(static_cast<int>(in.layers));
  hidden_->setValue(static_cast<int>(in.hidden));
  heads_->setValue(static_cast<int>(in.heads));
  seq_->setValue(static_cast<int>(in.seq));
  per_node_->setValue(static_cast<int>(in.devices_per_node));
  nodes_->setValue(static_cast<int>(in.nodes));
  batch_->setValue(static_cast<int>(in.global_batch));
  axes_->setText(QString::fromStdString(in.axes));
  max_tp_->setValue(static_cast<int>(in.max_tp));
  max_pp_->setValue(static_cast<int>(in.max_pp));
  max_cp_->setValue(static_cast<int>(in.max_cp));
  max_ep_->setValue(static_cast<int>(in.max_ep));
  headroom_->setValue(in.headroom);
  schedules_->setText(QString::fromStdString(in.schedules));
  zero_->setText(QString::fromStdString(in.zero));
  recompute_->setText(QString::fromStdString(in.recompute));
  recompute_modules_->setText(QString::fromStdString(in.recompute_modules));
  // A saved value outside the choices (hand-edited settings) is kept as typed, for resolve_setup to judge.
  if (attention_->findText(QString::fromStdString(in.attention)) < 0) attention_->addItem(QString::fromStdString(in.attention));
  attention_->setCurrentText(QString::fromStdString(in.attention));
  if (cp_comm_->findText(QString::fromStdString(in.cp_comm)) < 0) cp_comm_->addItem(QString::fromStdString(in.cp_comm));
  cp_comm_->setCurrentText(QString::fromStdString(in.cp_comm));
  if (loss_->findText(QString::fromStdString(in.loss)) < 0) loss_->addItem(QString::fromStdString(in.loss));
  loss_->setCurrentText(QString::fromStdString(in.loss));
  fp32_gradients_->setChecked(in.fp32_gradients);
  bf16_moments_->setChecked(in.bf16_moments);
  for (std::size_t i = 0; i < kOverlapSwitches.size(); ++i) overlaps_[i]->setChecked(in.overlaps.*kOverlapSwitches[i].wanted);
  if (expert_tp_->findText(QString::fromStdString(in.expert_tp)) < 0) expert_tp_->addItem(QString::fromStdString(in.expert_tp));
  expert_tp_->setCurrentText(QString::fromStdString(in.expert_tp));
  if (ep_dispatch_->findText(QString::fromStdString(in.ep_dispatch)) < 0) {
    ep_dispatch_->addItem(QString::fromStdString(in.ep_dispatch));
  }
  ep_dispatch_->setCurrentText(QString::fromStdString(in.ep_dispatch));
  threads_->setValue(in.threads);
  refreshPresetFigures();
}

void SetupPanel::clearProblems() {
  for (auto it = errors_.begin(); it != errors_.end(); ++it) {
    it.value()->clear();
    it.value()->hide();
    editors_[it.key()]->setStyleSheet({});
  }
  general_->clear();
  general_->hide();
}

int SetupPanel::showProblems(const Problems& problems) {
  clearProblems();
  int shown = 0;
  for (const auto& p : problems) {
    const QString key = QString::fromStdString(p.where);
    const QString message = QString::fromStdString(p.message);
    QLabel* label = errors_.value(key, nullptr);
    if (label) {
      label->setText(label->text().isEmpty() ? message : label->text() + "\n" + message);
      label->show();
      if (QWidget* editor = editors_.value(key, nullptr)) editor->setStyleSheet("border: 1px solid #c62828;");
    } else {
      general_->setText(general_->text() + (general_->text().isEmpty() ? "" : "\n") + QString::fromStdString(describe(p)));
      general_->show();
    }
    ++shown;
  }
  return shown;
}

QString SetupPanel::problemText(const QString& field) const {
  const QLabel* label = errors_.value(field, nullptr);
  return label ? label->text() : QString();
}

void SetupPanel::setRunning(bool running) {
  run_->setEnabled(!running);
  cancel_->setEnabled(running);
  if (running) {
    progress_->setRange(0, 0);
  } else {
    progress_->setRange(0, 1);
    progress_->setValue(1);
  }
}

void SetupPanel::setProgress(qint64 done, qint64 total) {
  if (total <= 0) return;
  progress_->setRange(0, static_cast<int>(total));
  progress_->setValue(static_cast<int>(done));
}

void SetupPanel::save(QSettings& s) const {
  const SetupInputs in = inputs();
  s.setValue("setup/model", QString::fromStdString(in.model));
  s.setValue("setup/cluster", QString::fromStdString(in.cluster));
  s.setValue("setup/layers", static_cast<qlonglong>(in.layers));
  s.setValue("setup/hidden", static_cast<qlonglong>(in.hidden));
  s.setValue("setup/heads", static_cast<qlonglong>(in.heads));
  s.setValue("setup/seq", static_cast<qlonglong>(in.seq));
  s.setValue("setup/devices_per_node", static_cast<qlonglong>(in.devices_per_node));
  s.setValue("setup/nodes", static_cast<qlonglong>(in.nodes));
  s.setValue("setup/global_batch", static_cast<qlonglong>(in.global_batch));
  s.setValue("setup/axes", QString::fromStdString(in.axes));
  s.setValue("setup/max_tp", static_cast<qlonglong>(in.max_tp));
  s.setValue("setup/max_pp", static_cast<qlonglong>(in.max_pp));
  s.setValue("setup/max_cp", static_cast<qlonglong>(in.max_cp));
  s.setValue("setup/max_ep", static_cast<qlonglong>(in.max_ep));
  s.setValue("setup/headroom", in.headroom);
  s.setValue("setup/schedules", QString::fromStdString(in.schedules));
  s.setValue("setup/zero", QString::fromStdString(in.zero));
  s.setValue("setup/recompute", QString::fromStdString(in.recompute));
  s.setValue("setup/recompute_modules", QString::fromStdString(in.recompute_modules));
  s.setValue("setup/attention", QString::fromStdString(in.attention));
  s.setValue("setup/cp_comm", QString::fromStdString(in.cp_comm));
  s.setValue("setup/loss", QString::fromStdString(in.loss));
  s.setValue("setup/fp32_gradients", in.fp32_gradients);
  s.setValue("setup/bf16_moments", in.bf16_moments);
  for (const OverlapSwitch& o : kOverlapSwitches) s.setValue(settings_key(o), in.overlaps.*o.wanted);
  s.setValue("setup/expert_tp", QString::fromStdString(in.expert_tp));
  s.setValue("setup/ep_dispatch", QString::fromStdString(in.ep_dispatch));
  s.setValue("setup/threads", in.threads);
}

void SetupPanel::restore(const QSettings& s) {
  SetupInputs in;
  auto text = [&](const char* key, std::string& into) {
    if (s.contains(key)) into = s.value(key).toString().toStdString();
  };
  auto number = [&](const char* key, std::int64_t& into) {
    if (s.contains(key)) into = s.value(key).toLongLong();
  };
  text("setup/model", in.model);
  text("setup/cluster", in.cluster);
  number("setup/layers", in.layers);
  number("setup/hidden", in.hidden);
  number("setup/heads", in.heads);
  number("setup/seq", in.seq);
  number("setup/devices_per_node", in.devices_per_node);
  number("setup/nodes", in.nodes);
  number("setup/global_batch", in.global_batch);
  text("setup/axes", in.axes);
  number("setup/max_tp", in.max_tp);
  number("setup/max_pp", in.max_pp);
  number("setup/max_cp", in.max_cp);
  number("setup/max_ep", in.max_ep);
  if (s.contains("setup/headroom")) in.headroom = s.value("setup/headroom").toDouble();
  text("setup/schedules", in.schedules);
  text("setup/zero", in.zero);
  text("setup/recompute", in.recompute);
  text("setup/recompute_modules", in.recompute_modules);
  text("setup/attention", in.attention);
  text("setup/cp_comm", in.cp_comm);
  text("setup/loss", in.loss);
  if (s.contains("setup/fp32_gradients")) in.fp32_gradients = s.value("setup/fp32_gradients").toBool();
  if (s.contains("setup/bf16_moments")) in.bf16_moments = s.value("setup/bf16_moments").toBool();
  for (const OverlapSwitch& o : kOverlapSwitches) {
    if (s.contains(settings_key(o))) in.overlaps.*o.wanted = s.value(settings_key(o)).toBool();
  }
  text("setup/expert_tp", in.expert_tp);
  text("setup/ep_dispatch", in.ep_dispatch);
  if (s.contains("setup/threads")) in.threads = s.value("setup/threads").toInt();
  setInputs(in);
}

}  // namespace meshplan::studio
