// The geometry of the studio's custom views as pure functions, tested
// without painting (the habit of KDAB Hotspot: pixel <-> value mappings and
// cell rectangles live apart from the widgets that draw them).
//
//   * sharding grid: a ShardingSpec over a mesh as rows x columns of blocks,
//     each sized by its share of the tensor, devices holding the same block
//     merged into one cell (jax.debug.visualize_array_sharding's picture);
//   * mesh layout: nodes as a grid of boxes, devices inside each node;
//   * memory bars: stacked segments against a linear byte axis;
//   * roofline: a log-log map and the ceilings min(peak, bandwidth x I);
//   * timeline: time <-> pixel with zoom about a point and pan, and the idle
//     gaps (pipeline bubbles) between busy intervals;
//   * nearest point: what a click on a scatter chart picks.
//
// Defines: ShardingCell, ShardingGrid, sharding_grid,
// layout_sharding_grid, describe_devices, MeshLayout, mesh_layout,
// node_rect, device_rect, device_at, nice_ceiling, bar_y, stacked_bar,
// LogLogMap, roofline_ceiling, decades, TimeAxis, idle_intervals,
// nearest_point, TimelineLane, timeline_lanes.
#pragma once

#include <QPointF>
#include <QRectF>

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/sharding_spec.hpp"
#include "simulator/timeline.hpp"

namespace meshplan::studio {

// ---- sharding

struct ShardingCell {
  std::int64_t row = 0, column = 0;
  std::vector<std::int64_t> devices;  // ranks holding this block, ascending
  QRectF rect;                        // set by layout_sharding_grid
};

struct ShardingGrid {
  std::int64_t rows = 1, columns = 1;
  std::vector<std::int64_t> row_extents;     // elements along the row dimension per block row
  std::vector<std::int64_t> column_extents;  // elements (flattened) per block column
  std::string row_label, column_label;       // "vocab 50257 / tp", "hidden x ffn"
  std::vector<ShardingCell> cells;           // row-major, rows x columns
};

// Rows: the first dimension (one row for a 1-D tensor, whose only dimension
// runs along the columns); columns: the last dimension for 2-D, the
// remaining dimensions flattened (outer major) for higher ranks.
ShardingGrid sharding_grid(const ShardingSpec& spec, const Mesh& mesh);

// Rectangles in `area`: column widths and row heights proportional to their extents.
void layout_sharding_grid(ShardingGrid& grid, const QRectF& area);

// "0-7", "0, 16, 32, ..., 240 (16 devices)", "3"; at most `max_items` numbers listed.
std::string describe_devices(const std::vector<std::int64_t>& devices, std::size_t max_items = 8);

// ---- mesh of devices by node

struct MeshLayout {
  std::int64_t nodes = 1, devices_per_node = 1;
  std::int64_t node_columns = 1, node_rows = 1;
  std::int64_t device_columns = 1, device_rows = 1;
  double padding = 3;  // inside a node box, around its devices
};

// The node grid that makes devices (square cells) largest in a width x height area.
MeshLayout mesh_layout(std::int64_t world_size, std::int64_t devices_per_node, double width, double height);
QRectF node_rect(const MeshLayout& layout, const QRectF& area, std::int64_t node);
QRectF device_rect(const MeshLayout& layout, const QRectF& area, std::int64_t rank);
std::int64_t device_at(const MeshLayout& layout, const QRectF& area, QPointF point);  // -1 when none

// ---- bars

// The smallest 1, 2 or 5 x 10^k not below `value` (value > 0).
double nice_ceiling(double value);
// Pixel y of `value` on a linear axis: 0 at plot.bottom(), max_value at plot.top().
double bar_y(double value, double max_value, const QRectF& plot);
// Segments stacked from the bottom, one rectangle per part (zero-height for empty parts).
std::vector<QRectF> stacked_bar(const std::vector<double>& parts, double max_value, const QRectF& plot, double x, double width);

// ---- roofline

struct LogLogMap {
  double x_min = 1, x_max = 10, y_min = 1, y_max = 10;  // data range (> 0)
  QRectF plot;
  double x_of(double x) const;
  double y_of(double y) const;
  QPointF map(double x, double y) const { return {x_of(x), y_of(y)}; }
  double x_value(double pixel) const;  // inverse of x_of
};
double roofline_ceiling(double intensity_flops_per_byte, double peak_flops_per_s, double bandwidth_bytes_per_s);
// Powers of ten from floor(log10 lo) to ceil(log10 hi).
std::vector<double> decades(double lo, double hi);

// ---- timeline

class TimeAxis {
 public:
  TimeAxis() = default;
  TimeAxis(double total_s, double left_px, double width_px);
  double x_of(double t) const;
  double t_of(double x) const;
  // Zooms by `factor` (> 1 zooms in) keeping the time under pixel `anchor_x` in place.
  void zoom(double factor, double anchor_x);
  void pan(double dx_px);  // drag right by dx: earlier times come into view
  void reset();
  void resize(double left_px, double width_px);
  double start_s() const { return start_s_; }
  double span_s() const { return span_s_; }
  double total_s() const { return total_s_; }

 private:
  void clamp();
  double total_s_ = 1, start_s_ = 0, span_s_ = 1, left_px_ = 0, width_px_ = 1;
};

// Gaps in [from, to] not covered by any of the (start, end) intervals.
std::vector<std::pair<double, double>> idle_intervals(std::vector<std::pair<double, double>> busy, double from, double to);

// Index of the point nearest `p` with x and y scaled to pixels by the factors; -1 for none.
int nearest_point(const std::vector<QPointF>& points, QPointF p, double x_scale, double y_scale);

// One row of the Gantt chart: a stage's representative device on one stream.
struct TimelineLane {
  std::int32_t stage = 0;
  sim::Track track = sim::Track::compute;
  std::vector<std::int32_t> events;  // indices into Timeline::events, by start time
};
// Lanes that have events, stage-major, tracks in enum order.
std::vector<TimelineLane> timeline_lanes(const sim::Timeline& timeline);

}  // namespace meshplan::studio
