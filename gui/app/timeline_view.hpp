// The simulated step as a Gantt chart: one lane per pipeline stage's
// representative device and stream (simulator/timeline.hpp), events coloured
// by kind, the compute lanes' idle gaps (pipeline bubbles) hatched. Wheel
// zooms about the cursor, dragging pans, 0 resets; the time <-> pixel
// mapping is TimeAxis (gui/core/geometry.hpp).
//
// Defines: TimelineCanvas, TimelinePanel.
#pragma once

#include <QWidget>

#include <memory>
#include <optional>

#include "gui/core/geometry.hpp"
#include "simulator/simulate.hpp"

class QLabel;
class QPushButton;

namespace meshplan::studio {

class TimelineCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineCanvas(QWidget* parent = nullptr);
  void setSimulation(std::shared_ptr<const sim::Simulation> simulation);
  TimeAxis& axis() { return axis_; }
  QSize sizeHint() const override { return {1000, 500}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  void resizeEvent(QResizeEvent* event) override;
  void wheelEvent(QWheelEvent* event) override;
  void mousePressEvent(QMouseEvent* event) override;
  void mouseMoveEvent(QMouseEvent* event) override;
  void keyPressEvent(QKeyEvent* event) override;
  bool event(QEvent* event) override;

 private:
  static constexpr double kLabelWidth = 170;
  static constexpr double kTop = 34;
  double laneHeight() const;
  std::shared_ptr<const sim::Simulation> simulation_;
  std::vector<TimelineLane> lanes_;
  std::vector<std::vector<std::pair<double, double>>> bubbles_;  // per lane (compute lanes only)
  TimeAxis axis_;
  double drag_x_ = 0;
};

class TimelinePanel : public QWidget {
  Q_OBJECT
 public:
  explicit TimelinePanel(QWidget* parent = nullptr);
  void setSimulation(std::shared_ptr<const sim::Simulation> simulation, const QString& problem);
  TimelineCanvas* canvas() const { return canvas_; }
  bool exportTrace(const QString& path, QString* error) const;

 signals:
  void exportRequested();

 private:
  TimelineCanvas* canvas_;
  QLabel* summary_;
  QPushButton* export_;
  std::shared_ptr<const sim::Simulation> simulation_;
};

}  // namespace meshplan::studio
