// The discrete-event engine: replays every pipeline stage's instruction list
// (model/schedule.hpp) on one representative device per stage, with the
// durations and volumes of a StepWork, and records a Timeline.
//
// The event model (docs/simulator.md, "Event model"):
//   * a stage runs its list in order. A compute instruction runs its chunk's
//     segments on the compute stream; after each segment, the collectives the
//     next block needs (tp, cp, ep) run on the layer stream and the stage
//     waits for them (with overlap_tensor_parallel, a backward's collectives
//     start when its weight-gradient part does and run beside it);
//   * a send posts a transfer on the stage's send stream for that direction
//     and the stage goes on; a receive waits until the transfer has arrived
//     (then, with Megatron's scatter/gather, the tp all-gather runs);
//   * with sharded weights, each segment waits for its weights' all-gather,
//     issued in list order one segment ahead when the plan prefetches
//     (overlap_parameter_gather, FSDP's prefetch), and each gradient pass
//     reduce-scatters its segment's gradients, on the same fsdp stream;
//   * the data-parallel buckets of a chunk become ready while its last
//     gradient pass produces them and are reduced in order on the dp
//     stream; the optimizer waits for every reduction, then ZeRO-1/2 gather
//     the updated weights on the dp stream;
//   * every communication is a flow on the FlowNetwork: its bandwidth part
//     shares links with concurrent flows, then its latency part elapses.
//
// Defines: replay.
#pragma once

#include "model/schedule.hpp"
#include "simulator/step_work.hpp"
#include "simulator/timeline.hpp"

namespace meshplan::sim {

// `programs` must be pipeline_schedule(work.schedule, work.stages,
// work.micro_batches). A list that cannot finish (a receive with no matching
// send) throws std::logic_error naming the stage and the instruction: the
// schedules never produce one.
Timeline replay(const StepWork& work, const PipelinePrograms& programs, bool contention);

}  // namespace meshplan::sim
