// The Setup panel: model and cluster (presets or YAML files), the model's
// key figures and the cluster's size (0 = the preset's value), the global
// batch and the search constraints. Problems from resolve_setup() are shown
// under the field they name, in red, never as a dialog or an exit.
//
// Defines: SetupPanel.
#pragma once

#include <QMap>
#include <array>
#include <QWidget>

#include "gui/core/setup.hpp"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QFormLayout;
class QLabel;
class QLineEdit;
class QProgressBar;
class QPushButton;
class QSettings;
class QSpinBox;

namespace meshplan::studio {

class SetupPanel : public QWidget {
  Q_OBJECT
 public:
  explicit SetupPanel(QWidget* parent = nullptr);

  SetupInputs inputs() const;
  void setInputs(const SetupInputs& inputs);
  // Shows each problem under its field; returns how many were shown.
  int showProblems(const Problems& problems);
  void clearProblems();
  QString problemText(const QString& field) const;  // what is shown under a field ("" when none)
  void setRunning(bool running);
  void setProgress(qint64 done, qint64 total);
  void save(QSettings& settings) const;
  void restore(const QSettings& settings);

 signals:
  void runRequested();
  void cancelRequested();

 private:
  void addField(const QString& key, const QString& label, QWidget* editor, const QString& tip);
  void refreshPresetFigures();
  void browse(QComboBox* combo, const QString& folder);

  QComboBox* model_ = nullptr;
  QComboBox* cluster_ = nullptr;
  QSpinBox* layers_ = nullptr;
  QSpinBox* hidden_ = nullptr;
  QSpinBox* heads_ = nullptr;
  QSpinBox* seq_ = nullptr;
  QSpinBox* per_node_ = nullptr;
  QSpinBox* nodes_ = nullptr;
  QLabel* gpus_ = nullptr;
  QSpinBox* batch_ = nullptr;
  QLineEdit* axes_ = nullptr;
  QSpinBox* max_tp_ = nullptr;
  QSpinBox* max_pp_ = nullptr;
  QSpinBox* max_cp_ = nullptr;
  QSpinBox* max_ep_ = nullptr;
  QDoubleSpinBox* headroom_ = nullptr;
  QLineEdit* schedules_ = nullptr;
  QLineEdit* zero_ = nullptr;
  QLineEdit* recompute_ = nullptr;
  QComboBox* attention_ = nullptr;  // kAttentionChoices: fused, unfused, or both searched
  QComboBox* cp_comm_ = nullptr;    // cp_comm_choices (model/plan.hpp)
  QComboBox* loss_ = nullptr;       // loss_choices (model/plan.hpp)
  QCheckBox* fp32_gradients_ = nullptr;
  QCheckBox* bf16_moments_ = nullptr;
  std::array<QCheckBox*, kOverlapSwitches.size()> overlaps_{};  // one per overlap switch, in the table's order
  QLineEdit* recompute_modules_ = nullptr;
  QComboBox* expert_tp_ = nullptr;    // tp,1 / tp / 1
  QComboBox* ep_dispatch_ = nullptr;  // ep_dispatch_choices (model/plan.hpp)
  QSpinBox* threads_ = nullptr;
  QPushButton* run_ = nullptr;
  QPushButton* cancel_ = nullptr;
  QProgressBar* progress_ = nullptr;
  QLabel* general_ = nullptr;
  QFormLayout* form_ = nullptr;
  QMap<QString, QWidget*> editors_;
  QMap<QString, QLabel*> errors_;
  std::int64_t preset_per_node_ = 8;
};

}  // namespace meshplan::studio
