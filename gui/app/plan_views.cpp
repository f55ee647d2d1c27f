// Mesh, sharding, memory and roofline canvases: painting only; every
// rectangle and pixel comes from gui/core/geometry.hpp.
#include "gui/app/plan_views.hpp"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QPainterPath>
#include <QSpinBox>
#include <QToolTip>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "gui/app/charts.hpp"
#include "gui/core/plan_models.hpp"

namespace meshplan::studio {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void draw_title(QPainter& p, const QRectF& rect, const QString& title, const QString& subtitle) {
  QFont font = p.font();
  font.setBold(true);
  font.setPointSizeF(font.pointSizeF() * 1.15);
  p.save();
  p.setFont(font);
  p.setPen(Qt::black);
  p.drawText(rect.adjusted(0, 0, 0, -rect.height() / 2), Qt::AlignLeft | Qt::AlignVCenter, title);
  p.restore();
  p.setPen(QColor(70, 70, 70));
  p.drawText(rect.adjusted(0, rect.height() / 2, 0, 0), Qt::AlignLeft | Qt::AlignVCenter, subtitle);
}

QString mesh_coordinates(const Mesh& mesh, std::int64_t rank) {
  QStringList parts;
  const auto coords = mesh.coordinates(rank);
  for (std::size_t i = 0; i < mesh.axes.size(); ++i) {
    parts << QString::fromStdString(to_string(mesh.axes[i].axis)) + "=" + QString::number(coords[i]);
  }
  return parts.join(' ');
}

QString short_coordinates(const Mesh& mesh, std::int64_t rank) {
  QStringList parts;
  for (auto c : mesh.coordinates(rank)) parts << QString::number(c);
  return "(" + parts.join(',') + ")";
}

}  // namespace

// ---------------------------------------------------------------- mesh

MeshCanvas::MeshCanvas(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void MeshCanvas::setMesh(const Mesh& mesh, std::int64_t per_node) {
  mesh_ = mesh;
  per_node_ = std::max<std::int64_t>(1, per_node);
  update();
}

void MeshCanvas::setColourAxis(Axis axis) {
  colour_ = axis;
  update();
}

void MeshCanvas::setShownNodes(std::int64_t nodes) {
  shown_nodes_ = std::max<std::int64_t>(1, nodes);
  update();
}

QRectF MeshCanvas::area() const { return QRectF(12, 52, width() - 24, height() - 64 - 28); }

QString MeshCanvas::deviceDescription(std::int64_t rank) const {
  return tr("rank %1: node %2, device %3; %4").arg(rank).arg(rank / per_node_).arg(rank % per_node_).arg(mesh_coordinates(mesh_, rank));
}

void MeshCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  const std::int64_t world = mesh_.world_size();
  if (mesh_.axes.empty() || world < 1) {
    p.drawText(rect(), Qt::AlignCenter, tr("Select a plan to see its mesh."));
    return;
  }
  const std::int64_t nodes = (world + per_node_ - 1) / per_node_;
  const std::int64_t shown = std::min(nodes, shown_nodes_);
  const std::int64_t shown_world = std::min(world, shown * per_node_);
  QStringList order;
  for (const auto& a : mesh_.axes) order << QString::fromStdString(to_string(a.axis));
  draw_title(p, QRectF(12, 4, width() - 24, 44), tr("Mesh %1: %2 devices on %3 nodes of %4").arg(QString::fromStdString(mesh_.to_string())).arg(world).arg(nodes).arg(per_node_),
             tr("coloured by the %1 coordinate; labels (%2); showing nodes 0-%3 of %4; hover a device for its rank")
                 .arg(QString::fromStdString(to_string(colour_)))
                 .arg(order.join(','))
                 .arg(shown - 1)
                 .arg(nodes));
  const QRectF a = area();
  const MeshLayout layout = mesh_layout(shown_world, per_node_, a.width(), a.height());
  const QFontMetricsF fm(font());
  for (std::int64_t n = 0; n < layout.nodes; ++n) {
    const QRectF box = node_rect(layout, a, n).adjusted(1, 1, -1, -1);
    p.setPen(QPen(QColor(120, 120, 120), 1));
    p.setBrush(QColor(245, 245, 245));
    p.drawRoundedRect(box, 3, 3);
  }
  for (std::int64_t rank = 0; rank < shown_world; ++rank) {
    const QRectF cell = device_rect(layout, a, rank).adjusted(1, 1, -1, -1);
    const QColor colour = contrasting_color(static_cast<std::size_t>(mesh_.coordinate(rank, colour_)));
    p.setPen(Qt::NoPen);
    p.setBrush(colour);
    p.drawRect(cell);
    const QString label = short_coordinates(mesh_, rank);
    if (fm.horizontalAdvance(label) + 4 < cell.width() && fm.height() * 2 + 2 < cell.height()) {
      p.setPen(text_color_on(colour));
      p.drawText(cell, Qt::AlignCenter, QString::number(rank) + "\n" + label);
    } else if (fm.horizontalAdvance(label) + 4 < cell.width() && fm.height() < cell.height()) {
      p.setPen(text_color_on(colour));
      p.drawText(cell, Qt::AlignCenter, label);
    }
  }
  // Legend: one swatch per coordinate of the colour axis.
  const std::int64_t values = mesh_.size(colour_);
  double x = 12;
  const double y = height() - 22;
  p.setPen(Qt::black);
  const QString lead = QString::fromStdString(to_string(colour_)) + ":";
  p.drawText(QPointF(x, y + 12), lead);
  x += fm.horizontalAdvance(lead) + 6;
  for (std::int64_t v = 0; v < std::min<std::int64_t>(values, 20); ++v) {
    p.setBrush(contrasting_color(static_cast<std::size_t>(v)));
    p.setPen(Qt::NoPen);
    p.drawRect(QRectF(x, y + 2, 12, 12));
    p.setPen(Qt::black);
    p.drawText(QPointF(x + 15, y + 12), QString::number(v));
    x += 15 + fm.horizontalAdvance(QString::number(v)) + 8;
  }
}

bool MeshCanvas::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const std::int64_t world = mesh_.world_size();
    const std::int64_t shown_world = std::min(world, shown_nodes_ * per_node_);
    const QRectF a = area();
    const std::int64_t rank = mesh_.axes.empty() ? -1 : device_at(mesh_layout(shown_world, per_node_, a.width(), a.height()), a, help->pos());
    if (rank >= 0) QToolTip::showText(help->globalPos(), deviceDescription(rank), this);
    else QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

MeshPanel::MeshPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Colour by axis:")));
  axis_ = new QComboBox;
  bar->addWidget(axis_);
  bar->addSpacing(16);
  bar->addWidget(new QLabel(tr("Nodes shown:")));
  nodes_ = new QSpinBox;
  nodes_->setRange(1, 1 << 16);
  nodes_->setValue(16);
  bar->addWidget(nodes_);
  bar->addStretch(1);
  layout->addLayout(bar);
  canvas_ = new MeshCanvas;
  layout->addWidget(canvas_, 1);
  connect(axis_, &QComboBox::currentTextChanged, this, [this](const QString& text) {
    if (auto axis = parse_axis(text.toStdString())) canvas_->setColourAxis(*axis);
  });
  connect(nodes_, &QSpinBox::valueChanged, this, [this](int n) { canvas_->setShownNodes(n); });
}

void MeshPanel::setMesh(const Mesh& mesh, std::int64_t per_node) {
  const QString previous = axis_->currentText();
  mesh_ = mesh;
  axis_->blockSignals(true);
  axis_->clear();
  for (const auto& a : mesh.axes) axis_->addItem(QString::fromStdString(to_string(a.axis)));
  int index = axis_->findText(previous);
  if (index < 0) index = axis_->findText("tp");
  if (index < 0) index = 0;
  axis_->setCurrentIndex(index);
  axis_->blockSignals(false);
  const std::int64_t nodes = (mesh.world_size() + per_node - 1) / std::max<std::int64_t>(per_node, 1);
  nodes_->setMaximum(static_cast<int>(std::max<std::int64_t>(nodes, 1)));
  canvas_->setMesh(mesh, per_node);
  canvas_->setShownNodes(nodes_->value());
  if (auto axis = parse_axis(axis_->currentText().toStdString())) canvas_->setColourAxis(*axis);
}

// ---------------------------------------------------------------- sharding

ShardingCanvas::ShardingCanvas(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void ShardingCanvas::setSharding(const std::optional<ShardingSpec>& spec, const Mesh& mesh, const QString& problem) {
  spec_ = spec;
  mesh_ = mesh;
  problem_ = problem;
  grid_ = spec ? sharding_grid(*spec, mesh) : ShardingGrid{};
  update();
}

QRectF ShardingCanvas::gridArea() const {
  const double left = 70, top = 96, right = 16, bottom = 40;
  return QRectF(left, top, std::max(10.0, width() - left - right), std::max(10.0, height() - top - bottom));
}

void ShardingCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  if (!spec_) {
    p.setPen(QColor(198, 40, 40));
    p.drawText(rect().adjusted(20, 20, -20, -20), Qt::AlignCenter | Qt::TextWordWrap,
               problem_.isEmpty() ? tr("Select a plan and a tensor.") : problem_);
    return;
  }
  const ShardingSpec& s = *spec_;
  QStringList shape;
  for (const auto& d : s.dims) shape << QString::fromStdString(d.name) + " " + QString::number(d.size);
  QStringList stages;
  for (auto st : s.stages) stages << QString::number(st);
  QStringList replicated;
  for (Axis a : s.replicated_over) replicated << QString::fromStdString(to_string(a));
  draw_title(p, QRectF(12, 4, width() - 24, 44),
             tr("%1 (%2): [%3]  %4").arg(QString::fromStdString(s.tensor), QString::fromStdString(to_string(s.role)), shape.join(" x "),
                                         QString::fromStdString(s.partition_text())),
             tr("%1; on pipeline stage %2%3").arg(QString::fromStdString(s.rule), stages.join(" and "),
                                                  replicated.isEmpty() ? QString() : tr("; replicated over %1").arg(replicated.join(", "))));
  p.setPen(QColor(70, 70, 70));
  p.drawText(QRectF(12, 50, width() - 24, 40), Qt::AlignLeft | Qt::AlignVCenter | Qt::TextWordWrap,
             tr("%1 blocks (%2 x %3); each cell lists the devices holding that block (replicas merged), sized by its share")
                 .arg(grid_.rows * grid_.columns)
                 .arg(grid_.rows)
                 .arg(grid_.columns));
  const QRectF a = gridArea();
  layout_sharding_grid(grid_, a);
  const QFontMetricsF fm(font());
  for (std::size_t i = 0; i < grid_.cells.size(); ++i) {
    const ShardingCell& cell = grid_.cells[i];
    const QColor colour = cell.devices.empty() ? QColor(230, 230, 230) : contrasting_color(i);
    p.setPen(QPen(Qt::white, 1.5));
    p.setBrush(colour);
    p.drawRect(cell.rect);
    QString text;
    if (cell.devices.size() == 1) text = tr("device %1").arg(cell.devices.front());
    else if (!cell.devices.empty()) text = tr("devices %1").arg(QString::fromStdString(describe_devices(cell.devices, 6)));
    const QRectF inner = cell.rect.adjusted(3, 2, -3, -2);
    const QRectF bounds = fm.boundingRect(inner, Qt::AlignCenter | Qt::TextWordWrap, text);
    if (!text.isEmpty() && bounds.width() <= inner.width() + 0.5 && bounds.height() <= inner.height() + 0.5) {
      p.setPen(text_color_on(colour));
      p.drawText(inner, Qt::AlignCenter | Qt::TextWordWrap, text);
    } else if (fm.horizontalAdvance(QString::number(i)) < inner.width() && fm.height() < inner.height()) {
      p.setPen(text_color_on(colour));
      p.drawText(inner, Qt::AlignCenter, QString::number(cell.devices.size() == 1 ? cell.devices.front() : static_cast<std::int64_t>(i)));
    }
  }
  // Axis labels: what the rows and the columns are.
  p.setPen(Qt::black);
  p.drawText(QRectF(a.left(), a.bottom() + 4, a.width(), 20), Qt::AlignCenter,
             tr("columns: %1").arg(grid_.column_label.empty() ? tr("one block") : QString::fromStdString(grid_.column_label)));
  if (!grid_.row_label.empty()) {
    p.save();
    p.translate(a.left() - 14, a.center().y());
    p.rotate(-90);
    p.drawText(QRectF(-a.height() / 2, -10, a.height(), 20), Qt::AlignCenter, tr("rows: %1").arg(QString::fromStdString(grid_.row_label)));
    p.restore();
  }
}

bool ShardingCanvas::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && spec_) {
    auto* help = static_cast<QHelpEvent*>(e);
    for (const auto& cell : grid_.cells) {
      if (!cell.rect.contains(help->pos())) continue;
      const auto rows = grid_.row_extents[static_cast<std::size_t>(cell.row)];
      const auto cols = grid_.column_extents[static_cast<std::size_t>(cell.column)];
      QToolTip::showText(help->globalPos(),
                         tr("block (%1, %2): %3 x %4 elements\ndevices: %5")
                             .arg(cell.row)
                             .arg(cell.column)
                             .arg(rows)
                             .arg(cols)
                             .arg(QString::fromStdString(describe_devices(cell.devices, 32))),
                         this);
      return true;
    }
    QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

ShardingPanel::ShardingPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  bar->addWidget(new QLabel(tr("Layer:")));
  layer_ = new QSpinBox;
  layer_->setRange(0, 0);
  bar->addWidget(layer_);
  bar->addWidget(new QLabel(tr("Tensor:")));
  tensor_ = new QComboBox;
  tensor_->setMinimumContentsLength(22);
  bar->addWidget(tensor_);
  bar->addWidget(new QLabel(tr("State:")));
  role_ = new QComboBox;
  for (TensorRole r : {TensorRole::parameters, TensorRole::gradients, TensorRole::optimizer_moment}) {
    role_->addItem(QString::fromStdString(to_string(r)), static_cast<int>(r));
  }
  bar->addWidget(role_);
  bar->addStretch(1);
  layout->addLayout(bar);
  canvas_ = new ShardingCanvas;
  layout->addWidget(canvas_, 1);
  connect(layer_, &QSpinBox::valueChanged, this, [this] { refillTensors(); });
  connect(tensor_, &QComboBox::currentIndexChanged, this, [this] { update(); });
  connect(role_, &QComboBox::currentIndexChanged, this, [this] { update(); });
}

void ShardingPanel::setPlan(const ModelSpec& model, const Plan& plan) {
  model_ = model;
  plan_ = plan;
  has_plan_ = true;
  std::int64_t layers = 1;
  if (model.kind == ModelKind::transformer) layers = model.transformer.layers;
  if (model.kind == ModelKind::mlp) layers = std::max<std::int64_t>(1, static_cast<std::int64_t>(model.mlp.layer_sizes.size()) - 1);
  layer_->blockSignals(true);
  layer_->setRange(0, static_cast<int>(layers - 1));
  layer_->blockSignals(false);
  refillTensors();
}

void ShardingPanel::refillTensors() {
  if (!has_plan_) return;
  const QString previous = tensor_->currentText();
  const QString previous_suffix = previous.section('.', 1);
  tensor_->blockSignals(true);
  tensor_->clear();
  for (const auto& t : sharding_tensors(model_, layer_->value())) tensor_->addItem(QString::fromStdString(t.name), t.activation);
  int index = tensor_->findText(previous);
  if (index < 0 && previous.startsWith("layer")) {  // the same tensor of the newly chosen layer
    index = tensor_->findText(QStringLiteral("layer%1.%2").arg(layer_->value()).arg(previous_suffix));
  }
  if (index < 0) {
    for (int i = 0; i < tensor_->count(); ++i) {
      if (tensor_->itemText(i).endsWith("mlp.w_in")) index = i;
    }
  }
  tensor_->setCurrentIndex(std::max(index, 0));
  tensor_->blockSignals(false);
  update();
}

bool ShardingPanel::choose(std::int64_t layer, const QString& tensor, TensorRole role) {
  layer_->setValue(static_cast<int>(layer));
  const int index = tensor_->findText(tensor);
  if (index < 0) return false;
  tensor_->setCurrentIndex(index);
  const int r = role_->findData(static_cast<int>(role));
  if (r >= 0) role_->setCurrentIndex(r);
  update();
  return true;
}

void ShardingPanel::update() {
  if (!has_plan_ || tensor_->currentIndex() < 0) return;
  const bool activation = tensor_->currentData().toBool();
  role_->setEnabled(!activation);
  const TensorRole role = activation ? TensorRole::activation : static_cast<TensorRole>(role_->currentData().toInt());
  auto spec = sharding_spec(model_, plan_, tensor_->currentText().toStdString(), role);
  if (spec.ok()) {
    canvas_->setSharding(spec.value, plan_.mesh, {});
  } else {
    QStringList problems;
    for (const auto& p : spec.problems) problems << QString::fromStdString(describe(p));
    canvas_->setSharding(std::nullopt, plan_.mesh, problems.join("\n"));
  }
}

// ---------------------------------------------------------------- memory

MemoryCanvas::MemoryCanvas(QWidget* parent) : QWidget(parent) {
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void MemoryCanvas::setMemory(const Plan& plan, const std::optional<MemoryEstimate>& memory) {
  plan_ = plan;
  memory_ = memory;
  update();
}

void MemoryCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  if (!memory_ || memory_->stages.empty()) {
    p.drawText(rect(), Qt::AlignCenter, tr("Select a plan to see its memory."));
    return;
  }
  const MemoryEstimate& m = *memory_;
  draw_title(p, QRectF(12, 4, width() - 24, 44),
             tr("Memory per device, by pipeline stage (%1)").arg(QString::fromStdString(plan_.mesh.to_string())),
             tr("every device of a stage holds the same amounts; worst stage %1: %2 of %3 usable (%4 capacity)")
                 .arg(m.worst().stage)
                 .arg(format_gib(m.worst().memory.total_bytes()), format_gib(m.usable_bytes), format_gib(m.capacity_bytes)));
  const QRectF plot(70, 60, width() - 70 - 250, height() - 60 - 50);
  double top = m.capacity_bytes;
  for (const auto& s : m.stages) top = std::max(top, s.memory.total_bytes());
  const double max_gib = nice_ceiling(top / kGiB * 1.02);
  const double max_bytes = max_gib * kGiB;
  // Grid and y axis in GiB.
  const QFontMetricsF fm(font());
  const double step = nice_ceiling(max_gib / 6);
  for (double g = 0; g <= max_gib + 1e-9; g += step) {
    const double y = bar_y(g * kGiB, max_bytes, plot);
    p.setPen(QPen(QColor(225, 225, 225), 1));
    p.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y));
    p.setPen(Qt::black);
    p.drawText(QRectF(0, y - 8, plot.left() - 6, 16), Qt::AlignRight | Qt::AlignVCenter, QString::number(g));
  }
  p.save();
  p.translate(14, plot.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-100, -8, 200, 16), Qt::AlignCenter, tr("GiB per device"));
  p.restore();
  // The rows `meshplan explain` prints: steady parts, then the peak's
  // transients and the stack's reserves; a transient not at the peak is not
  // stacked (it is not in the total). A tick marks the allocated peak.
  const std::vector<MemoryRow> legend = memory_rows(m.worst().memory);
  const std::size_t n = m.stages.size();
  const double slot = plot.width() / static_cast<double>(n);
  const double bar_width = std::min(80.0, slot * 0.6);
  for (std::size_t i = 0; i < n; ++i) {
    const MemoryBreakdown& b = m.stages[i].memory;
    const double x = plot.left() + slot * static_cast<double>(i) + (slot - bar_width) / 2;
    std::vector<double> parts;
    for (const MemoryRow& row : memory_rows(b)) parts.push_back(row.at_peak ? row.bytes : 0);
    const auto rects = stacked_bar(parts, max_bytes, plot, x, bar_width);
    for (std::size_t k = 0; k < rects.size(); ++k) {
      p.setPen(Qt::NoPen);
      p.setBrush(contrasting_color(k));
      p.drawRect(rects[k]);
    }
    const double peak_y = bar_y(b.allocated_peak_bytes(), max_bytes, plot);
    p.setPen(QPen(Qt::black, 1.5));
    p.drawLine(QPointF(x - 6, peak_y), QPointF(x + bar_width + 6, peak_y));
    p.setPen(Qt::black);
    const QString total = QString::number(b.total_bytes() / kGiB, 'f', 1);
    p.drawText(QRectF(x - 20, rects.back().top() - 18, bar_width + 40, 16), Qt::AlignCenter, total);
    const auto ranks = stage_ranks(plan_.mesh, m.stages[i].stage);
    p.drawText(QRectF(plot.left() + slot * static_cast<double>(i), plot.bottom() + 4, slot, 32), Qt::AlignHCenter | Qt::AlignTop,
               tr("stage %1\n%2 devices").arg(m.stages[i].stage).arg(ranks.size()));
  }
  // Capacity and usable lines.
  const double cap_y = bar_y(m.capacity_bytes, max_bytes, plot);
  const double usable_y = bar_y(m.usable_bytes, max_bytes, plot);
  p.setPen(QPen(QColor(198, 40, 40), 2));
  p.drawLine(QPointF(plot.left(), cap_y), QPointF(plot.right(), cap_y));
  p.setPen(QPen(QColor(198, 40, 40), 1.5, Qt::DashLine));
  p.drawLine(QPointF(plot.left(), usable_y), QPointF(plot.right(), usable_y));
  p.setPen(QColor(198, 40, 40));
  p.drawText(QPointF(plot.right() + 6, cap_y + 4), tr("capacity %1").arg(format_gib(m.capacity_bytes)));
  p.drawText(QPointF(plot.right() + 6, usable_y + 16), tr("usable %1").arg(format_gib(m.usable_bytes)));
  // Legend, bottom part first as stacked; the worst stage's transient that
  // is not at the peak is listed as such.
  double ly = plot.bottom() - static_cast<double>(legend.size() + 1) * 20;
  for (std::size_t k = legend.size(); k-- > 0;) {
    p.setPen(Qt::NoPen);
    p.setBrush(contrasting_color(k));
    p.drawRect(QRectF(plot.right() + 10, ly, 12, 12));
    p.setPen(legend[k].at_peak ? QColor(Qt::black) : QColor(150, 150, 150));
    p.drawText(QPointF(plot.right() + 28, ly + 11),
               legend[k].at_peak ? tr(legend[k].name.c_str()) : tr("%1 (not at peak)").arg(tr(legend[k].name.c_str())));
    ly += 20;
  }
  p.setPen(QPen(Qt::black, 1.5));
  p.drawLine(QPointF(plot.right() + 8, ly + 6), QPointF(plot.right() + 24, ly + 6));
  p.drawText(QPointF(plot.right() + 28, ly + 11), tr("allocated peak"));
  p.setPen(QPen(Qt::black, 1));
  p.drawLine(plot.bottomLeft(), plot.bottomRight());
  p.drawLine(plot.bottomLeft(), plot.topLeft());
}

// ---------------------------------------------------------------- roofline

RooflineCanvas::RooflineCanvas(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void RooflineCanvas::setRoofline(const Roofline& roofline, const QString& device) {
  roofline_ = roofline;
  device_ = device;
  update();
}

LogLogMap RooflineCanvas::map() const {
  LogLogMap m;
  m.plot = QRectF(80, 60, width() - 80 - 24, height() - 60 - 56);
  double lo_x = 1, hi_x = 1e4, lo_y = roofline_.peak_flops_per_s / 1e4, hi_y = roofline_.peak_flops_per_s * 2;
  for (const auto& pt : roofline_.points) {
    lo_x = std::min(lo_x, pt.intensity());
    hi_x = std::max(hi_x, pt.intensity());
    lo_y = std::min(lo_y, pt.achieved_flops_per_s());
  }
  const auto xs = decades(lo_x, hi_x), ys = decades(lo_y, hi_y);
  m.x_min = xs.empty() ? 1 : xs.front();
  m.x_max = xs.empty() ? 1e4 : xs.back();
  m.y_min = ys.empty() ? 1e9 : ys.front();
  m.y_max = ys.empty() ? 1e15 : ys.back();
  return m;
}

void RooflineCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.setRenderHint(QPainter::Antialiasing);
  if (roofline_.points.empty() || !(roofline_.peak_flops_per_s > 0)) {
    p.drawText(rect(), Qt::AlignCenter, tr("Select a plan to see its roofline."));
    return;
  }
  const LogLogMap m = map();
  const double ridge = roofline_.achievable_flops_per_s / roofline_.memory_bytes_per_s;
  draw_title(p, QRectF(12, 4, width() - 24, 44), tr("Roofline of one layer's ops on one device (%1)").arg(device_),
             tr("forward pass, one micro-batch; ridge point %1 FLOP/byte; points below the roof lose to tiles, waves or small shapes")
                 .arg(ridge, 0, 'f', 0));
  p.setClipRect(m.plot.adjusted(-1, -1, 1, 1));
  for (double x : decades(m.x_min, m.x_max)) {
    p.setPen(QPen(QColor(228, 228, 228), 1));
    p.drawLine(QPointF(m.x_of(x), m.plot.top()), QPointF(m.x_of(x), m.plot.bottom()));
  }
  for (double y : decades(m.y_min, m.y_max)) {
    p.setPen(QPen(QColor(228, 228, 228), 1));
    p.drawLine(QPointF(m.plot.left(), m.y_of(y)), QPointF(m.plot.right(), m.y_of(y)));
  }
  auto ceiling = [&](double peak, const QPen& pen) {
    QPainterPath path;
    const double steps = 200;
    for (int i = 0; i <= 200; ++i) {
      const double x = std::pow(10.0, std::log10(m.x_min) + (std::log10(m.x_max) - std::log10(m.x_min)) * i / steps);
      const QPointF pt = m.map(x, roofline_ceiling(x, peak, roofline_.memory_bytes_per_s));
      if (i == 0) path.moveTo(pt);
      else path.lineTo(pt);
    }
    p.setPen(pen);
    p.setBrush(Qt::NoBrush);
    p.drawPath(path);
  };
  ceiling(roofline_.peak_flops_per_s, QPen(QColor(120, 120, 120), 1.5, Qt::DashLine));
  ceiling(roofline_.achievable_flops_per_s, QPen(QColor(33, 33, 33), 2));
  const QFontMetricsF fm(font());
  std::vector<QRectF> labels;
  for (const auto& pt : roofline_.points) {
    const QPointF c = m.map(pt.intensity(), pt.achieved_flops_per_s());
    const QColor colour = pt.gemm ? QColor(31, 119, 180) : QColor(255, 127, 14);
    p.setPen(QPen(colour.darker(130), 1));
    p.setBrush(colour);
    p.drawEllipse(c, 4.5, 4.5);
    QString name = QString::fromStdString(pt.name);
    name = name.section('.', 1);  // "mlp.w_in" without "layer0."
    if (name.isEmpty()) name = QString::fromStdString(pt.name);
    QRectF box(c.x() + 6, c.y() - fm.height() / 2, fm.horizontalAdvance(name) + 2, fm.height());
    bool clash = false;
    for (const auto& other : labels) clash = clash || other.intersects(box);
    if (clash) {
      box.moveTop(box.top() + fm.height());
      clash = false;
      for (const auto& other : labels) clash = clash || other.intersects(box);
    }
    if (!clash) {
      p.setPen(QColor(40, 40, 40));
      p.drawText(box, Qt::AlignLeft | Qt::AlignVCenter, name);
      labels.push_back(box);
    }
  }
  p.setClipping(false);
  p.setPen(Qt::black);
  p.setBrush(Qt::NoBrush);
  p.drawRect(m.plot);
  for (double x : decades(m.x_min, m.x_max)) {
    p.drawText(QRectF(m.x_of(x) - 40, m.plot.bottom() + 4, 80, 16), Qt::AlignCenter, QString::number(x, 'g', 3));
  }
  for (double y : decades(m.y_min, m.y_max)) {
    p.drawText(QRectF(0, m.y_of(y) - 8, m.plot.left() - 6, 16), Qt::AlignRight | Qt::AlignVCenter,
               QString::number(y / 1e12, 'g', 3) + " T");
  }
  p.drawText(QRectF(m.plot.left(), m.plot.bottom() + 22, m.plot.width(), 18), Qt::AlignCenter,
             tr("arithmetic intensity (FLOP per byte moved)"));
  p.save();
  p.translate(16, m.plot.center().y());
  p.rotate(-90);
  p.drawText(QRectF(-150, -8, 300, 16), Qt::AlignCenter, tr("achieved FLOP/s"));
  p.restore();
  // Legend
  const double lx = m.plot.left() + 12, ly = m.plot.top() + 10;
  p.setPen(QPen(QColor(33, 33, 33), 2));
  p.drawLine(QPointF(lx, ly + 6), QPointF(lx + 24, ly + 6));
  p.setPen(Qt::black);
  p.drawText(QPointF(lx + 30, ly + 10), tr("achievable: %1 TFLOP/s, %2 GB/s").arg(roofline_.achievable_flops_per_s / 1e12, 0, 'f', 0).arg(roofline_.memory_bytes_per_s / 1e9, 0, 'f', 0));
  p.setPen(QPen(QColor(120, 120, 120), 1.5, Qt::DashLine));
  p.drawLine(QPointF(lx, ly + 24), QPointF(lx + 24, ly + 24));
  p.setPen(Qt::black);
  p.drawText(QPointF(lx + 30, ly + 28), tr("peak: %1 TFLOP/s").arg(roofline_.peak_flops_per_s / 1e12, 0, 'f', 0));
  p.setBrush(QColor(31, 119, 180));
  p.setPen(Qt::NoPen);
  p.drawEllipse(QPointF(lx + 12, ly + 42), 4.5, 4.5);
  p.setPen(Qt::black);
  p.drawText(QPointF(lx + 30, ly + 46), tr("matmuls (GEMM time model)"));
  p.setBrush(QColor(255, 127, 14));
  p.setPen(Qt::NoPen);
  p.drawEllipse(QPointF(lx + 12, ly + 60), 4.5, 4.5);
  p.setPen(Qt::black);
  p.drawText(QPointF(lx + 30, ly + 64), tr("memory-bound ops"));
}

bool RooflineCanvas::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && !roofline_.points.empty()) {
    auto* help = static_cast<QHelpEvent*>(e);
    const LogLogMap m = map();
    std::vector<QPointF> pixels;
    for (const auto& pt : roofline_.points) pixels.push_back(m.map(pt.intensity(), pt.achieved_flops_per_s()));
    const int i = nearest_point(pixels, help->pos(), 1, 1);
    if (i >= 0 && QLineF(pixels[static_cast<std::size_t>(i)], help->pos()).length() < 12) {
      const auto& pt = roofline_.points[static_cast<std::size_t>(i)];
      QToolTip::showText(help->globalPos(),
                         tr("%1\n%2 GFLOP, %3 MB, %4\nintensity %5 FLOP/B, %6 TFLOP/s")
                             .arg(QString::fromStdString(pt.name))
                             .arg(pt.flops / 1e9, 0, 'f', 2)
                             .arg(pt.bytes / 1e6, 0, 'f', 2)
                             .arg(format_seconds(pt.time_s))
                             .arg(pt.intensity(), 0, 'f', 1)
                             .arg(pt.achieved_flops_per_s() / 1e12, 0, 'f', 1),
                         this);
      return true;
    }
    QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

}  // namespace meshplan::studio
