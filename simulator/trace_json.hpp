// A simulated step as Trace Event JSON, the format Perfetto
// (ui.perfetto.dev) and chrome://tracing open ("Trace Event Format",
// Google, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAqU8):
//   * one process (pid) per pipeline stage, named after the stage, its
//     representative rank and node; one thread (tid) per stream (Track);
//   * "X" (complete) events, ts and dur in microseconds, written from whole
//     nanoseconds so that rounding never makes two events on one track overlap;
//     args: micro_batch, chunk, bytes, axis, and critical when the event is on
//     the critical path;
//   * "C" (counter) events per stage: activation bytes in use, beside the
//     model states and buffers the memory model counts.
// Written as a stream (a step of a large plan has a few hundred thousand events).
//
// Defines: write_trace_json, write_trace_file.
#pragma once

#include <ostream>
#include <string>

#include "model/problem.hpp"
#include "simulator/simulate.hpp"

namespace meshplan::sim {

void write_trace_json(std::ostream& out, const Simulation& simulation);

// Writes to a temporary name, then renames into place; problems name the path.
Problems write_trace_file(const std::string& path, const Simulation& simulation);

}  // namespace meshplan::sim
