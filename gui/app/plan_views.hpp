// The plan views that are painted by hand (their geometry is in
// gui/core/geometry.hpp): the mesh of devices by node, the sharding of one
// tensor, the memory bars per pipeline stage and the roofline. Each canvas
// has a panel around it with its controls.
//
// Defines: MeshCanvas, MeshPanel, ShardingCanvas, ShardingPanel,
// MemoryCanvas, RooflineCanvas.
#pragma once

#include <QWidget>

#include <optional>

#include "gui/core/geometry.hpp"
#include "gui/core/plan_details.hpp"
#include "gui/core/roofline.hpp"
#include "model/sharding_spec.hpp"

class QComboBox;
class QLabel;
class QSpinBox;

namespace meshplan::studio {

class MeshCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit MeshCanvas(QWidget* parent = nullptr);
  void setMesh(const Mesh& mesh, std::int64_t devices_per_node);
  void setColourAxis(Axis axis);
  void setShownNodes(std::int64_t nodes);  // the first n nodes (labels need room)
  QSize sizeHint() const override { return {900, 600}; }
  QString deviceDescription(std::int64_t rank) const;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF area() const;
  Mesh mesh_;
  std::int64_t per_node_ = 8;
  std::int64_t shown_nodes_ = 16;
  Axis colour_ = Axis::tp;
};

class MeshPanel : public QWidget {
  Q_OBJECT
 public:
  explicit MeshPanel(QWidget* parent = nullptr);
  void setMesh(const Mesh& mesh, std::int64_t devices_per_node);
  MeshCanvas* canvas() const { return canvas_; }

 private:
  MeshCanvas* canvas_;
  QComboBox* axis_;
  QSpinBox* nodes_;
  Mesh mesh_;
};

class ShardingCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit ShardingCanvas(QWidget* parent = nullptr);
  void setSharding(const std::optional<ShardingSpec>& spec, const Mesh& mesh, const QString& problem);
  QSize sizeHint() const override { return {900, 600}; }
  const ShardingGrid& grid() const { return grid_; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  QRectF gridArea() const;
  std::optional<ShardingSpec> spec_;
  Mesh mesh_;
  ShardingGrid grid_;
  QString problem_;
};

class ShardingPanel : public QWidget {
  Q_OBJECT
 public:
  explicit ShardingPanel(QWidget* parent = nullptr);
  void setPlan(const ModelSpec& model, const Plan& plan);
  // Selects a tensor by name ("layer3.mlp.w_in") and role; false when not offered.
  bool choose(std::int64_t layer, const QString& tensor, TensorRole role);
  ShardingCanvas* canvas() const { return canvas_; }

 private:
  void refillTensors();
  void update();
  ShardingCanvas* canvas_;
  QSpinBox* layer_;
  QComboBox* tensor_;
  QComboBox* role_;
  ModelSpec model_;
  Plan plan_;
  bool has_plan_ = false;
};

class MemoryCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit MemoryCanvas(QWidget* parent = nullptr);
  void setMemory(const Plan& plan, const std::optional<MemoryEstimate>& memory);
  QSize sizeHint() const override { return {900, 500}; }

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  Plan plan_;
  std::optional<MemoryEstimate> memory_;
};

class RooflineCanvas : public QWidget {
  Q_OBJECT
 public:
  explicit RooflineCanvas(QWidget* parent = nullptr);
  void setRoofline(const Roofline& roofline, const QString& device);
  QSize sizeHint() const override { return {700, 500}; }

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  LogLogMap map() const;
  Roofline roofline_;
  QString device_;
};

}  // namespace meshplan::studio
