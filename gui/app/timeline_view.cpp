// TimelineCanvas and TimelinePanel.
#include "gui/app/timeline_view.hpp"

#include <QHBoxLayout>
#include <QHelpEvent>
#include <QKeyEvent>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QPushButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <QWheelEvent>

#include <cmath>

#include "gui/app/charts.hpp"
#include "simulator/trace_json.hpp"

namespace meshplan::studio {
namespace {

QString lane_name(sim::Track track) {
  switch (track) {
    case sim::Track::compute: return QObject::tr("compute");
    case sim::Track::layer_comm: return QObject::tr("tp/cp/ep comm");
    case sim::Track::send_next: return QObject::tr("pp send fwd");
    case sim::Track::send_previous: return QObject::tr("pp send bwd");
    case sim::Track::fsdp_comm: return QObject::tr("fsdp comm");
    case sim::Track::dp_comm: return QObject::tr("dp comm");
  }
  return QStringLiteral("?");
}

QColor kind_colour(sim::EventKind kind) {
  switch (kind) {
    case sim::EventKind::forward: return QColor("#4e79a7");
    case sim::EventKind::backward: return QColor("#59a14f");
    case sim::EventKind::backward_input: return QColor("#59a14f");
    case sim::EventKind::backward_weight: return QColor("#8cd17d");
    case sim::EventKind::optimizer: return QColor("#b07aa1");
    case sim::EventKind::layer_collective: return QColor("#f28e2b");
    case sim::EventKind::activation_transfer: return QColor("#76b7b2");
    case sim::EventKind::gradient_transfer: return QColor("#499894");
    case sim::EventKind::receive_gather: return QColor("#ffbe7d");
    case sim::EventKind::parameter_gather: return QColor("#edc948");
    case sim::EventKind::gradient_reduce_scatter: return QColor("#e15759");
    case sim::EventKind::gradient_bucket: return QColor("#ff9da7");
    case sim::EventKind::parameter_gather_after_step: return QColor("#9c755f");
  }
  return Qt::gray;
}

}  // namespace

TimelineCanvas::TimelineCanvas(QWidget* parent) : QWidget(parent) {
  setMouseTracking(true);
  setFocusPolicy(Qt::StrongFocus);
  setBackgroundRole(QPalette::Base);
  setAutoFillBackground(true);
}

void TimelineCanvas::setSimulation(std::shared_ptr<const sim::Simulation> simulation) {
  simulation_ = std::move(simulation);
  lanes_.clear();
  bubbles_.clear();
  if (simulation_) {
    lanes_ = timeline_lanes(simulation_->timeline);
    for (const auto& lane : lanes_) {
      std::vector<std::pair<double, double>> gaps;
      if (lane.track == sim::Track::compute) {
        std::vector<std::pair<double, double>> busy;
        for (auto i : lane.events) {
          const auto& e = simulation_->timeline.events[static_cast<std::size_t>(i)];
          busy.emplace_back(e.start_s, e.end_s);
        }
        gaps = idle_intervals(busy, 0, simulation_->summary.pipeline_s);
      }
      bubbles_.push_back(std::move(gaps));
    }
    axis_ = TimeAxis(simulation_->summary.step_s, kLabelWidth, width() - kLabelWidth - 10);
  }
  update();
}

double TimelineCanvas::laneHeight() const {
  if (lanes_.empty()) return 20;
  return std::clamp((height() - kTop - 30) / static_cast<double>(lanes_.size()), 6.0, 28.0);
}

void TimelineCanvas::resizeEvent(QResizeEvent* event) {
  axis_.resize(kLabelWidth, width() - kLabelWidth - 10);
  QWidget::resizeEvent(event);
}

void TimelineCanvas::paintEvent(QPaintEvent*) {
  QPainter p(this);
  if (!simulation_) {
    p.drawText(rect(), Qt::AlignCenter, tr("Select a plan to simulate its step."));
    return;
  }
  const auto& events = simulation_->timeline.events;
  const double lane_h = laneHeight();
  const double right = width() - 10.0;
  // Time ticks.
  const double span = axis_.span_s();
  const double tick = nice_ceiling(span / 8);
  const double first = std::ceil(axis_.start_s() / tick) * tick;
  p.setPen(Qt::black);
  for (double t = first; t <= axis_.start_s() + span + 1e-12; t += tick) {
    const double x = axis_.x_of(t);
    p.setPen(QColor(225, 225, 225));
    p.drawLine(QPointF(x, kTop), QPointF(x, kTop + lane_h * static_cast<double>(lanes_.size())));
    p.setPen(Qt::black);
    p.drawText(QRectF(x - 50, 8, 100, 20), Qt::AlignCenter, format_seconds(t));
  }
  const QFontMetricsF fm(font());
  for (std::size_t l = 0; l < lanes_.size(); ++l) {
    const auto& lane = lanes_[l];
    const double y = kTop + lane_h * static_cast<double>(l);
    if (l > 0 && lane.stage != lanes_[l - 1].stage) {
      p.setPen(QColor(150, 150, 150));
      p.drawLine(QPointF(0, y), QPointF(right, y));
    }
    if (lane_h >= fm.height() * 0.8) {
      p.setPen(Qt::black);
      p.drawText(QRectF(4, y, kLabelWidth - 8, lane_h), Qt::AlignLeft | Qt::AlignVCenter,
                 tr("stage %1  %2").arg(lane.stage).arg(lane_name(lane.track)));
    }
    p.save();
    p.setClipRect(QRectF(kLabelWidth, kTop, right - kLabelWidth, height() - kTop));
    // Bubbles first, hatched, under the events.
    for (const auto& [a, b] : bubbles_[l]) {
      const QRectF r(QPointF(axis_.x_of(a), y + 1), QPointF(axis_.x_of(b), y + lane_h - 1));
      p.fillRect(r, QColor(255, 235, 235));
      p.fillRect(r, QBrush(QColor(225, 87, 89, 140), Qt::BDiagPattern));
    }
    for (auto i : lane.events) {
      const auto& e = events[static_cast<std::size_t>(i)];
      const double x0 = axis_.x_of(e.start_s), x1 = axis_.x_of(e.end_s);
      if (x1 < kLabelWidth || x0 > right) continue;
      const QRectF r(QPointF(x0, y + 2), QPointF(std::max(x1, x0 + 1), y + lane_h - 2));
      p.fillRect(r, kind_colour(e.kind));
      if (r.width() > 14 && lane_h >= fm.height() && e.micro_batch >= 0 && sim::is_compute(e.kind)) {
        p.setPen(Qt::white);
        p.drawText(r, Qt::AlignCenter, QString::number(e.micro_batch));
      }
    }
    p.restore();
  }
  // Legend.
  double x = kLabelWidth;
  const double y = kTop + lane_h * static_cast<double>(lanes_.size()) + 8;
  const sim::EventKind kinds[] = {sim::EventKind::forward, sim::EventKind::backward, sim::EventKind::backward_weight,
                                  sim::EventKind::optimizer, sim::EventKind::layer_collective, sim::EventKind::activation_transfer,
                                  sim::EventKind::gradient_bucket, sim::EventKind::parameter_gather};
  for (auto kind : kinds) {
    const auto name = sim::to_string(kind);
    const QString text = QString::fromUtf8(name.data(), static_cast<qsizetype>(name.size()));
    p.fillRect(QRectF(x, y, 12, 12), kind_colour(kind));
    p.setPen(Qt::black);
    p.drawText(QPointF(x + 16, y + 11), text);
    x += 16 + fm.horizontalAdvance(text) + 14;
  }
  p.fillRect(QRectF(x, y, 12, 12), QBrush(QColor(225, 87, 89), Qt::BDiagPattern));
  p.drawText(QPointF(x + 16, y + 11), tr("bubble (compute idle)"));
}

void TimelineCanvas::wheelEvent(QWheelEvent* event) {
  const double steps = event->angleDelta().y() / 120.0;
  axis_.zoom(std::pow(1.25, steps), event->position().x());
  update();
  event->accept();
}

void TimelineCanvas::mousePressEvent(QMouseEvent* event) {
  drag_x_ = event->position().x();
  setFocus();
}

void TimelineCanvas::mouseMoveEvent(QMouseEvent* event) {
  if (event->buttons() & Qt::LeftButton) {
    axis_.pan(event->position().x() - drag_x_);
    drag_x_ = event->position().x();
    update();
  }
}

void TimelineCanvas::keyPressEvent(QKeyEvent* event) {
  const double centre = kLabelWidth + (width() - kLabelWidth - 10) / 2.0;
  switch (event->key()) {
    case Qt::Key_Plus:
    case Qt::Key_Equal: axis_.zoom(1.5, centre); break;
    case Qt::Key_Minus: axis_.zoom(1 / 1.5, centre); break;
    case Qt::Key_0: axis_.reset(); break;
    case Qt::Key_Left: axis_.pan(80); break;
    case Qt::Key_Right: axis_.pan(-80); break;
    default: QWidget::keyPressEvent(event); return;
  }
  update();
}

bool TimelineCanvas::event(QEvent* e) {
  if (e->type() == QEvent::ToolTip && simulation_) {
    auto* help = static_cast<QHelpEvent*>(e);
    const double lane_h = laneHeight();
    const auto l = static_cast<long>((help->pos().y() - kTop) / lane_h);
    if (l >= 0 && static_cast<std::size_t>(l) < lanes_.size() && help->pos().x() > kLabelWidth) {
      const double t = axis_.t_of(help->pos().x());
      for (auto i : lanes_[static_cast<std::size_t>(l)].events) {
        const auto& ev = simulation_->timeline.events[static_cast<std::size_t>(i)];
        if (ev.start_s <= t && t <= ev.end_s) {
          const auto name = sim::to_string(ev.kind);
          QString text = tr("%1, stage %2, micro-batch %3\n%4 at %5")
                             .arg(QString::fromUtf8(name.data(), static_cast<qsizetype>(name.size())))
                             .arg(ev.stage)
                             .arg(ev.micro_batch)
                             .arg(format_seconds(ev.duration_s()), format_seconds(ev.start_s));
          if (ev.bytes > 0) text += tr("\n%1 MB over %2").arg(ev.bytes / 1e6, 0, 'f', 1).arg(QString::fromStdString(to_string(ev.axis)));
          QToolTip::showText(help->globalPos(), text, this);
          return true;
        }
      }
      for (const auto& [a, b] : bubbles_[static_cast<std::size_t>(l)]) {
        if (a <= t && t <= b) {
          QToolTip::showText(help->globalPos(), tr("bubble: compute idle for %1").arg(format_seconds(b - a)), this);
          return true;
        }
      }
    }
    QToolTip::hideText();
    return true;
  }
  return QWidget::event(e);
}

TimelinePanel::TimelinePanel(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  bar->addWidget(summary_, 1);
  auto* reset = new QPushButton(tr("Reset zoom"));
  export_ = new QPushButton(tr("Export Trace Event JSON..."));
  bar->addWidget(reset);
  bar->addWidget(export_);
  layout->addLayout(bar);
  canvas_ = new TimelineCanvas;
  layout->addWidget(canvas_, 1);
  connect(reset, &QPushButton::clicked, this, [this] {
    canvas_->axis().reset();
    canvas_->update();
  });
  connect(export_, &QPushButton::clicked, this, &TimelinePanel::exportRequested);
}

void TimelinePanel::setSimulation(std::shared_ptr<const sim::Simulation> simulation, const QString& problem) {
  simulation_ = simulation;
  canvas_->setSimulation(simulation);
  export_->setEnabled(static_cast<bool>(simulation));
  if (!simulation) {
    summary_->setText(problem.isEmpty() ? tr("No simulation.") : tr("Not simulated: %1").arg(problem));
    return;
  }
  const auto& s = simulation->summary;
  summary_->setText(tr("Simulated step %1 (analytical %2); pipeline %3; bubble %4% of the busiest stage; %5 events. "
                       "Wheel: zoom, drag: pan, 0: reset; one representative device per stage.")
                        .arg(format_seconds(s.step_s), format_seconds(simulation->analytical.step_s), format_seconds(s.pipeline_s))
                        .arg(100 * s.bubble_fraction, 0, 'f', 1)
                        .arg(s.timeline_events));
}

bool TimelinePanel::exportTrace(const QString& path, QString* error) const {
  if (!simulation_) {
    if (error) *error = tr("no simulation to export");
    return false;
  }
  const Problems problems = sim::write_trace_file(path.toStdString(), *simulation_);
  if (has_errors(problems)) {
    if (error) *error = QString::fromStdString(describe(problems.front()));
    return false;
  }
  return true;
}

}  // namespace meshplan::studio
