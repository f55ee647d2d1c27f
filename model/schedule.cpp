// Pipeline schedules (schedule.hpp): first the order of compute passes on one
// stage, per schedule; then the same wrapping for all of them: a receive
// before each pass that needs a neighbour's tensor, a send after each pass
// that produces one, reduce_gradients after a chunk's last gradient pass, and
// the optimizer step at the end.
#include "model/schedule.hpp"

#include <algorithm>
#include <stdexcept>

namespace meshplan {
namespace {

using Kind = Instruction::Kind;

struct Pass {
  Kind kind;
  std::int64_t micro_batch;
  std::int64_t chunk;  // global
};

// PipeDream-Flush (Narayanan et al. 2021, Sec. 2.2.1): p - r - 1 warm-up
// forwards, steady one-forward-one-backward, cool-down backwards.
std::vector<Pass> one_f_one_b(std::int64_t p, std::int64_t m, std::int64_t r) {
  std::vector<Pass> passes;
  const std::int64_t warmup = std::min(p - r - 1, m);
  std::int64_t f = 0, b = 0;
  while (f < warmup) passes.push_back({Kind::forward, f++, r});
  while (f < m) {
    passes.push_back({Kind::forward, f++, r});
    passes.push_back({Kind::backward, b++, r});
  }
  while (b < m) passes.push_back({Kind::backward, b++, r});
  return passes;
}

// GPipe (Huang et al. 2019): every forward, then every backward, in
// micro-batch order as Narayanan et al. 2021, Fig. 3 draws it.
std::vector<Pass> gpipe(std::int64_t m, std::int64_t r) {
  std::vector<Pass> passes;
  for (std::int64_t i = 0; i < m; ++i) passes.push_back({Kind::forward, i, r});
  for (std::int64_t i = 0; i < m; ++i) passes.push_back({Kind::backward, i, r});
  return passes;
}

// Megatron-LM forward_backward_pipelining_with_interleaving (Megatron-Core
// form: warm-up min(2 (p - r - 1) + (v - 1) p, m v); older releases ran all
// forwards first when m = p).
std::vector<Pass> interleaved(std::int64_t p, std::int64_t v, std::int64_t m, std::int64_t r) {
  const std::int64_t total = m * v;
  const std::int64_t group = p * v;
  auto micro_batch = [&](std::int64_t k) { return (k / group) * p + k % p; };
  auto local_chunk = [&](std::int64_t k, bool forward) {
    const std::int64_t c = (k % group) / p;
    return forward ? c : v - 1 - c;
  };
  auto pass = [&](std::int64_t k, bool forward) {
    return Pass{forward ? Kind::forward : Kind::backward, micro_batch(k), local_chunk(k, forward) * p + r};
  };
  const std::int64_t warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
  std::vector<Pass> passes;
  for (std::int64_t k = 0; k < warmup; ++k) passes.push_back(pass(k, true));
  for (std::int64_t k = 0; k < total - warmup; ++k) {
    passes.push_back(pass(warmup + k, true));
    passes.push_back(pass(k, false));
  }
  for (std::int64_t k = total - warmup; k < total; ++k) passes.push_back(pass(k, false));
  return passes;
}

// ZB-H1 (Qi et al. 2023, Sec. 2.1): warm-up as 1F1B, then r steps of F B with
// the W deferred, then F B W, then the cool-down B W, then the deferred Ws.
std::vector<Pass> zb_h1(std::int64_t p, std::int64_t m, std::int64_t r) {
  std::vector<Pass> passes;
  std::int64_t f = 0, b = 0, w = 0;
  const std::int64_t warmup = std::min(p - r - 1, m);
  while (f < warmup) passes.push_back({Kind::forward, f++, r});
  for (std::int64_t deferred = 0; deferred < r && f < m; ++deferred) {
    passes.push_back({Kind::forward, f++, r});
    passes.push_back({Kind::backward_input, b++, r});
  }
  while (f < m) {
    passes.push_back({Kind::forward, f++, r});
    passes.push_back({Kind::backward_input, b++, r});
    passes.push_back({Kind::backward_weight, w++, r});
  }
  while (b < m) {
    passes.push_back({Kind::backward_input, b++, r});
    passes.push_back({Kind::backward_weight, w++, r});
  }
  while (w < m) passes.push_back({Kind::backward_weight, w++, r});
  return passes;
}

std::vector<Pass> compute_order(const Schedule& schedule, std::int64_t p, std::int64_t m, std::int64_t r) {
  switch (schedule.kind) {
    case ScheduleKind::gpipe: return p == 1 ? one_f_one_b(p, m, r) : gpipe(m, r);
    case ScheduleKind::one_f_one_b: return one_f_one_b(p, m, r);
    case ScheduleKind::interleaved: return interleaved(p, schedule.virtual_stages, m, r);
    case ScheduleKind::zb_h1: return zb_h1(p, m, r);
  }
  return {};
}

bool produces_weight_gradients(Kind kind) { return kind == Kind::backward || kind == Kind::backward_weight; }

// Adds the point-to-point transfers, the reductions and the optimizer step.
std::vector<Instruction> wrap(const std::vector<Pass>& passes, std::int64_t p, std::int64_t v) {
  const std::int64_t last_chunk = p * v - 1;
  const bool pipelined = p > 1;
  auto previous_stage = [&](std::int64_t chunk) { return (chunk - 1 + p) % p; };
  auto next_stage = [&](std::int64_t chunk) { return (chunk + 1) % p; };

  // The last gradient pass of each chunk on this stage.
  std::vector<std::size_t> last_gradient_pass(static_cast<std::size_t>(v), passes.size());
  for (std::size_t i = 0; i < passes.size(); ++i) {
    if (produces_weight_gradients(passes[i].kind)) last_gradient_pass[static_cast<std::size_t>(passes[i].chunk / p)] = i;
  }

  std::vector<Instruction> out;
  out.reserve(passes.size() * 3 + static_cast<std::size_t>(v) + 1);
  for (std::size_t i = 0; i < passes.size(); ++i) {
    const Pass& pass = passes[i];
    const std::int64_t mb = pass.micro_batch, c = pass.chunk;
    switch (pass.kind) {
      case Kind::forward:
        if (pipelined && c > 0) out.push_back({Kind::receive_activation, mb, c, previous_stage(c)});
        out.push_back({Kind::forward, mb, c, -1});
        if (pipelined && c < last_chunk) out.push_back({Kind::send_activation, mb, c, next_stage(c)});
        break;
      case Kind::backward:
      case Kind::backward_input:
        if (pipelined && c < last_chunk) out.push_back({Kind::receive_gradient, mb, c, next_stage(c)});
        out.push_back({pass.kind, mb, c, -1});
        if (pipelined && c > 0) out.push_back({Kind::send_gradient, mb, c, previous_stage(c)});
        break;
      default: out.push_back({pass.kind, mb, c, -1}); break;
    }
    if (produces_weight_gradients(pass.kind) && last_gradient_pass[static_cast<std::size_t>(c / p)] == i) {
      out.push_back({Kind::reduce_gradients, -1, c, -1});
    }
  }
  out.push_back({Kind::optimizer_step, -1, -1, -1});
  return out;
}

}  // namespace

std::string to_string(Instruction::Kind kind) {
  switch (kind) {
    case Kind::forward: return "F";
    case Kind::backward: return "B";
    case Kind::backward_input: return "B-input";
    case Kind::backward_weight: return "W";
    case Kind::send_activation: return "send-act";
    case Kind::receive_activation: return "recv-act";
    case Kind::send_gradient: return "send-grad";
    case Kind::receive_gradient: return "recv-grad";
    case Kind::reduce_gradients: return "reduce-grads";
    case Kind::optimizer_step: return "optimizer";
  }
  return "?";
}

std::string to_string(const Instruction& in) {
  std::string text = to_string(in.kind);
  if (in.micro_batch >= 0) text += " mb " + std::to_string(in.micro_batch);
  if (in.chunk >= 0) text += " c " + std::to_string(in.chunk);
  if (in.kind == Kind::send_activation || in.kind == Kind::send_gradient) text += " -> " + std::to_string(in.peer_stage);
  if (in.kind == Kind::receive_activation || in.kind == Kind::receive_gradient) {
    text += " <- " + std::to_string(in.peer_stage);
  }
  return text;
}

Problems schedule_problems(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches) {
  Problems problems;
  if (stages < 1) problems.push_back({Severity::error, "mesh.pp", "needs at least 1 pipeline stage"});
  if (micro_batches < 1) {
    problems.push_back({Severity::error, "global_batch", "needs at least 1 micro-batch per step (got " +
                                                            std::to_string(micro_batches) + ")"});
  }
  const std::int64_t v = schedule.virtual_stages;
  if (v < 1) problems.push_back({Severity::error, "schedule", "virtual stages must be at least 1"});
  if (v > 1 && schedule.kind != ScheduleKind::interleaved) {
    problems.push_back({Severity::error, "schedule", "only interleaved schedules have more than 1 chunk per stage"});
  }
  if (schedule.kind == ScheduleKind::interleaved && stages > 1 && micro_batches >= 1 && micro_batches % stages != 0) {
    problems.push_back({Severity::error, "schedule",
                        "interleaved needs the micro-batches per step (" + std::to_string(micro_batches) +
                            ") to be a multiple of the pipeline stages (" + std::to_string(stages) +
                            ") (Narayanan et al. 2021, Sec. 2.2.2)"});
  }
  return problems;
}

PipelinePrograms pipeline_schedule(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches) {
  const Problems problems = schedule_problems(schedule, stages, micro_batches);
  if (has_errors(problems)) {
    std::string text = std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": pipeline_schedule:";
    for (const auto& p : problems) text += " " + describe(p) + ";";
    throw std::invalid_argument(text);
  }
  PipelinePrograms programs(static_cast<std::size_t>(stages));
  for (std::int64_t r = 0; r < stages; ++r) {
    programs[static_cast<std::size_t>(r)] =
        wrap(compute_order(schedule, stages, micro_batches, r), stages, schedule.virtual_stages);
  }
  return programs;
}

std::int64_t unpaired_forwards(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches, std::int64_t stage) {
  const std::int64_t p = stages, m = micro_batches, r = stage;
  if (m < 1) return 0;
  switch (schedule.kind) {
    case ScheduleKind::gpipe: return p == 1 ? 1 : m;  // with one stage, gpipe's list is 1F1B's
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::zb_h1: return std::min(p - r, m);  // the warm-up and the first steady forward
    case ScheduleKind::interleaved: {
      const std::int64_t total = m * schedule.virtual_stages;
      return std::min(std::min(2 * (p - r - 1) + (schedule.virtual_stages - 1) * p, total) + 1, total);
    }
  }
  return m;
}

PassPairing pass_pairing(const std::vector<Instruction>& program) {
  PassPairing pairing{program.size(), 0};
  for (std::size_t pc = 0; pc < program.size(); ++pc) {
    const Kind kind = program[pc].kind;
    if ((kind == Kind::backward || kind == Kind::backward_input) && pairing.first_backward == program.size()) pairing.first_backward = pc;
    if (kind == Kind::forward) pairing.last_forward = pc;
  }
  return pairing;
}

InFlightPeak peak_in_flight(const std::vector<Instruction>& program, std::int64_t chunk) {
  InFlightPeak peak;
  std::int64_t held_input = 0, held_weight = 0;
  for (const Instruction& in : program) {
    if (chunk >= 0 && in.chunk != chunk) continue;
    switch (in.kind) {
      case Kind::forward:
        ++held_input;
        ++held_weight;
        peak.until_input_gradient = std::max(peak.until_input_gradient, held_input);
        peak.until_weight_gradient = std::max(peak.until_weight_gradient, held_weight);
        break;
      case Kind::backward:
        --held_input;
        --held_weight;
        break;
      case Kind::backward_input: --held_input; break;
      case Kind::backward_weight: --held_weight; break;
      default: break;
    }
  }
  return peak;
}

}  // namespace meshplan
