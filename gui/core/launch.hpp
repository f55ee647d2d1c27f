// The Launch panel's plumbing without widgets: the argument list of the
// training run (never a shell command line), the metrics JSON Lines it
// writes, read back a line at a time, and CSV text of any item model for
// the Export menu.
//
// Defines: LaunchRequest, launch_arguments, MetricsPoint, parse_metrics_line,
// MetricsTail, model_to_csv.
#pragma once

#include <QAbstractItemModel>
#include <QByteArray>
#include <QString>
#include <QStringList>

#include <optional>

namespace meshplan::studio {

struct LaunchRequest {
  QString plan_path;      // plan JSON written by the studio
  QString metrics_path;   // JSON Lines the run writes
  qint64 steps = 20;
  bool has_launch = true; // the CLI has `meshplan launch`; otherwise `meshplan train`
  bool shrink = false;    // rehearsal on a shrunken model (launch --shrink)
  QString data;           // --data; empty: the CLI's default for the plan's model (synthetic-text for transformers)
};

// ["launch", "--plan", p, "--metrics", m, "--steps", "20"] (+ "--data", d when set, + "--shrink").
QStringList launch_arguments(const LaunchRequest& request);

struct MetricsPoint {
  qint64 step = 0;
  double loss = 0;        // NaN when the line had null (a diverged loss)
  double step_s = 0;
};

// A {"kind": "train", ...} line of the executor's metrics (executor/metrics/metrics.hpp); nullopt otherwise.
std::optional<MetricsPoint> parse_metrics_line(const QByteArray& line);

// Reads a growing file: each call returns the complete lines appended since the last.
class MetricsTail {
 public:
  explicit MetricsTail(QString path) : path_(std::move(path)) {}
  QList<QByteArray> readNewLines();
  void reset() { offset_ = 0; partial_.clear(); }

 private:
  QString path_;
  qint64 offset_ = 0;
  QByteArray partial_;
};

// RFC 4180 CSV of the model's display text: a header row, then one row per row.
QString model_to_csv(const QAbstractItemModel& model);

}  // namespace meshplan::studio
