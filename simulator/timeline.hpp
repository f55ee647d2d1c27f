// The record of one simulated step: every interval a representative device
// spent on a stream, and its activation memory over time. Tracks are the
// streams a GPU would have: one compute stream, one for the collectives
// inside layers, one per pipeline direction, and one per data-parallel
// process group (PyTorch's ProcessGroupNCCL runs a group's collectives in
// order on one NCCL stream: FSDP's gathers and reduce-scatters share one, DP
// buckets and ZeRO's post-step gather another). Events on one track never
// overlap. Each event names
// the event whose end released it, so the critical path can be walked back.
//
// Defines: Track, EventKind, SimEvent, MemorySample, Timeline.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "model/mesh.hpp"

namespace meshplan::sim {

enum class Track : std::uint8_t {
  compute,           // forward, backward, input/weight gradient, optimizer
  layer_comm,        // tp/cp/ep collectives the next block waits for; the receive-side gather
  send_next,         // activations to stage (r + 1) mod p
  send_previous,     // gradients to stage (r - 1) mod p
  fsdp_comm,         // fsdp / ZeRO-3: weight all-gathers and gradient reduce-scatters
  dp_comm,           // data-parallel gradient buckets; ZeRO-1/2 weight gather after the step
};
inline constexpr int track_count = 6;

inline std::string_view track_name(Track track) {
  switch (track) {
    case Track::compute: return "compute";
    case Track::layer_comm: return "tp/cp/ep comm";
    case Track::send_next: return "pp send (activations)";
    case Track::send_previous: return "pp send (gradients)";
    case Track::fsdp_comm: return "fsdp comm";
    case Track::dp_comm: return "dp comm";
  }
  return "?";
}

enum class EventKind : std::uint8_t {
  forward,
  backward,
  backward_input,
  backward_weight,
  optimizer,
  layer_collective,
  activation_transfer,
  gradient_transfer,
  receive_gather,
  parameter_gather,
  gradient_reduce_scatter,
  gradient_bucket,
  parameter_gather_after_step,
};

inline std::string_view to_string(EventKind kind) {
  switch (kind) {
    case EventKind::forward: return "F";
    case EventKind::backward: return "B";
    case EventKind::backward_input: return "B (input grad)";
    case EventKind::backward_weight: return "W (weight grad)";
    case EventKind::optimizer: return "optimizer";
    case EventKind::layer_collective: return "collectives";
    case EventKind::activation_transfer: return "send activation";
    case EventKind::gradient_transfer: return "send gradient";
    case EventKind::receive_gather: return "gather received activation";
    case EventKind::parameter_gather: return "gather weights";
    case EventKind::gradient_reduce_scatter: return "reduce-scatter gradients";
    case EventKind::gradient_bucket: return "reduce gradient bucket";
    case EventKind::parameter_gather_after_step: return "gather updated weights";
  }
  return "?";
}

inline bool is_compute(EventKind kind) { return kind <= EventKind::optimizer; }

struct SimEvent {
  double start_s = 0;
  double end_s = 0;
  double bytes = 0;                // communication: nccl-tests' S
  std::int32_t stage = 0;
  std::int32_t micro_batch = -1;
  std::int32_t chunk = -1;         // global chunk
  std::int32_t predecessor = -1;   // the event whose end released this one (-1: the step's start)
  Track track = Track::compute;
  EventKind kind = EventKind::forward;
  Axis axis = Axis::tp;            // communication only

  double duration_s() const { return end_s - start_s; }
};

// Activation bytes held by a stage's representative from `time_s` on.
struct MemorySample {
  double time_s = 0;
  std::int32_t stage = 0;
  double activation_bytes = 0;
};

struct Timeline {
  std::vector<SimEvent> events;
  std::vector<MemorySample> memory;
  std::int64_t engine_events = 0;  // events the discrete-event loop processed
};

}  // namespace meshplan::sim
