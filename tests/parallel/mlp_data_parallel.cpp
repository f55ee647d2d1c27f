// The MLP's data- and tensor-parallel matrix (issue 17): one plan per
// invocation under `mpirun -np <world size>` (ctest runs one test per plan).
// Every rank trains an MLP {20, 32, 15, 6} (relu; 1263 parameters, odd, so a
// 2-way shard is padded and its boundary cuts a tensor; under tp = 2 linear0
// and linear2 are column-parallel, the last one's outputs all-gathered, and
// linear1 row-parallel) with DataParallelTrainer; world
// rank 0 also trains the single-rank exec::train on the same global batches
// (12 samples a step, 20 steps, AdamW with weight decay, warmup, clipping at
// 0.5: active), then compares
//   * the loss and the gradient norm of every step: relative difference <=
//     tolerance (1e-5; the norm catches a wrong gradient scale, which
//     clipping and AdamW would otherwise hide),
//   * the final values and both AdamW moments, as checkpoint_tensors gives
//     them: ||x - x_ref|| / ||x_ref|| <= tolerance,
//   * an evaluation (every rank) against exec::evaluate: loss within the
//     tolerance, the same accuracy,
//   * the memory ledger between steps: optimizer bytes = 2 x 4 x (the
//     rank's shard: ceil(P / S), or all P without ZeRO; P = 1263, or the tp
//     rank's 639 under tp = 2), and with ZeRO 3 / fsdp parameter
//     bytes = 4 x the shard,
// prints the largest differences, and exits 1 naming the first that fails.
//
// usage: mlp_data_parallel <plan> [--tolerance X]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "executor/backend/backend.hpp"
#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/mpi_communicator.hpp"
#include "executor/data/in_memory.hpp"
#include "executor/data/random.hpp"
#include "executor/model/model.hpp"
#include "executor/parallel/parallel_checkpoint.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "executor/train/data_parallel.hpp"
#include "executor/train/trainer.hpp"

namespace {

using namespace meshplan;

struct MlpPlan {
  std::string mesh;
  int zero_stage = 0;
};

const std::map<std::string, MlpPlan>& mlp_plans() {
  static const std::map<std::string, MlpPlan> plans = {
      {"dp2", {"dp=2", 0}},         {"dp2-zero1", {"dp=2", 1}}, {"dp2-zero2", {"dp=2", 2}},
      {"dp2-zero3", {"dp=2", 3}},   {"fsdp2", {"fsdp=2", 0}},   {"dp2-fsdp2", {"dp=2,fsdp=2", 0}},
      {"tp2", {"tp=2", 0}},         {"dp2-tp2", {"dp=2,tp=2", 0}}, {"dp2-zero2-tp2", {"dp=2,tp=2", 2}},
      {"fsdp2-tp2", {"fsdp=2,tp=2", 0}},
  };
  return plans;
}

ModelSpec mlp_spec() {
  ModelSpec spec;
  spec.name = "mlp-dp";
  spec.kind = ModelKind::mlp;
  spec.mlp.layer_sizes = {20, 32, 15, 6};
  spec.mlp.activation = "relu";
  return spec;
}

// Inputs in [0, 1), the class the arg-max of a fixed random projection (learnable, not noise).
data::InMemoryDataset classification(std::int64_t samples, std::uint64_t seed) {
  const std::int64_t inputs = 20, classes = 6;
  std::mt19937_64 fixed(5), engine(seed);  // one projection for every split
  std::vector<float> projection(static_cast<std::size_t>(inputs * classes));
  for (float& w : projection) w = static_cast<float>(data::uniform_unit(fixed)) - 0.5f;
  data::InMemoryDataset set;
  set.samples = samples;
  set.inputs_per_sample = inputs;
  set.classes = classes;
  for (std::int64_t s = 0; s < samples; ++s) {
    std::vector<double> score(static_cast<std::size_t>(classes), 0.0);
    for (std::int64_t i = 0; i < inputs; ++i) {
      const auto x = static_cast<float>(data::uniform_unit(engine));
      set.inputs.push_back(x);
      for (std::int64_t c = 0; c < classes; ++c) score[static_cast<std::size_t>(c)] += x * projection[static_cast<std::size_t>(i * classes + c)];
    }
    set.labels.push_back(static_cast<std::int32_t>(std::max_element(score.begin(), score.end()) - score.begin()));
  }
  return set;
}

exec::TrainOptions options(std::int64_t steps) {
  exec::TrainOptions o;
  o.steps = steps;
  o.adamw.learning_rate = 1e-2;
  o.adamw.weight_decay = 0.1;
  o.warmup_steps = 3;
  o.max_grad_norm = 0.5;
  return o;
}

double relative(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

double relative_norm(const std::vector<float>& x, const std::vector<float>& ref) {
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    diff += (static_cast<double>(x[i]) - ref[i]) * (static_cast<double>(x[i]) - ref[i]);
    norm += static_cast<double>(ref[i]) * ref[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-300));
}

}  // namespace

int main(int argc, char** argv) {
  auto world = exec::comm::mpi_world(&argc, &argv);
  if (!world.ok()) {
    for (const auto& p : world.problems) std::fprintf(stderr, "mlp_data_parallel: %s\n", describe(p).c_str());
    return 2;
  }
  exec::comm::Communicator& comm = *world.value;
  if (argc < 2 || mlp_plans().count(argv[1]) == 0) {
    std::fprintf(stderr, "usage: mlp_data_parallel <plan> [--tolerance X]; plans:");
    for (const auto& [name, plan] : mlp_plans()) std::fprintf(stderr, " %s", name.c_str());
    std::fprintf(stderr, "\n");
    return 2;
  }
  const std::string name = argv[1];
  const double tolerance = argc >= 4 && std::string(argv[2]) == "--tolerance" ? std::atof(argv[3]) : 1e-5;
  const MlpPlan& entry = mlp_plans().at(name);
  const ModelSpec spec = mlp_spec();
  const std::uint64_t seed = 7;
  const std::int64_t micro_batch = 3, global_batch = 12, steps = 20, samples = 100;

  Plan plan;
  plan.mesh = parse_mesh(entry.mesh, "mesh").value;
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.zero_stage = entry.zero_stage;
  auto groups = exec::comm::MeshCommunicators::create(comm, plan.mesh);
  if (!groups.ok()) {
    for (const auto& p : groups.problems) std::fprintf(stderr, "mlp_data_parallel %s: %s\n", name.c_str(), describe(p).c_str());
    return 1;
  }
  auto model = exec::make_model<float>(spec, seed, micro_batch);
  if (!model.ok()) return 1;
  exec::DataParallelTrainer trainer(std::move(model.value), plan, groups.value);
  const std::int64_t elements = trainer.model().parameters().layout.total_elements;  // this tp rank's share
  if (plan.mesh.size(Axis::tp) > 1 && elements >= 1263) {
    std::fprintf(stderr, "FAILED mlp_data_parallel %s: rank %d holds %lld parameters, not a tp shard of 1263\n",
                 name.c_str(), comm.rank(), static_cast<long long>(elements));
    return 1;
  }

  exec::TrainOptions o = options(steps);
  o.micro_batch = micro_batch;
  o.micro_batches = plan.micro_batches();
  std::vector<double> losses, norms;
  int clipped = 0;
  o.on_step = [&](const exec::StepReport& r) {
    losses.push_back(r.loss);
    norms.push_back(r.grad_norm);
    if (r.grad_norm > o.max_grad_norm) ++clipped;
  };
  data::ShuffledLoader loader(classification(samples, 11), seed);
  const exec::TrainResult trained = trainer.train(loader, o);
  if (!trained.ok()) {
    for (const auto& p : trained.problems) std::fprintf(stderr, "mlp_data_parallel %s: %s\n", name.c_str(), describe(p).c_str());
    return 1;
  }
  // The ledger between steps, before anything else is allocated on this rank.
  const exec::MemorySnapshot memory = exec::default_backend().ledger().snapshot();
  const std::vector<exec::TensorBlob> blobs = trainer.checkpoint_tensors();
  data::ShuffledLoader eval_loader(classification(40, 12), seed + 1);
  const exec::EvalResult evaluated = trainer.evaluate(eval_loader, 0);

  bool failed = false;
  const exec::parallel::DataSharding sharding = exec::parallel::data_sharding(plan);
  const std::int64_t shard_group = sharding.optimizer ? plan.mesh.size(sharding.axis) : 1;
  const std::int64_t shard = (elements + shard_group - 1) / shard_group;
  const auto optimizer_bytes = memory[exec::MemoryCategory::optimizer].now_bytes;
  const auto parameter_bytes = memory[exec::MemoryCategory::parameters].now_bytes;
  if (optimizer_bytes != 2 * 4 * shard) {
    std::fprintf(stderr, "FAILED mlp_data_parallel %s: rank %d holds %lld optimizer bytes, not 2 x 4 x %lld\n",
                 name.c_str(), comm.rank(), static_cast<long long>(optimizer_bytes), static_cast<long long>(shard));
    failed = true;
  }
  if (sharding.parameters && parameter_bytes != 4 * shard) {
    std::fprintf(stderr, "FAILED mlp_data_parallel %s: rank %d holds %lld parameter bytes between steps, not 4 x %lld\n",
                 name.c_str(), comm.rank(), static_cast<long long>(parameter_bytes), static_cast<long long>(shard));
    failed = true;
  }

  if (comm.rank() == 0) {
    auto reference = exec::make_model<float>(spec, seed, micro_batch);
    exec::TrainOptions ro = options(steps);
    ro.micro_batch = micro_batch;
    ro.micro_batches = global_batch / micro_batch;
    std::vector<double> reference_losses, reference_norms;
    ro.on_step = [&](const exec::StepReport& r) {
      reference_losses.push_back(r.loss);
      reference_norms.push_back(r.grad_norm);
    };
    data::ShuffledLoader reference_loader(classification(samples, 11), seed);
    if (!exec::train(*reference.value, reference_loader, ro).ok() || reference_losses.size() != losses.size()) {
      std::fprintf(stderr, "FAILED mlp_data_parallel %s: the single-rank run did not train %zu steps\n", name.c_str(),
                   losses.size());
      failed = true;
    }
    double worst_loss = 0, worst_tensor = 0;
    for (std::size_t s = 0; s < losses.size() && s < reference_losses.size(); ++s) {
      const double d = std::max(relative(losses[s], reference_losses[s]), relative(norms[s], reference_norms[s]));
      worst_loss = std::max(worst_loss, d);
      if (d > tolerance && !failed) {
        std::fprintf(stderr, "FAILED mlp_data_parallel %s: step %zu loss %.9g norm %.9g, single rank %.9g %.9g (relative %.3g)\n",
                     name.c_str(), s, losses[s], norms[s], reference_losses[s], reference_norms[s], d);
        failed = true;
      }
    }
    const exec::Parameters<float>& p = reference.value->parameters();
    const std::vector<exec::TensorBlob> expected = exec::parallel::checkpoint_blobs(p.layout, {p.values, p.adam_m, p.adam_v});
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const double d = i < blobs.size() && blobs[i].name == expected[i].name ? relative_norm(blobs[i].data, expected[i].data) : 1.0;
      worst_tensor = std::max(worst_tensor, d);
      if (d > tolerance && !failed) {
        std::fprintf(stderr, "FAILED mlp_data_parallel %s: tensor %s differs by %.3g (relative norm)\n", name.c_str(),
                     expected[i].name.c_str(), d);
        failed = true;
      }
    }
    data::ShuffledLoader reference_eval(classification(40, 12), seed + 1);
    const exec::EvalResult expected_eval = exec::evaluate(*reference.value, reference_eval, 0);
    const double eval_d = relative(evaluated.loss, expected_eval.loss);
    if (eval_d > tolerance || evaluated.accuracy != expected_eval.accuracy) {
      std::fprintf(stderr, "FAILED mlp_data_parallel %s: evaluation loss %.9g accuracy %g, single rank %.9g %g\n",
                   name.c_str(), evaluated.loss, evaluated.accuracy, expected_eval.loss, expected_eval.accuracy);
      failed = true;
    }
    std::printf("mlp_data_parallel %s (%d ranks, zero %d): %zu steps (%d clipped), loss %.4f -> %.4f; largest relative "
                "loss/norm difference %.3g, tensor difference %.3g, evaluation %.3g; optimizer bytes %lld of %lld on one rank\n",
                name.c_str(), comm.size(), plan.zero_stage, losses.size(), clipped, losses.front(), losses.back(),
                worst_loss, worst_tensor, eval_d, static_cast<long long>(optimizer_bytes),
                static_cast<long long>(2 * 4 * elements));
  }
  std::int32_t any_failed = failed ? 1 : 0;
  comm.all_reduce(&any_failed, 1, exec::comm::DataType::i32, exec::comm::ReduceOp::max);
  return any_failed != 0 ? 1 : 0;
}
