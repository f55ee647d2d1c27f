// Draws what run_series.hpp read (a training run's loss, step time and
// memory, measured against predicted) as one PNG or SVG image with Qt
// Charts, offscreen: `meshplan plot`'s drawing half.
//
// Panels, each only when its data is there (run_series.hpp says why not):
//   loss        training loss by step; eval loss, and eval accuracy (%) on a
//               right-hand axis, when the run evaluated
//   step time   measured by step; the cost model's prediction (run report)
//               as a dashed horizontal line, and the measured median
//   memory      the ledger's peak so far by step; the predicted memory and
//               the process's peak resident memory (VmHWM) as lines
//
// Why a widget tree rendered into an image: QChart is a QGraphicsWidget and
// lays itself out in a QChartView; rendering the views into a QImage of the
// requested size (or a QSvgGenerator) gives exactly that size whatever the
// screen. Qt needs a QApplication; without a display the offscreen platform
// plugin serves (QT_QPA_PLATFORM=offscreen, set when unset).
//
// defines: the series colours, render_run_chart
#pragma once

#include <string>

#include "gui/plot/run_series.hpp"
#include "model/problem.hpp"

namespace meshplan::plot {

// Series colours (Tableau 10, as the studio's palette): tests look for them.
inline constexpr const char* kMeasuredColor = "#4e79a7";   // blue: training loss, measured step time and memory
inline constexpr const char* kPredictedColor = "#e15759";  // red: the cost model's predictions
inline constexpr const char* kEvalColor = "#f28e2b";       // orange: eval loss
inline constexpr const char* kAccuracyColor = "#59a14f";   // green: eval accuracy
inline constexpr const char* kReferenceColor = "#7f7f7f";  // grey: measured median, process peak memory

// Draws `input` into `path`: SVG when it ends in .svg, else PNG. Creates an
// offscreen QApplication for the call when there is none. Problems name `path`.
Problems render_run_chart(const PlotInput& input, const std::string& path, ChartSize size);

}  // namespace meshplan::plot
