// Pure geometry of the custom views (geometry.hpp).
#include "gui/core/geometry.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace meshplan::studio {

// ---- sharding

ShardingGrid sharding_grid(const ShardingSpec& spec, const Mesh& mesh) {
  ShardingGrid grid;
  const std::size_t rank = spec.dims.size();
  auto label = [&](std::size_t d) {
    std::string text = spec.dims[d].name + " " + std::to_string(spec.dims[d].size);
    for (Axis a : spec.dims[d].axes) text += " / " + to_string(a);
    return text;
  };
  if (rank == 0) {
    grid.row_extents = {1};
    grid.column_extents = {1};
  } else if (rank == 1) {
    grid.row_extents = {1};
    grid.column_extents = split_extents(spec.dims[0].size, spec.splits(mesh, 0));
    grid.column_label = label(0);
  } else {
    grid.row_extents = split_extents(spec.dims[0].size, spec.splits(mesh, 0));
    grid.row_label = label(0);
    grid.column_extents = {1};
    for (std::size_t d = 1; d < rank; ++d) {
      const auto part = split_extents(spec.dims[d].size, spec.splits(mesh, d));
      std::vector<std::int64_t> combined;
      for (auto outer : grid.column_extents) {
        for (auto inner : part) combined.push_back(outer * inner);
      }
      grid.column_extents = combined;
      grid.column_label += (d > 1 ? " x " : "") + label(d);
    }
  }
  grid.rows = static_cast<std::int64_t>(grid.row_extents.size());
  grid.columns = static_cast<std::int64_t>(grid.column_extents.size());
  grid.cells.resize(static_cast<std::size_t>(grid.rows * grid.columns));
  for (std::int64_t r = 0; r < grid.rows; ++r) {
    for (std::int64_t c = 0; c < grid.columns; ++c) {
      auto& cell = grid.cells[static_cast<std::size_t>(r * grid.columns + c)];
      cell.row = r;
      cell.column = c;
    }
  }
  for (std::int64_t device = 0; device < mesh.world_size(); ++device) {
    const auto block = block_of_device(spec, mesh, device);
    if (!block) continue;
    std::int64_t row = 0, column = 0;
    if (rank == 1) {
      column = (*block)[0];
    } else if (rank >= 2) {
      row = (*block)[0];
      for (std::size_t d = 1; d < rank; ++d) column = column * spec.splits(mesh, d) + (*block)[d];
    }
    grid.cells[static_cast<std::size_t>(row * grid.columns + column)].devices.push_back(device);
  }
  return grid;
}

void layout_sharding_grid(ShardingGrid& grid, const QRectF& area) {
  auto edges = [](const std::vector<std::int64_t>& extents, double start, double length) {
    double total = 0;
    for (auto e : extents) total += static_cast<double>(e);
    std::vector<double> out{start};
    double running = 0;
    for (auto e : extents) {
      running += static_cast<double>(e);
      out.push_back(total > 0 ? start + length * running / total : start);
    }
    return out;
  };
  const auto ys = edges(grid.row_extents, area.top(), area.height());
  const auto xs = edges(grid.column_extents, area.left(), area.width());
  for (auto& cell : grid.cells) {
    const auto r = static_cast<std::size_t>(cell.row), c = static_cast<std::size_t>(cell.column);
    cell.rect = QRectF(QPointF(xs[c], ys[r]), QPointF(xs[c + 1], ys[r + 1]));
  }
}

std::string describe_devices(const std::vector<std::int64_t>& d, std::size_t max_items) {
  if (d.empty()) return "";
  if (d.size() == 1) return std::to_string(d[0]);
  const std::int64_t stride = d[1] - d[0];
  bool arithmetic = true;
  for (std::size_t i = 1; i < d.size(); ++i) arithmetic = arithmetic && d[i] - d[i - 1] == stride;
  if (arithmetic && stride == 1) return std::to_string(d.front()) + "-" + std::to_string(d.back());
  if (d.size() <= max_items) {
    std::string text;
    for (std::size_t i = 0; i < d.size(); ++i) text += (i ? ", " : "") + std::to_string(d[i]);
    return text;
  }
  std::string text;
  if (arithmetic) {
    text = std::to_string(d[0]) + ", " + std::to_string(d[1]) + ", ..., " + std::to_string(d.back());
  } else {
    for (std::size_t i = 0; i + 1 < max_items; ++i) text += std::to_string(d[i]) + ", ";
    text += "..., " + std::to_string(d.back());
  }
  return text + " (" + std::to_string(d.size()) + " devices)";
}

// ---- mesh

MeshLayout mesh_layout(std::int64_t world, std::int64_t per_node, double width, double height) {
  MeshLayout layout;
  layout.devices_per_node = std::max<std::int64_t>(1, std::min(per_node, std::max<std::int64_t>(world, 1)));
  layout.nodes = (std::max<std::int64_t>(world, 1) + layout.devices_per_node - 1) / layout.devices_per_node;
  const std::int64_t n = layout.devices_per_node;
  if (n <= 4) {
    layout.device_columns = n;
  } else {
    layout.device_columns = static_cast<std::int64_t>(std::ceil(std::sqrt(2.0 * static_cast<double>(n))));
  }
  layout.device_rows = (n + layout.device_columns - 1) / layout.device_columns;
  double best = -1;
  for (std::int64_t cols = 1; cols <= layout.nodes; ++cols) {
    const std::int64_t rows = (layout.nodes + cols - 1) / cols;
    const double node_w = width / static_cast<double>(cols) - 2 * layout.padding;
    const double node_h = height / static_cast<double>(rows) - 2 * layout.padding;
    const double cell = std::min(node_w / static_cast<double>(layout.device_columns), node_h / static_cast<double>(layout.device_rows));
    if (cell > best + 1e-9) {
      best = cell;
      layout.node_columns = cols;
      layout.node_rows = rows;
    }
  }
  return layout;
}

QRectF node_rect(const MeshLayout& layout, const QRectF& area, std::int64_t node) {
  const double w = area.width() / static_cast<double>(layout.node_columns);
  const double h = area.height() / static_cast<double>(layout.node_rows);
  const auto col = static_cast<double>(node % layout.node_columns), row = static_cast<double>(node / layout.node_columns);
  return QRectF(area.left() + col * w, area.top() + row * h, w, h);
}

QRectF device_rect(const MeshLayout& layout, const QRectF& area, std::int64_t rank) {
  const QRectF node = node_rect(layout, area, rank / layout.devices_per_node)
                          .adjusted(layout.padding, layout.padding, -layout.padding, -layout.padding);
  const std::int64_t d = rank % layout.devices_per_node;
  const double w = node.width() / static_cast<double>(layout.device_columns);
  const double h = node.height() / static_cast<double>(layout.device_rows);
  const auto col = static_cast<double>(d % layout.device_columns), row = static_cast<double>(d / layout.device_columns);
  return QRectF(node.left() + col * w, node.top() + row * h, w, h);
}

std::int64_t device_at(const MeshLayout& layout, const QRectF& area, QPointF p) {
  if (!area.contains(p)) return -1;
  const double w = area.width() / static_cast<double>(layout.node_columns);
  const double h = area.height() / static_cast<double>(layout.node_rows);
  const auto col = static_cast<std::int64_t>((p.x() - area.left()) / w);
  const auto row = static_cast<std::int64_t>((p.y() - area.top()) / h);
  const std::int64_t node = row * layout.node_columns + std::min(col, layout.node_columns - 1);
  if (node >= layout.nodes) return -1;
  for (std::int64_t d = 0; d < layout.devices_per_node; ++d) {
    const std::int64_t rank = node * layout.devices_per_node + d;
    if (device_rect(layout, area, rank).contains(p)) return rank;
  }
  return -1;
}

// ---- bars

double nice_ceiling(double value) {
  if (!(value > 0)) return 1;
  const double power = std::pow(10.0, std::floor(std::log10(value)));
  for (double m : {1.0, 2.0, 5.0, 10.0}) {
    if (m * power >= value * (1 - 1e-12)) return m * power;
  }
  return 10 * power;
}

double bar_y(double value, double max_value, const QRectF& plot) {
  return plot.bottom() - plot.height() * value / max_value;
}

std::vector<QRectF> stacked_bar(const std::vector<double>& parts, double max_value, const QRectF& plot, double x, double width) {
  std::vector<QRectF> out;
  double running = 0;
  for (double part : parts) {
    const double bottom = bar_y(running, max_value, plot);
    running += std::max(0.0, part);
    const double top = bar_y(running, max_value, plot);
    out.emplace_back(x, top, width, bottom - top);
  }
  return out;
}

// ---- roofline

double LogLogMap::x_of(double x) const {
  return plot.left() + plot.width() * (std::log10(x) - std::log10(x_min)) / (std::log10(x_max) - std::log10(x_min));
}
double LogLogMap::y_of(double y) const {
  return plot.bottom() - plot.height() * (std::log10(y) - std::log10(y_min)) / (std::log10(y_max) - std::log10(y_min));
}
double LogLogMap::x_value(double pixel) const {
  return std::pow(10.0, std::log10(x_min) + (pixel - plot.left()) / plot.width() * (std::log10(x_max) - std::log10(x_min)));
}

double roofline_ceiling(double intensity, double peak, double bandwidth) { return std::min(peak, bandwidth * intensity); }

std::vector<double> decades(double lo, double hi) {
  std::vector<double> out;
  if (!(lo > 0) || !(hi >= lo)) return out;
  for (int e = static_cast<int>(std::floor(std::log10(lo) + 1e-9)); e <= static_cast<int>(std::ceil(std::log10(hi) - 1e-9)); ++e) {
    out.push_back(std::pow(10.0, e));
  }
  return out;
}

// ---- timeline

TimeAxis::TimeAxis(double total_s, double left_px, double width_px)
    : total_s_(total_s > 0 ? total_s : 1), start_s_(0), span_s_(total_s > 0 ? total_s : 1), left_px_(left_px),
      width_px_(width_px > 1 ? width_px : 1) {}

double TimeAxis::x_of(double t) const { return left_px_ + (t - start_s_) / span_s_ * width_px_; }
double TimeAxis::t_of(double x) const { return start_s_ + (x - left_px_) / width_px_ * span_s_; }

void TimeAxis::zoom(double factor, double anchor_x) {
  if (!(factor > 0)) return;
  const double anchor_t = t_of(anchor_x);
  span_s_ = std::max(span_s_ / factor, total_s_ * 1e-6);
  span_s_ = std::min(span_s_, total_s_);
  start_s_ = anchor_t - (anchor_x - left_px_) / width_px_ * span_s_;
  clamp();
}

void TimeAxis::pan(double dx_px) {
  start_s_ -= dx_px / width_px_ * span_s_;
  clamp();
}

void TimeAxis::reset() {
  start_s_ = 0;
  span_s_ = total_s_;
}

void TimeAxis::resize(double left_px, double width_px) {
  left_px_ = left_px;
  width_px_ = width_px > 1 ? width_px : 1;
}

void TimeAxis::clamp() {
  start_s_ = std::clamp(start_s_, 0.0, std::max(0.0, total_s_ - span_s_));
}

std::vector<std::pair<double, double>> idle_intervals(std::vector<std::pair<double, double>> busy, double from, double to) {
  std::sort(busy.begin(), busy.end());
  std::vector<std::pair<double, double>> gaps;
  double cursor = from;
  for (const auto& [start, end] : busy) {
    if (start > cursor && start <= to) gaps.emplace_back(cursor, std::min(start, to));
    cursor = std::max(cursor, end);
    if (cursor >= to) break;
  }
  if (cursor < to) gaps.emplace_back(cursor, to);
  return gaps;
}

int nearest_point(const std::vector<QPointF>& points, QPointF p, double x_scale, double y_scale) {
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < points.size(); ++i) {
    const double dx = (points[i].x() - p.x()) * x_scale, dy = (points[i].y() - p.y()) * y_scale;
    const double d = dx * dx + dy * dy;
    if (d < best_d) {
      best_d = d;
      best = static_cast<int>(i);
    }
  }
  return best;
}

std::vector<TimelineLane> timeline_lanes(const sim::Timeline& timeline) {
  std::map<std::pair<std::int32_t, int>, std::vector<std::int32_t>> lanes;
  for (std::size_t i = 0; i < timeline.events.size(); ++i) {
    const auto& e = timeline.events[i];
    lanes[{e.stage, static_cast<int>(e.track)}].push_back(static_cast<std::int32_t>(i));
  }
  std::vector<TimelineLane> out;
  for (auto& [key, events] : lanes) {
    std::stable_sort(events.begin(), events.end(), [&](std::int32_t a, std::int32_t b) {
      return timeline.events[static_cast<std::size_t>(a)].start_s < timeline.events[static_cast<std::size_t>(b)].start_s;
    });
    out.push_back({key.first, static_cast<sim::Track>(key.second), std::move(events)});
  }
  return out;
}

}  // namespace meshplan::studio
