// LaunchPanel: QProcess + a metrics tail polled twice a second.
#include "gui/app/launch_panel.hpp"

#include <QCheckBox>
#include <QChart>
#include <QChartView>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRegularExpression>
#include <QSpinBox>
#include <QSplitter>
#include <QThread>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>

#include <cmath>

namespace meshplan::studio {
namespace {

QChartView* make_chart(const QString& title, const QString& y_title, QLineSeries*& series, QValueAxis*& x, QValueAxis*& y) {
  auto* chart = new QChart;
  chart->setTitle(title);
  series = new QLineSeries;
  series->setName(y_title);
  chart->addSeries(series);
  x = new QValueAxis;
  x->setTitleText(QObject::tr("step"));
  x->setLabelFormat("%d");
  x->setRange(0, 10);
  y = new QValueAxis;
  y->setTitleText(y_title);
  y->setRange(0, 1);
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
  auto* view = new QChartView(chart);
  view->setRenderHint(QPainter::Antialiasing);
  view->setMinimumHeight(220);
  return view;
}

}  // namespace

LaunchPanel::LaunchPanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  program_ = new QLineEdit;
  program_->setToolTip(tr("The meshplan command to run"));
  form->addRow(tr("meshplan"), program_);
  plan_label_ = new QLabel(tr("Select a plan first."));
  plan_label_->setWordWrap(true);
  form->addRow(tr("Plan"), plan_label_);
  auto* options = new QHBoxLayout;
  steps_ = new QSpinBox;
  steps_->setRange(1, 1000000);
  steps_->setValue(20);
  options->addWidget(new QLabel(tr("Steps:")));
  options->addWidget(steps_);
  options->addWidget(new QLabel(tr("Data:")));
  data_ = new QLineEdit;
  data_->setPlaceholderText(tr("default: synthetic-text for transformers, fashion-mnist or synthetic for MLPs"));
  data_->setToolTip(tr("--data: text:PATH or synthetic-text for transformers; fashion-mnist[:DIR] or synthetic for MLPs"));
  options->addWidget(data_, 1);
  shrink_ = new QCheckBox(tr("Rehearse with a shrunken model (--shrink)"));
  options->addWidget(shrink_);
  form->addRow(tr("Run"), options);
  layout->addLayout(form);
  auto* buttons = new QHBoxLayout;
  start_ = new QPushButton(tr("Launch"));
  stop_ = new QPushButton(tr("Stop"));
  stop_->setEnabled(false);
  status_ = new QLabel(tr("Idle."));
  status_->setWordWrap(true);
  buttons->addWidget(start_);
  buttons->addWidget(stop_);
  buttons->addWidget(status_, 1);
  layout->addLayout(buttons);

  auto* split = new QSplitter(Qt::Vertical);
  auto* charts = new QWidget;
  auto* chart_row = new QHBoxLayout(charts);
  chart_row->setContentsMargins(0, 0, 0, 0);
  loss_view_ = make_chart(tr("Loss"), tr("loss"), loss_, loss_x_, loss_y_);
  step_view_ = make_chart(tr("Step time: measured and predicted"), tr("seconds"), step_, step_x_, step_y_);
  step_->setName(tr("measured step s"));
  predicted_ = new QLineSeries;
  predicted_->setName(tr("predicted step s"));
  QPen pen(QColor(198, 40, 40));
  pen.setStyle(Qt::DashLine);
  pen.setWidth(2);
  predicted_->setPen(pen);
  step_view_->chart()->addSeries(predicted_);
  predicted_->attachAxis(step_x_);
  predicted_->attachAxis(step_y_);
  chart_row->addWidget(loss_view_);
  chart_row->addWidget(step_view_);
  split->addWidget(charts);
  log_ = new QPlainTextEdit;
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(5000);
  log_->setFont(QFont("monospace"));
  split->addWidget(log_);
  layout->addWidget(split, 1);

  poll_ = new QTimer(this);
  poll_->setInterval(500);
  connect(poll_, &QTimer::timeout, this, &LaunchPanel::pollMetrics);
  connect(start_, &QPushButton::clicked, this, &LaunchPanel::start);
  connect(stop_, &QPushButton::clicked, this, &LaunchPanel::stop);
}

LaunchPanel::~LaunchPanel() {
  if (process_ && process_->state() != QProcess::NotRunning) {
    process_->kill();
    process_->waitForFinished(3000);
  }
}

void LaunchPanel::setProgram(const QString& path) { program_->setText(path); }

void LaunchPanel::setPlan(const QString& plan_path, const QString& description, double predicted_step_s, qint64 world_size) {
  plan_path_ = plan_path;
  predicted_step_s_ = predicted_step_s;
  world_size_ = world_size;
  plan_label_->setText(tr("%1\n%2 (%3 ranks; predicted step %4 s)").arg(description, plan_path).arg(world_size).arg(predicted_step_s, 0, 'f', 3));
}

void LaunchPanel::setData(const QString& source) { data_->setText(source); }

void LaunchPanel::setSteps(int steps) { steps_->setValue(steps); }
int LaunchPanel::lossPoints() const { return static_cast<int>(loss_->count()); }
int LaunchPanel::stepTimePoints() const { return static_cast<int>(step_->count()); }
QString LaunchPanel::statusText() const { return status_->text(); }
QString LaunchPanel::logText() const { return log_->toPlainText(); }

bool LaunchPanel::isRunning() const { return process_ && process_->state() != QProcess::NotRunning; }

void LaunchPanel::setStatus(const QString& text, bool failure) {
  status_->setText(text);
  status_->setStyleSheet(failure ? "color: #c62828; font-weight: bold;" : QString());
  emit statusChanged(text);
}

QString LaunchPanel::cliHelp(const QStringList& arguments) {
  QProcess probe;
  probe.start(program_->text(), arguments);
  if (!probe.waitForFinished(5000)) return {};
  return QString::fromUtf8(probe.readAllStandardOutput());
}

void LaunchPanel::start() {
  if (isRunning()) return;
  if (plan_path_.isEmpty()) {
    setStatus(tr("Select a plan first."), true);
    return;
  }
  const QString program = program_->text();
  if (program.isEmpty() || !QFileInfo(program).isExecutable()) {
    setStatus(tr("Cannot run '%1': not an executable file. Set the path to the meshplan command.").arg(program), true);
    return;
  }
  LaunchRequest request;
  request.plan_path = plan_path_;
  if (!work_dir_.isValid()) {
    setStatus(tr("Cannot create a temporary folder for the run's metrics: %1").arg(work_dir_.errorString()), true);
    return;
  }
  metrics_path_ = work_dir_.filePath("metrics.jsonl");
  QFile::remove(metrics_path_);
  request.metrics_path = metrics_path_;
  request.steps = steps_->value();
  request.data = data_->text().trimmed();
  request.shrink = shrink_->isChecked();
  request.has_launch =
      cliHelp({"--help"}).contains(QRegularExpression("^\\s+launch\\b", QRegularExpression::MultilineOption));
  if (request.shrink && !cliHelp({request.has_launch ? "launch" : "train", "--help"}).contains("--shrink")) {
    setStatus(tr("This meshplan has no --shrink rehearsal yet; untick it to run the plan as it is."), true);
    return;
  }
  // Every rank is a process on this machine, with or without --shrink (which
  // keeps the mesh): refuse what would swamp it, as `meshplan launch` does.
  const qint64 limit = 4 * std::max(1, QThread::idealThreadCount());
  if (world_size_ > limit) {
    setStatus(tr("The plan has %1 ranks and this machine %2 cores: launching would start %1 processes here "
                 "(meshplan launch allows 4 per core). Run `meshplan launch` on the cluster, or rehearse a "
                 "plan with a smaller mesh.")
                  .arg(world_size_)
                  .arg(QThread::idealThreadCount()),
              true);
    return;
  }
  const QStringList arguments = launch_arguments(request);

  loss_->clear();
  step_->clear();
  predicted_->clear();
  loss_min_ = loss_max_ = step_max_ = 0;
  log_->clear();
  log_->appendPlainText("$ " + program + " " + arguments.join(' '));
  if (!request.has_launch) log_->appendPlainText(tr("(this meshplan has no 'launch' command: running 'train')"));
  tail_ = std::make_unique<MetricsTail>(metrics_path_);

  delete process_;
  process_ = new QProcess(this);
  process_->setProcessChannelMode(QProcess::MergedChannels);
  connect(process_, &QProcess::readyReadStandardOutput, this, [this] {
    log_->appendPlainText(QString::fromUtf8(process_->readAllStandardOutput()).trimmed());
  });
  connect(process_, &QProcess::finished, this, &LaunchPanel::finished);
  connect(process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError error) {
    if (error == QProcess::FailedToStart) {
      setStatus(tr("Could not start %1: %2").arg(program_->text(), process_->errorString()), true);
      start_->setEnabled(true);
      stop_->setEnabled(false);
      poll_->stop();
    }
  });
  stopping_ = false;
  start_->setEnabled(false);
  stop_->setEnabled(true);
  setStatus(tr("Running %1 %2 ...").arg(QFileInfo(program).fileName(), arguments.front()), false);
  process_->start(program, arguments);
  poll_->start();
}

void LaunchPanel::stop() {
  if (!isRunning()) return;
  stopping_ = true;
  setStatus(tr("Stopping..."), false);
  process_->terminate();
  QTimer::singleShot(5000, this, [this] {
    if (isRunning()) process_->kill();
  });
}

void LaunchPanel::pollMetrics() {
  if (!tail_) return;
  for (const QByteArray& line : tail_->readNewLines()) {
    const auto point = parse_metrics_line(line);
    if (!point) continue;
    const auto step = static_cast<double>(point->step);
    if (std::isfinite(point->loss)) {
      if (loss_->count() == 0) loss_min_ = loss_max_ = point->loss;
      loss_min_ = std::min(loss_min_, point->loss);
      loss_max_ = std::max(loss_max_, point->loss);
      loss_->append(step, point->loss);
    }
    step_->append(step, point->step_s);
    step_max_ = std::max({step_max_, point->step_s, predicted_step_s_});
    loss_x_->setRange(0, std::max(10.0, step));
    step_x_->setRange(0, std::max(10.0, step));
    const double pad = (loss_max_ - loss_min_) * 0.05 + 1e-6;
    loss_y_->setRange(loss_min_ - pad, loss_max_ + pad);
    step_y_->setRange(0, step_max_ * 1.1 + 1e-9);
    predicted_->clear();
    if (predicted_step_s_ > 0) {
      predicted_->append(0, predicted_step_s_);
      predicted_->append(std::max(10.0, step), predicted_step_s_);
    }
  }
}

void LaunchPanel::finished(int exit_code, QProcess::ExitStatus status) {
  pollMetrics();
  poll_->stop();
  start_->setEnabled(true);
  stop_->setEnabled(false);
  if (stopping_) {
    setStatus(tr("Stopped after %1 steps.").arg(step_->count()), false);
    emit runFinished(true);
  } else if (status == QProcess::CrashExit) {
    setStatus(tr("The run crashed (%1). See the log below.").arg(process_->errorString()), true);
    emit runFinished(false);
  } else if (exit_code != 0) {
    QString meaning;
    if (exit_code == 1) meaning = tr("the plan does not fit");
    if (exit_code == 2) meaning = tr("bad input: the command refused the plan or its flags");
    if (exit_code == 130) meaning = tr("interrupted");
    setStatus(tr("The run failed with exit status %1%2. The last lines of the log say why.")
                  .arg(exit_code)
                  .arg(meaning.isEmpty() ? QString() : " (" + meaning + ")"),
              true);
    emit runFinished(false);
  } else {
    setStatus(tr("Finished: %1 steps.").arg(step_->count()), false);
    emit runFinished(true);
  }
}

}  // namespace meshplan::studio
