// Pipeline schedules as data: for every pipeline stage, the ordered list of
// instructions one training step runs on it. The simulator times these lists
// and the executor runs them, so a simulated timeline and a measured one are
// the same program (docs/architecture.md, "Data flow"). Pure: no durations here.
//
// Semantics the lists assume (and the simulator replays):
//   * a stage runs its list in order; data-parallel, tensor-parallel and
//     context-parallel replicas of a stage run the same list;
//   * a send is asynchronous: it is posted when reached and completes on its
//     own (the data is ready, because the compute that produced it precedes
//     it in the list); a receive blocks until its data has arrived, and is
//     placed right before the compute that consumes it;
//   * reduce_gradients follows the last pass that produces a chunk's weight
//     gradients: from then on they are final and the data-parallel reduction
//     may complete (buckets may already start during that pass, as PyTorch
//     DDP's hooks do); optimizer_step waits for every reduction.
//
// Orders and their sources:
//   gpipe            all forwards, then all backwards (Huang et al. 2019;
//                    Narayanan et al. 2021, Sec. 2.2.1, Fig. 3)
//   1f1b             PipeDream-Flush: p - r - 1 warm-up forwards, then one
//                    forward and one backward, then the cool-down backwards
//                    (Narayanan et al. 2021, Sec. 2.2.1, Fig. 4)
//   interleaved:<v>  Megatron-LM's forward_backward_pipelining_with_interleaving:
//                    2 (p - r - 1) + (v - 1) p warm-up chunk-forwards, then
//                    1F1B over chunk passes; pass k is micro-batch
//                    (k div pv) p + k mod p on chunk (k mod pv) div p
//                    (reversed for backwards); needs m mod p = 0
//                    (Narayanan et al. 2021, Sec. 2.2.2, Fig. 4)
//   zb-h1            Qi et al. 2023 (Zero Bubble PP, ICLR 2024), Sec. 2.1,
//                    Fig. 3 top: 1F1B with the backward split into B (input
//                    gradient) and W (weight gradient); stage r defers its
//                    first r W passes so every stage holds p micro-batches,
//                    and the deferred Ws fill the cool-down. Bubble
//                    (p - 1)(T_F + T_B - T_W). The order is that of the
//                    authors' DeepSpeed port (ZeroBubbleH1Pipeline, exact
//                    semantics): warm-up F, r x (F B), (F B W)*, (B W)*, W*.
//
// With p = 1 every schedule runs each micro-batch's backward right after its
// forward (gradient accumulation), as the memory model assumes.
//
// Defines: Instruction, PipelinePrograms, schedule_problems,
// pipeline_schedule, unpaired_forwards, PassPairing, pass_pairing,
// InFlightPeak, peak_in_flight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/plan.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct Instruction {
  enum Kind : std::uint8_t {
    forward,             // forward of `micro_batch` on `chunk`
    backward,            // input and weight gradients together
    backward_input,      // zero-bubble B: the input gradient only (critical path)
    backward_weight,     // zero-bubble W: the weight gradient only (deferrable)
    send_activation,     // `chunk`'s forward output to `peer_stage`
    receive_activation,  // `chunk`'s forward input from `peer_stage`
    send_gradient,       // `chunk`'s input gradient to `peer_stage`
    receive_gradient,    // `chunk`'s output gradient from `peer_stage`
    reduce_gradients,    // `chunk`'s weight gradients are final: data-parallel reduction
    optimizer_step,      // after every reduction of the stage
  };
  Kind kind = forward;
  std::int64_t micro_batch = -1;  // 0 .. m - 1; -1 for reduce_gradients and optimizer_step
  // Global model chunk 0 .. p v - 1 (chunk c runs on stage c mod p, as in
  // stage_partition.hpp): for compute, the chunk computed; for a send, the
  // chunk that produced the tensor; for a receive, the chunk that consumes it.
  std::int64_t chunk = -1;
  std::int64_t peer_stage = -1;   // sends and receives only

  bool is_compute() const { return kind <= backward_weight; }
  friend bool operator==(const Instruction&, const Instruction&) = default;
};

std::string to_string(Instruction::Kind kind);
std::string to_string(const Instruction& instruction);  // "F mb 3 c 0", "send-act mb 3 c 0 -> 1"

// One list per pipeline stage, index = stage.
using PipelinePrograms = std::vector<std::vector<Instruction>>;

// Problems that prevent building the lists: p >= 1, m >= 1, v >= 1, v > 1
// only for interleaved, interleaved with p > 1 needs m a multiple of p. They
// name the plan fields ("mesh.pp", "global_batch", "schedule").
Problems schedule_problems(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches);

// The lists for `stages` pipeline stages and `micro_batches` micro-batches.
// Precondition: schedule_problems() is empty of errors (validate_plan checks
// the same rules); otherwise throws std::invalid_argument naming this file.
PipelinePrograms pipeline_schedule(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches);

// Combined 1F1B (Plan::overlap_expert_parallel) runs each forward beside
// another micro-batch's backward. In a stage's list, the forwards before its
// first backward and the backwards after its last forward have no partner
// (Megatron-Core's combined schedule adds one warm-up forward to the list's
// own and pairs the rest: the same passes). A split backward's B counts as a
// backward.
//
// How many chunk-forwards of stage r have no partner (as many backwards have
// none), in closed form for the evaluator; equal to counting them in
// pipeline_schedule's list (tests/test_schedule.cpp).
std::int64_t unpaired_forwards(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches, std::int64_t stage);
// In one stage's list: whether the compute instruction at `pc` has a partner.
struct PassPairing {
  std::size_t first_backward = 0;  // pc of the first backward (or B); the list's size when none
  std::size_t last_forward = 0;    // pc of the last forward; 0 when none
  bool paired(std::size_t pc, Instruction::Kind kind) const {
    if (kind == Instruction::forward) return first_backward < pc;
    if (kind == Instruction::backward || kind == Instruction::backward_input) return pc < last_forward;
    return false;
  }
};
PassPairing pass_pairing(const std::vector<Instruction>& program);

// The most (chunk, micro-batch) activation sets one stage holds at once,
// counted from its list: a set is taken by its forward and released by its
// backward (until_input_gradient) or, for split backwards, by its W pass
// (until_weight_gradient, which is the same number for unsplit schedules).
// Comparable with in_flight_chunk_micro_batches (memory_model.hpp).
struct InFlightPeak {
  std::int64_t until_input_gradient = 0;
  std::int64_t until_weight_gradient = 0;
};
// With `chunk` >= 0, only that global chunk's sets.
InFlightPeak peak_in_flight(const std::vector<Instruction>& program, std::int64_t chunk = -1);

}  // namespace meshplan
