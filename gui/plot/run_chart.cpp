// Qt Charts drawing of a training run, rendered offscreen (run_chart.hpp).
#include "gui/plot/run_chart.hpp"

#include <QApplication>
#include <QChart>
#include <QChartView>
#include <QFile>
#include <QFont>
#include <QGridLayout>
#include <QImage>
#include <QLabel>
#include <QLineSeries>
#include <QPainter>
#include <QSvgGenerator>
#include <QValueAxis>
#include <QVBoxLayout>
#include <QWidget>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <vector>

namespace meshplan::plot {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

// Values are drawn as value / divisor, in `unit`.
struct Scale {
  double divisor = 1;
  QString unit;
};

Scale time_scale(double largest_s) { return largest_s < 1 ? Scale{1e-3, "ms"} : Scale{1, "s"}; }
Scale memory_scale(double largest_bytes) { return largest_bytes >= 2 * kGiB ? Scale{kGiB, "GiB"} : Scale{kMiB, "MiB"}; }

QString figure(double value) { return QString::number(value, 'g', 3); }
QString with_unit(double value, const Scale& scale) { return figure(value / scale.divisor) + " " + scale.unit; }

// The steps the panels share on their x axes; one step is widened to a unit interval.
struct StepRange {
  double first = std::numeric_limits<double>::infinity();
  double last = -std::numeric_limits<double>::infinity();
  void include(const std::vector<StepPoint>& points) {
    for (const StepPoint& p : points) {
      first = std::min(first, p.step);
      last = std::max(last, p.step);
    }
  }
};

StepRange step_range(const MetricsSeries& m) {
  StepRange range;
  for (const auto* series : {&m.train_loss, &m.step_s, &m.memory_peak_bytes, &m.eval_loss, &m.eval_accuracy}) range.include(*series);
  if (range.first == range.last) {
    range.first -= 0.5;
    range.last += 0.5;
  }
  return range;
}

// The smallest and largest value drawn on a y axis.
struct ValueRange {
  double low = std::numeric_limits<double>::infinity();
  double high = -std::numeric_limits<double>::infinity();
  void include(double value) {
    low = std::min(low, value);
    high = std::max(high, value);
  }
};

const ReportFigures kNoReport{};  // all absent: no run report

QPen pen(const char* color, Qt::PenStyle style, double width_px) {
  QPen p{QColor(color)};
  p.setStyle(style);
  p.setWidthF(width_px);
  return p;
}

// A chart with a "step" x axis and one y axis on the left.
struct Panel {
  QChart* chart = new QChart;
  QValueAxis* x = new QValueAxis;
  QValueAxis* y = new QValueAxis;
  ValueRange y_values;

  Panel(const QString& title, const QString& y_title, const StepRange& steps) {
    chart->setTitle(title);
    QFont title_font = chart->titleFont();
    title_font.setPointSizeF(title_font.pointSizeF() * 1.15);
    title_font.setBold(true);
    chart->setTitleFont(title_font);
    chart->legend()->setAlignment(Qt::AlignBottom);
    chart->setMargins(QMargins(6, 4, 6, 4));
    x->setTitleText(QObject::tr("step"));
    x->setLabelFormat("%.0f");
    x->setRange(steps.first, steps.last);
    if (steps.last - steps.first >= 4) x->applyNiceNumbers();
    y->setTitleText(y_title);
    y->setLabelFormat("%.4g");
    chart->addAxis(x, Qt::AlignBottom);
    chart->addAxis(y, Qt::AlignLeft);
  }

  QLineSeries* add(QLineSeries* series, QValueAxis* y_axis) {
    chart->addSeries(series);
    series->attachAxis(x);
    series->attachAxis(y_axis);
    return series;
  }

  // Points, each value divided by `divisor`.
  QLineSeries* add_line(const std::vector<StepPoint>& points, double divisor, const QString& name, const char* color,
                        Qt::PenStyle style = Qt::SolidLine, double width_px = 2) {
    auto* series = new QLineSeries;
    series->setName(name);
    series->setPen(pen(color, style, width_px));
    for (const StepPoint& p : points) {
      series->append(p.step, p.value / divisor);
      y_values.include(p.value / divisor);
    }
    return add(series, y);
  }

  // A horizontal line at `value` over the steps.
  QLineSeries* add_level(double value, const QString& name, const char* color, Qt::PenStyle style) {
    auto* series = new QLineSeries;
    series->setName(name);
    series->setPen(pen(color, style, 2.5));
    series->append(x->min(), value);
    series->append(x->max(), value);
    y_values.include(value);
    return add(series, y);
  }

  // Sets the y range to the values drawn: from zero for quantities whose size matters (time, memory).
  void fit_y(bool from_zero) {
    if (!(y_values.low <= y_values.high)) return;
    double low = from_zero ? 0 : y_values.low, high = y_values.high;
    const double pad = (high - low) * 0.06 + (high == low ? std::max(std::fabs(high) * 0.1, 1e-9) : 0);
    if (!from_zero) low -= pad;
    y->setRange(low, high + pad);
    y->applyNiceNumbers();
  }

  QChartView* view() {
    auto* v = new QChartView(chart);
    v->setRenderHint(QPainter::Antialiasing);
    return v;
  }
};

std::unique_ptr<Panel> loss_panel(const MetricsSeries& m, const StepRange& steps) {
  if (m.train_loss.empty() && m.eval_loss.empty() && m.eval_accuracy.empty()) return nullptr;
  QString title = QObject::tr("Loss");
  if (!m.train_loss.empty()) title += QObject::tr(": training %1").arg(figure(m.train_loss.back().value));
  if (!m.eval_loss.empty()) title += QObject::tr(", eval %1").arg(figure(m.eval_loss.back().value));
  if (!m.eval_accuracy.empty()) title += QObject::tr(", eval accuracy %1%").arg(figure(m.eval_accuracy.back().value * 100));
  title += QObject::tr(" at the end");
  auto panel = std::make_unique<Panel>(title, QObject::tr("loss (cross-entropy, nats)"), steps);
  if (!m.train_loss.empty()) panel->add_line(m.train_loss, 1, QObject::tr("training loss (per step)"), kMeasuredColor, Qt::SolidLine, 1.5);
  if (!m.eval_loss.empty()) {
    auto* eval = panel->add_line(m.eval_loss, 1, QObject::tr("eval loss"), kEvalColor, Qt::SolidLine, 2.5);
    eval->setPointsVisible(true);
  }
  panel->fit_y(false);
  if (!m.eval_accuracy.empty()) {
    auto* accuracy_axis = new QValueAxis;
    accuracy_axis->setTitleText(QObject::tr("eval accuracy (%)"));
    ValueRange accuracy;
    auto* series = new QLineSeries;
    series->setName(QObject::tr("eval accuracy (right axis)"));
    series->setPen(pen(kAccuracyColor, Qt::SolidLine, 2.5));
    series->setPointsVisible(true);
    for (const StepPoint& p : m.eval_accuracy) {
      series->append(p.step, p.value * 100);
      accuracy.include(p.value * 100);
    }
    // Whole tens of percent, a tick at each.
    const double low = std::max(0.0, std::floor(accuracy.low / 10 - 0.5) * 10);
    const double high = std::min(100.0, std::ceil(accuracy.high / 10 + 0.5) * 10);
    accuracy_axis->setRange(low, high);
    accuracy_axis->setTickCount(static_cast<int>(std::lround((high - low) / 10)) + 1);
    accuracy_axis->setLabelFormat("%.0f");
    panel->chart->addAxis(accuracy_axis, Qt::AlignRight);
    panel->add(series, accuracy_axis);
  }
  return panel;
}

std::unique_ptr<Panel> step_time_panel(const MetricsSeries& m, const std::optional<ReportFigures>& report, const StepRange& steps) {
  if (m.step_s.empty()) return nullptr;
  double largest_s = 0;
  for (const StepPoint& p : m.step_s) largest_s = std::max(largest_s, p.value);
  const ReportFigures& figures = report ? *report : kNoReport;
  const std::optional<double> predicted = figures.predicted_step_s;
  const std::optional<double> median = figures.measured_median_step_s;
  const Scale scale = time_scale(std::max(largest_s, predicted.value_or(0)));
  QString title = QObject::tr("Step time");
  if (median && predicted && *predicted > 0) {
    title += QObject::tr(": median %1, predicted %2 (%3x)")
                 .arg(with_unit(*median, scale), with_unit(*predicted, scale), QString::number(*median / *predicted, 'f', 2));
  } else if (median) {
    title += QObject::tr(": median %1").arg(with_unit(*median, scale));
  }
  auto panel = std::make_unique<Panel>(title, QObject::tr("step time (%1)").arg(scale.unit), steps);
  panel->add_line(m.step_s, scale.divisor, QObject::tr("measured"), kMeasuredColor, Qt::SolidLine, 1.5);
  if (median) panel->add_level(*median / scale.divisor, QObject::tr("measured median"), kReferenceColor, Qt::DotLine);
  if (predicted) panel->add_level(*predicted / scale.divisor, QObject::tr("predicted"), kPredictedColor, Qt::DashLine);
  panel->fit_y(true);
  return panel;
}

std::unique_ptr<Panel> memory_panel(const MetricsSeries& m, const std::optional<ReportFigures>& report, const StepRange& steps) {
  const ReportFigures& figures = report ? *report : kNoReport;
  const std::optional<double> predicted = figures.predicted_memory_bytes;
  // As the run report compares: the ledger's peak where the trainer tracks its buffers, else the process's peak.
  const bool ledger = !m.memory_peak_bytes.empty() || figures.measured_ledger_peak_bytes;
  std::optional<double> process_peak;
  if (!ledger) process_peak = figures.measured_vm_hwm_bytes;
  if (m.memory_peak_bytes.empty() && !predicted && !process_peak) return nullptr;
  double largest = std::max(predicted.value_or(0), process_peak.value_or(0));
  for (const StepPoint& p : m.memory_peak_bytes) largest = std::max(largest, p.value);
  const Scale scale = memory_scale(largest);
  std::optional<double> measured = figures.measured_ledger_peak_bytes;
  if (!measured && !m.memory_peak_bytes.empty()) measured = m.memory_peak_bytes.back().value;
  if (!measured) measured = process_peak;
  const QString rank = report ? QObject::tr(" (rank %1)").arg(report->rank) : QString();
  QString title = QObject::tr("Memory%1").arg(rank);
  if (measured && predicted && *predicted > 0) {
    title += QObject::tr(": peak %1, predicted %2 (%3x)")
                 .arg(with_unit(*measured, scale), with_unit(*predicted, scale), QString::number(*measured / *predicted, 'f', 2));
  } else if (measured) {
    title += QObject::tr(": peak %1").arg(with_unit(*measured, scale));
  }
  auto panel = std::make_unique<Panel>(title, QObject::tr("memory (%1)").arg(scale.unit), steps);
  if (!m.memory_peak_bytes.empty()) {
    panel->add_line(m.memory_peak_bytes, scale.divisor, QObject::tr("measured peak so far (ledger)"), kMeasuredColor);
  }
  if (process_peak) {
    panel->add_level(*process_peak / scale.divisor, QObject::tr("measured process peak (VmHWM)"), kReferenceColor, Qt::DotLine);
  }
  if (predicted) panel->add_level(*predicted / scale.divisor, QObject::tr("predicted"), kPredictedColor, Qt::DashLine);
  panel->fit_y(true);
  return panel;
}

// The figure: a title line, the loss panel across the top, step time and memory below.
std::unique_ptr<QWidget> build_figure(const PlotInput& input) {
  auto root = std::make_unique<QWidget>();
  root->setAutoFillBackground(true);
  QPalette palette = root->palette();
  palette.setColor(QPalette::Window, Qt::white);
  palette.setColor(QPalette::WindowText, Qt::black);
  root->setPalette(palette);
  auto* layout = new QVBoxLayout(root.get());
  layout->setContentsMargins(8, 8, 8, 8);
  const QString name = QString::fromStdString(input.metrics_name);
  const QString run = input.report && !input.report->title.empty() ? QString::fromStdString(input.report->title) : name;
  auto* heading = new QLabel(QObject::tr("Training run: %1").arg(run));
  QFont heading_font = heading->font();
  heading_font.setPointSizeF(heading_font.pointSizeF() * 1.5);
  heading_font.setBold(true);
  heading->setFont(heading_font);
  heading->setAlignment(Qt::AlignCenter);
  layout->addWidget(heading);
  QString source = QObject::tr("measured: %1").arg(name);
  if (input.report) source += QObject::tr("; predicted: the run report (meshplan's cost model on this machine's local-cpu preset)");
  auto* subtitle = new QLabel(source);
  subtitle->setAlignment(Qt::AlignCenter);
  layout->addWidget(subtitle);

  const StepRange steps = step_range(input.metrics);
  std::vector<std::unique_ptr<Panel>> panels;
  panels.push_back(loss_panel(input.metrics, steps));
  panels.push_back(step_time_panel(input.metrics, input.report, steps));
  panels.push_back(memory_panel(input.metrics, input.report, steps));
  std::erase(panels, nullptr);
  auto* grid = new QGridLayout;
  // One panel fills the figure; two stack; three put the loss across the top.
  for (std::size_t i = 0; i < panels.size(); ++i) {
    QChartView* view = panels[i]->view();
    if (panels.size() == 3 && i > 0) grid->addWidget(view, 1, static_cast<int>(i) - 1);
    else grid->addWidget(view, static_cast<int>(i), 0, 1, panels.size() == 3 ? 2 : 1);
  }
  layout->addLayout(grid, 1);
  return root;
}

// The offscreen platform warns that it "does not support propagateSizeHints()"
// for every window shown, and QStandardPaths that XDG_RUNTIME_DIR is not set
// (no desktop session): neither says anything to a user of `meshplan plot`.
QtMessageHandler previous_handler = nullptr;
void quiet_offscreen_warnings(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  if (type == QtWarningMsg && (message.contains("propagateSizeHints") || message.contains("XDG_RUNTIME_DIR"))) return;
  if (previous_handler) previous_handler(type, context, message);
}

}  // namespace

Problems render_run_chart(const PlotInput& input, const std::string& path, ChartSize size) {
  previous_handler = qInstallMessageHandler(quiet_offscreen_warnings);
  struct RestoreHandler {
    ~RestoreHandler() { qInstallMessageHandler(previous_handler); }
  } restore_handler;
  std::unique_ptr<QApplication> owned;
  if (!QCoreApplication::instance()) {
    if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");  // no display needed
    static int argc = 1;
    static char name[] = "meshplan";
    static char* argv[] = {name, nullptr};
    owned = std::make_unique<QApplication>(argc, argv);
  } else if (!qobject_cast<QApplication*>(QCoreApplication::instance())) {
    return {{Severity::error, path, "drawing needs a QApplication; this process made a QCoreApplication"}};
  }

  const std::unique_ptr<QWidget> figure = build_figure(input);
  figure->setAttribute(Qt::WA_DontShowOnScreen);
  figure->resize(size.width_px, size.height_px);
  figure->show();
  figure->layout()->activate();
  QCoreApplication::processEvents();

  const QString file = QString::fromStdString(path);
  if (file.endsWith(".svg", Qt::CaseInsensitive)) {
    QSvgGenerator generator;
    generator.setFileName(file);
    generator.setSize(figure->size());
    generator.setViewBox(QRect(QPoint(0, 0), figure->size()));
    generator.setTitle(QObject::tr("meshplan plot: %1").arg(QString::fromStdString(input.metrics_name)));
    QPainter painter;
    if (!painter.begin(&generator)) return {{Severity::error, path, "cannot write the SVG file"}};
    figure->render(&painter);
    painter.end();
    if (!QFile::exists(file)) return {{Severity::error, path, "cannot write the SVG file"}};
    return {};
  }
  QImage image(size.width_px, size.height_px, QImage::Format_ARGB32);
  image.fill(Qt::white);
  {
    QPainter painter(&image);
    painter.setRenderHint(QPainter::Antialiasing);
    figure->render(&painter);
  }
  if (!image.save(file, "PNG")) return {{Severity::error, path, "cannot write the PNG file"}};
  return {};
}

}  // namespace meshplan::plot
