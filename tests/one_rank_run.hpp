// A GPT trained on one rank on a given backend and ops, and everything the
// device tests compare between two such runs (tests/test_gpt_on_device.cpp
// on a stand-in device, tests/cuda/test_cuda_gpt.cpp on a GPU, each against
// the CPU): the step reports, the parameters and AdamW moments after
// training, an evaluation, and the memory each category holds. The data is
// a byte-level text of a repeated phrase (phrase_loader), as the executor
// model tests use.
//
// defines: phrase_loader, one_rank_plan, one_rank_model_problems, OneRankRun, train_one_rank
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "executor/backend/backend.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/data/text.hpp"
#include "executor/parallel/gpt_ops.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "model/schedule.hpp"
#include "tests/tiny_gpt.hpp"

namespace meshplan::testing_support {

// Byte windows of `seq_len` tokens over `copies` copies of a phrase (the training split).
inline std::unique_ptr<data::TextLoader> phrase_loader(std::int64_t seq_len, std::uint64_t seed, int copies = 200) {
  const std::string phrase = "the quick brown fox jumps over the lazy dog. ";
  std::vector<std::uint8_t> corpus;
  for (int i = 0; i < copies; ++i) corpus.insert(corpus.end(), phrase.begin(), phrase.end());
  const data::TextSplitRange range = data::text_split_range(std::ssize(corpus), data::Split::train);
  return std::make_unique<data::TextLoader>(std::move(corpus), range, seq_len, seed);
}

// The plan of one device: B-sequence micro-batches, M of them per step, 1F1B.
inline Plan one_rank_plan(std::int64_t B, std::int64_t M, Precision precision) {
  Plan plan;
  plan.mesh = parse_mesh("dp=1", "mesh").value;
  plan.micro_batch = B;
  plan.global_batch = B * M;
  plan.precision = precision;
  plan.schedule = *parse_schedule("1f1b");
  return plan;
}

// Why ParallelGpt::create refuses `spec` on `backend` with `ops` (one rank, micro-batches of 2 sequences of T).
inline Problems one_rank_model_problems(const ModelSpec& spec, exec::Backend& backend,
                                        std::unique_ptr<exec::parallel::GptOps> ops, std::int64_t T) {
  auto world = exec::comm::make_self_communicator("world");
  const Plan plan = one_rank_plan(2, 1, Precision::fp32);
  auto groups = exec::comm::MeshCommunicators::create(*world, plan.mesh);
  if (!groups.ok()) return groups.problems;
  auto gpt = exec::parallel::ParallelGpt::create(spec, plan, groups.value, 5, T, backend, std::move(ops));
  if (gpt.value != nullptr && !has_errors(gpt.problems))
    gpt.problems.push_back({Severity::error, "(test)", "the model was built"});
  return gpt.problems;
}

struct OneRankRun {
  Problems problems;  // why the run did not happen or did not finish
  std::vector<exec::StepReport> steps;
  std::vector<float> values, m, v;  // after training, parameter_layout order
  exec::EvalResult evaluation;
  std::map<exec::MemoryCategory, std::int64_t> held;  // bytes by category after training, over the model's start
};

// `steps` steps of B x M sequences of T tokens (tiny_gpt_train_options; `learning_rate` > 0 replaces its
// peak rate), seed 5, matmuls in `precision`; then an evaluation of `eval_samples` samples. On `backend`
// with `ops` (null: the CPU's).
inline OneRankRun train_one_rank(const ModelSpec& spec, exec::Backend& backend,
                                 std::unique_ptr<exec::parallel::GptOps> ops, Precision precision,
                                 std::int64_t steps, std::int64_t B, std::int64_t M, std::int64_t T,
                                 std::int64_t eval_samples, double learning_rate = 0) {
  OneRankRun run;
  auto world = exec::comm::make_self_communicator("world");
  const Plan plan = one_rank_plan(B, M, precision);
  auto groups = exec::comm::MeshCommunicators::create(*world, plan.mesh);
  if (!groups.ok()) {
    run.problems = groups.problems;
    return run;
  }
  const exec::MemorySnapshot before = backend.ledger().snapshot();
  auto gpt = exec::parallel::ParallelGpt::create(spec, plan, groups.value, 5, T, backend, std::move(ops));
  if (!gpt.ok()) {
    run.problems = gpt.problems;
    return run;
  }
  run.problems = gpt.value->set_matmul_precision(precision);
  if (has_errors(run.problems)) return run;
  exec::TrainOptions options = tiny_gpt_train_options(steps);
  if (learning_rate > 0) options.adamw.learning_rate = learning_rate;
  options.micro_batch = B;
  options.micro_batches = M;
  options.on_step = [&](const exec::StepReport& r) { run.steps.push_back(r); };
  auto loader = phrase_loader(T, 3);
  const exec::TrainResult trained = exec::parallel::train_parallel(*gpt.value, plan, *loader, options);
  run.problems.insert(run.problems.end(), trained.problems.begin(), trained.problems.end());
  const exec::MemorySnapshot after = backend.ledger().snapshot();
  for (const exec::MemoryCategory c : exec::memory_categories) run.held[c] = after[c].now_bytes - before[c].now_bytes;
  run.values = gpt.value->gather_full(0);
  run.m = gpt.value->gather_full(1);
  run.v = gpt.value->gather_full(2);
  auto eval_loader = phrase_loader(T, 9);
  run.evaluation = exec::parallel::evaluate_parallel(*gpt.value, *eval_loader, eval_samples);
  return run;
}

}  // namespace meshplan::testing_support
