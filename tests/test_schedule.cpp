// Pipeline schedules as instruction lists (model/schedule.hpp): the
// invariants every schedule keeps (forward before backward, matched sends and
// receives, one reduction per chunk, optimizer last), the published orders
// (Megatron-LM's interleaving, ZB-H1's deferred W), and the in-flight counts
// the memory model assumes.
#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "model/memory_model.hpp"
#include "model/schedule.hpp"

namespace meshplan {
namespace {

using Kind = Instruction::Kind;

struct Case {
  Schedule schedule;
  std::int64_t stages;
  std::int64_t micro_batches;
};

std::vector<Case> cases() {
  std::vector<Case> out;
  for (std::int64_t p : {1, 2, 4, 7}) {
    for (std::int64_t m : {1, 3, 4, 8, 16}) {
      out.push_back({{ScheduleKind::gpipe, 1}, p, m});
      out.push_back({{ScheduleKind::one_f_one_b, 1}, p, m});
      out.push_back({{ScheduleKind::zb_h1, 1}, p, m});
      for (std::int64_t v : {2, 3}) {
        if (m % p == 0) out.push_back({{ScheduleKind::interleaved, v}, p, m});
      }
    }
  }
  return out;
}

std::string name(const Case& c) {
  return to_string(c.schedule) + " p=" + std::to_string(c.stages) + " m=" + std::to_string(c.micro_batches);
}

TEST(Schedule, EveryForwardPrecedesItsBackwardOnEveryStage) {
  for (const Case& c : cases()) {
    const PipelinePrograms programs = pipeline_schedule(c.schedule, c.stages, c.micro_batches);
    ASSERT_EQ(static_cast<std::int64_t>(programs.size()), c.stages) << name(c);
    const std::int64_t v = c.schedule.virtual_stages;
    const bool split = c.schedule.kind == ScheduleKind::zb_h1;
    for (std::int64_t r = 0; r < c.stages; ++r) {
      // (kind, micro-batch, chunk) -> position; each must appear exactly once.
      std::map<std::tuple<int, std::int64_t, std::int64_t>, std::size_t> at;
      const auto& program = programs[static_cast<std::size_t>(r)];
      for (std::size_t i = 0; i < program.size(); ++i) {
        const Instruction& in = program[i];
        if (!in.is_compute()) continue;
        EXPECT_EQ(in.chunk % c.stages, r) << name(c) << ": chunk " << in.chunk << " on stage " << r;
        EXPECT_TRUE(at.emplace(std::tuple{static_cast<int>(in.kind), in.micro_batch, in.chunk}, i).second)
            << name(c) << " stage " << r << ": " << to_string(in) << " twice";
      }
      for (std::int64_t j = 0; j < v; ++j) {
        const std::int64_t chunk = j * c.stages + r;
        for (std::int64_t mb = 0; mb < c.micro_batches; ++mb) {
          const auto f = at.find({Kind::forward, mb, chunk});
          ASSERT_NE(f, at.end()) << name(c) << " stage " << r << " mb " << mb << " chunk " << chunk << ": no forward";
          if (split) {
            const auto b = at.find({Kind::backward_input, mb, chunk});
            const auto w = at.find({Kind::backward_weight, mb, chunk});
            ASSERT_NE(b, at.end()) << name(c);
            ASSERT_NE(w, at.end()) << name(c);
            EXPECT_LT(f->second, b->second) << name(c) << " stage " << r << " mb " << mb;
            EXPECT_LT(b->second, w->second) << name(c) << " stage " << r << " mb " << mb;
          } else {
            const auto b = at.find({Kind::backward, mb, chunk});
            ASSERT_NE(b, at.end()) << name(c);
            EXPECT_LT(f->second, b->second) << name(c) << " stage " << r << " mb " << mb;
          }
        }
      }
      const std::size_t passes = static_cast<std::size_t>(v * c.micro_batches * (split ? 3 : 2));
      EXPECT_EQ(at.size(), passes) << name(c) << " stage " << r;
    }
  }
}

TEST(Schedule, EverySendHasOneMatchingReceive) {
  for (const Case& c : cases()) {
    const PipelinePrograms programs = pipeline_schedule(c.schedule, c.stages, c.micro_batches);
    // (receiving stage, activation?, micro-batch, consuming chunk, sending stage) -> count
    std::map<std::tuple<std::int64_t, bool, std::int64_t, std::int64_t, std::int64_t>, int> sent, received;
    for (std::int64_t r = 0; r < c.stages; ++r) {
      for (const Instruction& in : programs[static_cast<std::size_t>(r)]) {
        if (in.kind == Kind::send_activation) ++sent[{in.peer_stage, true, in.micro_batch, in.chunk + 1, r}];
        if (in.kind == Kind::send_gradient) ++sent[{in.peer_stage, false, in.micro_batch, in.chunk - 1, r}];
        if (in.kind == Kind::receive_activation) ++received[{r, true, in.micro_batch, in.chunk, in.peer_stage}];
        if (in.kind == Kind::receive_gradient) ++received[{r, false, in.micro_batch, in.chunk, in.peer_stage}];
      }
    }
    EXPECT_EQ(sent, received) << name(c);
    for (const auto& [key, count] : sent) EXPECT_EQ(count, 1) << name(c);
    // Every chunk boundary is crossed once per micro-batch in each direction.
    const std::int64_t boundaries = c.stages > 1 ? c.schedule.virtual_stages * c.stages - 1 : 0;
    EXPECT_EQ(static_cast<std::int64_t>(sent.size()), 2 * boundaries * c.micro_batches) << name(c);
  }
}

TEST(Schedule, ReductionsFollowTheLastGradientPassAndTheOptimizerComesLast) {
  for (const Case& c : cases()) {
    const PipelinePrograms programs = pipeline_schedule(c.schedule, c.stages, c.micro_batches);
    for (const auto& program : programs) {
      ASSERT_FALSE(program.empty());
      EXPECT_EQ(program.back().kind, Kind::optimizer_step) << name(c);
      std::map<std::int64_t, int> reductions;
      for (std::size_t i = 0; i < program.size(); ++i) {
        if (program[i].kind != Kind::reduce_gradients) continue;
        ++reductions[program[i].chunk];
        for (std::size_t later = i + 1; later < program.size(); ++later) {
          const Instruction& next = program[later];
          const bool gradient_pass = next.kind == Kind::backward || next.kind == Kind::backward_weight;
          EXPECT_FALSE(gradient_pass && next.chunk == program[i].chunk)
              << name(c) << ": " << to_string(next) << " after the reduction";
        }
      }
      EXPECT_EQ(static_cast<std::int64_t>(reductions.size()), c.schedule.virtual_stages) << name(c);
      for (const auto& [chunk, count] : reductions) EXPECT_EQ(count, 1) << name(c) << " chunk " << chunk;
    }
  }
}

// PipeDream-Flush keeps at most p - r micro-batches on stage r
// (Narayanan et al. 2021, Sec. 2.2.1), GPipe all m.
TEST(Schedule, OneFOneBKeepsAtMostPMinusRMicroBatchesInFlight) {
  for (std::int64_t p : {2, 4, 8, 64}) {
    for (std::int64_t m : {std::int64_t{1}, std::int64_t{3}, p, 4 * p}) {
      const PipelinePrograms one_f_one_b = pipeline_schedule({ScheduleKind::one_f_one_b, 1}, p, m);
      const PipelinePrograms gpipe = pipeline_schedule({ScheduleKind::gpipe, 1}, p, m);
      for (std::int64_t r = 0; r < p; ++r) {
        EXPECT_EQ(peak_in_flight(one_f_one_b[static_cast<std::size_t>(r)]).until_input_gradient, std::min(p - r, m))
            << "p=" << p << " m=" << m << " r=" << r;
        EXPECT_EQ(peak_in_flight(gpipe[static_cast<std::size_t>(r)]).until_input_gradient, m);
      }
    }
  }
}

// The lists against the closed forms of memory_model.hpp. For ZB-H1 the
// memory model counts activation sets until their W (a deferred W still
// needs its inputs): p sets on every stage (Qi et al. 2023, Sec. 2.1: "all
// pipeline stages have the same number of in-flight microbatches").
TEST(Schedule, InFlightCountsAgreeWithTheMemoryModel) {
  for (const Case& c : cases()) {
    const PipelinePrograms programs = pipeline_schedule(c.schedule, c.stages, c.micro_batches);
    for (std::int64_t r = 0; r < c.stages; ++r) {
      const InFlightPeak peak = peak_in_flight(programs[static_cast<std::size_t>(r)]);
      const double model = in_flight_chunk_micro_batches(c.schedule, c.stages, r, c.micro_batches);
      if (c.stages == 1 && c.schedule.kind == ScheduleKind::interleaved) {
        // One stage holding v chunks keeps one micro-batch of each: v sets,
        // where the memory model's p = 1 rule says 1 (validation rejects
        // interleaving without pipeline stages).
        EXPECT_EQ(peak.until_input_gradient, c.schedule.virtual_stages) << name(c);
        continue;
      }
      EXPECT_EQ(static_cast<double>(peak.until_weight_gradient), model) << name(c) << " stage " << r;
      if (c.schedule.kind == ScheduleKind::zb_h1) {
        EXPECT_EQ(peak.until_weight_gradient, std::min(c.stages, c.micro_batches)) << name(c) << " stage " << r;
      } else {
        EXPECT_EQ(peak.until_weight_gradient, peak.until_input_gradient) << name(c);
      }
    }
  }
}

// The embedding (chunk 0 on stage 0) and the head (chunk p v - 1 on the last
// stage) hold as many micro-batches as the memory model's closed forms say:
// the embedding until its weight gradient (ZB-H1 defers it), the head until
// its input gradient (its logits go then).
TEST(Schedule, EmbeddingAndHeadInFlightCountsAgreeWithTheMemoryModel) {
  int interleaved_beyond_p = 0;
  for (const Case& c : cases()) {
    if (c.stages == 1 && c.schedule.kind == ScheduleKind::interleaved) continue;  // validation rejects it
    const PipelinePrograms programs = pipeline_schedule(c.schedule, c.stages, c.micro_batches);
    const std::int64_t v = c.schedule.kind == ScheduleKind::interleaved ? c.schedule.virtual_stages : 1;
    const InFlightPeak embedding = peak_in_flight(programs.front(), 0);
    const InFlightPeak head = peak_in_flight(programs.back(), c.stages * v - 1);
    EXPECT_EQ(static_cast<double>(embedding.until_weight_gradient),
              embedding_in_flight_micro_batches(c.schedule, c.stages, c.micro_batches))
        << name(c);
    EXPECT_EQ(static_cast<double>(head.until_input_gradient), head_in_flight_micro_batches(c.schedule, c.stages, c.micro_batches))
        << name(c);
    if (c.schedule.kind == ScheduleKind::interleaved && embedding.until_weight_gradient > c.stages) ++interleaved_beyond_p;
  }
  EXPECT_GT(interleaved_beyond_p, 0);  // the cases reach the interleaved warm-up's second round
}

std::vector<std::tuple<Kind, std::int64_t, std::int64_t>> compute_passes(const std::vector<Instruction>& program) {
  std::vector<std::tuple<Kind, std::int64_t, std::int64_t>> out;
  for (const Instruction& in : program) {
    if (in.is_compute()) out.emplace_back(in.kind, in.micro_batch, in.chunk);
  }
  return out;
}

// Megatron-LM's interleaved order for p = 2, v = 2, m = 4 on stage 0: warm-up
// 2 (p - 1) + (v - 1) p = 4 chunk-forwards; pass k is micro-batch
// (k div 4) 2 + k mod 2 on local chunk (k mod 4) div 2 (reversed backwards).
TEST(Schedule, InterleavedFollowsMegatronOrder) {
  const PipelinePrograms programs = pipeline_schedule({ScheduleKind::interleaved, 2}, 2, 4);
  const auto F = Kind::forward, B = Kind::backward;
  const std::vector<std::tuple<Kind, std::int64_t, std::int64_t>> expected = {
      {F, 0, 0}, {F, 1, 0}, {F, 0, 2}, {F, 1, 2},                                    // warm-up
      {F, 2, 0}, {B, 0, 2}, {F, 3, 0}, {B, 1, 2}, {F, 2, 2}, {B, 0, 0}, {F, 3, 2}, {B, 1, 0},  // 1F1B
      {B, 2, 2}, {B, 3, 2}, {B, 2, 0}, {B, 3, 0}};                                   // cool-down
  EXPECT_EQ(compute_passes(programs[0]), expected);
  // Chunk 1 (on stage 1) hands its output to chunk 2, back on stage 0.
  bool wraps = false;
  for (const Instruction& in : programs[1]) wraps = wraps || (in.kind == Kind::send_activation && in.chunk == 1 && in.peer_stage == 0);
  EXPECT_TRUE(wraps);
}

// ZB-H1 (Qi et al. 2023, Sec. 2.1): stage r runs r input-gradient passes
// before its first weight-gradient pass, so its first W (micro-batch 0)
// follows the B of micro-batch r; the last Ws close the list.
TEST(Schedule, ZeroBubbleDefersTheWeightGradientsOfLaterStages) {
  const std::int64_t p = 4, m = 8;
  const PipelinePrograms programs = pipeline_schedule({ScheduleKind::zb_h1, 1}, p, m);
  for (std::int64_t r = 0; r < p; ++r) {
    const auto passes = compute_passes(programs[static_cast<std::size_t>(r)]);
    std::int64_t inputs_before_first_weight = 0;
    for (const auto& [kind, mb, chunk] : passes) {
      if (kind == Kind::backward_weight) {
        EXPECT_EQ(mb, 0);
        break;
      }
      if (kind == Kind::backward_input) ++inputs_before_first_weight;
    }
    EXPECT_EQ(inputs_before_first_weight, r + 1) << "stage " << r;
    // Warm-up as in 1F1B: p - r - 1 forwards before the first B.
    std::int64_t leading_forwards = 0;
    while (std::get<0>(passes[static_cast<std::size_t>(leading_forwards)]) == Kind::forward) ++leading_forwards;
    EXPECT_EQ(leading_forwards, p - r) << "stage " << r;  // the warm-up plus the first steady forward
    EXPECT_EQ(std::get<0>(passes.back()), Kind::backward_weight);
  }
}

TEST(Schedule, OneStageRunsEachBackwardRightAfterItsForward) {
  for (ScheduleKind kind : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b}) {
    const PipelinePrograms programs = pipeline_schedule({kind, 1}, 1, 3);
    const auto F = Kind::forward, B = Kind::backward;
    const std::vector<std::tuple<Kind, std::int64_t, std::int64_t>> expected = {
        {F, 0, 0}, {B, 0, 0}, {F, 1, 0}, {B, 1, 0}, {F, 2, 0}, {B, 2, 0}};
    EXPECT_EQ(compute_passes(programs[0]), expected);
    for (const Instruction& in : programs[0]) EXPECT_LT(in.peer_stage, 0) << "no transfers with one stage";
  }
}

// Combined 1F1B (overlap_expert_parallel): the evaluator's closed count of a
// stage's unpaired chunk-forwards equals the count in its list, as many
// backwards are unpaired, and the pairs are the list's: after the warm-up
// each forward follows a backward and each backward precedes a forward.
TEST(Schedule, UnpairedPassesOfCombinedOneFOneBAreTheListsEnds) {
  int with_pairs = 0;
  for (const Case& c : cases()) {
    const PipelinePrograms programs = pipeline_schedule(c.schedule, c.stages, c.micro_batches);
    for (std::int64_t r = 0; r < c.stages; ++r) {
      const auto& program = programs[static_cast<std::size_t>(r)];
      const PassPairing pairing = pass_pairing(program);
      std::int64_t forwards = 0, unpaired_forwards_counted = 0, backwards = 0, unpaired_backwards = 0;
      for (std::size_t pc = 0; pc < program.size(); ++pc) {
        const Kind kind = program[pc].kind;
        if (kind == Kind::forward) {
          ++forwards;
          if (!pairing.paired(pc, kind)) ++unpaired_forwards_counted;
        } else if (kind == Kind::backward || kind == Kind::backward_input) {
          ++backwards;
          if (!pairing.paired(pc, kind)) ++unpaired_backwards;
        } else {
          EXPECT_FALSE(pairing.paired(pc, kind)) << name(c) << " stage " << r << ": only passes pair";
        }
      }
      EXPECT_EQ(unpaired_forwards(c.schedule, c.stages, c.micro_batches, r), unpaired_forwards_counted)
          << name(c) << " stage " << r;
      EXPECT_EQ(unpaired_backwards, unpaired_forwards_counted) << name(c) << " stage " << r;
      EXPECT_EQ(forwards, backwards);
      EXPECT_GE(unpaired_forwards_counted, 1) << name(c) << " stage " << r << ": the first forward has no partner";
      if (unpaired_forwards_counted < forwards) ++with_pairs;
    }
  }
  EXPECT_GT(with_pairs, 50);
  // One stage, three micro-batches: F0 alone, then (B0, F1), (B1, F2), then B2 alone.
  const auto program = pipeline_schedule({ScheduleKind::one_f_one_b, 1}, 1, 3)[0];
  const PassPairing pairing = pass_pairing(program);
  std::vector<bool> paired;
  for (std::size_t pc = 0; pc < program.size(); ++pc) paired.push_back(pairing.paired(pc, program[pc].kind));
  const std::vector<bool> expected = {false, true, true, true, true, false};  // F0 B0 F1 B1 F2 B2 (+ reduce, optimizer)
  EXPECT_EQ(std::vector<bool>(paired.begin(), paired.begin() + 6), expected);
  // Megatron-Core's interleaved warm-up for stage 0 of 4 with v = 2 is 2 (4 - 1) + 4 = 10; combined 1F1B adds one.
  EXPECT_EQ(unpaired_forwards({ScheduleKind::interleaved, 2}, 4, 8, 0), 11);
}

TEST(Schedule, RejectsWhatCannotBeScheduled) {
  const Problems interleaved = schedule_problems({ScheduleKind::interleaved, 2}, 4, 6);
  ASSERT_TRUE(has_errors(interleaved));
  EXPECT_EQ(interleaved.front().where, "schedule");
  EXPECT_NE(interleaved.front().message.find("multiple of the pipeline stages"), std::string::npos);
  EXPECT_TRUE(has_errors(schedule_problems({ScheduleKind::one_f_one_b, 1}, 0, 4)));
  EXPECT_TRUE(has_errors(schedule_problems({ScheduleKind::one_f_one_b, 1}, 4, 0)));
  EXPECT_TRUE(has_errors(schedule_problems({ScheduleKind::zb_h1, 2}, 4, 8)));
  EXPECT_FALSE(has_errors(schedule_problems({ScheduleKind::interleaved, 2}, 4, 8)));
  EXPECT_THROW(pipeline_schedule({ScheduleKind::interleaved, 2}, 4, 6), std::invalid_argument);
}

}  // namespace
}  // namespace meshplan
