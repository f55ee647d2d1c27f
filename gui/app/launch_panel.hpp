// The Launch panel: writes the selected plan as a plan file, runs
// `meshplan launch --plan ...` (or `meshplan train --plan ...` when the CLI
// has no launch command) as a child process with an argument list (never a
// shell), streams its log, tails its metrics JSON Lines into live charts of
// loss and step time (the plan's predicted step time as a line), can stop
// it, and says clearly how it ended.
//
// Defines: LaunchPanel.
#pragma once

#include <QProcess>
#include <QTemporaryDir>
#include <QWidget>

#include <memory>

#include "gui/core/launch.hpp"

class QCheckBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QTimer;

class QChartView;
class QLineSeries;
class QValueAxis;

namespace meshplan::studio {

class LaunchPanel : public QWidget {
  Q_OBJECT
 public:
  explicit LaunchPanel(QWidget* parent = nullptr);
  ~LaunchPanel() override;
  // The plan to run: its file (already written) and its predicted step time.
  void setPlan(const QString& plan_path, const QString& description, double predicted_step_s, qint64 world_size);
  void setData(const QString& source);  // the --data value
  void setProgram(const QString& path);
  bool isRunning() const;
  QChartView* lossChart() const { return loss_view_; }
  void setSteps(int steps);
  int lossPoints() const;
  int stepTimePoints() const;
  QString statusText() const;
  QString logText() const;
  QChartView* stepChart() const { return step_view_; }

 public slots:
  void start();
  void stop();

 signals:
  void statusChanged(const QString& text);
  void runFinished(bool ok);  // the child process ended (ok: exit status 0 or stopped by the user)

 private:
  void pollMetrics();
  void finished(int exit_code, QProcess::ExitStatus status);
  void setStatus(const QString& text, bool failure);
  QString cliHelp(const QStringList& arguments);

  QLineEdit* program_;
  QLabel* plan_label_;
  QSpinBox* steps_;
  QLineEdit* data_;
  QCheckBox* shrink_;
  QPushButton* start_;
  QPushButton* stop_;
  QLabel* status_;
  QPlainTextEdit* log_;
  QChartView* loss_view_;
  QChartView* step_view_;
  QLineSeries* loss_ = nullptr;
  QLineSeries* step_ = nullptr;
  QLineSeries* predicted_ = nullptr;
  QValueAxis* loss_x_ = nullptr;
  QValueAxis* loss_y_ = nullptr;
  QValueAxis* step_x_ = nullptr;
  QValueAxis* step_y_ = nullptr;
  QProcess* process_ = nullptr;
  QTimer* poll_ = nullptr;
  std::unique_ptr<MetricsTail> tail_;
  QString plan_path_;
  QTemporaryDir work_dir_;  // this panel's metrics and run report, removed with it
  QString metrics_path_;
  double predicted_step_s_ = 0;
  qint64 world_size_ = 1;
  double loss_min_ = 0, loss_max_ = 0, step_max_ = 0;
  bool stopping_ = false;
};

}  // namespace meshplan::studio
