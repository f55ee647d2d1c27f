// Checkpoints across plans (issue 6, "Must show"), under `mpirun -np 4`:
//   A  dp=2,tp=2 (ZeRO-1) trains 10 steps, saving a checkpoint after step 5
//      (rank 0 writes full tensors by name, parallel_checkpoint.hpp);
//   B  pp=2,tp=2 (1F1B) loads it, resharding on load, and trains steps 5-9;
//   C  the single-rank trainer (rank 0) loads it and trains steps 5-9.
// The losses of B and C at steps 5-9 must equal A's (continuing the original
// run) within 1e-5 relative, the parallel matrix's tolerance; the largest
// differences are printed, and a divergence fails naming the run and step.
// The model and data are the matrix's (parallel_matrix.cpp), at 2 layers.
//
// usage: parallel_reshard <scratch directory>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "executor/comm/mesh_comms.hpp"
#include "executor/comm/mpi_communicator.hpp"
#include "executor/data/text.hpp"
#include "executor/model/model.hpp"
#include "executor/parallel/parallel_checkpoint.hpp"
#include "reference/reference_gpt.hpp"
#include "executor/parallel/parallel_trainer.hpp"
#include "../tiny_gpt.hpp"

namespace {

using namespace meshplan;

constexpr std::uint64_t seed = 11;
constexpr std::int64_t T = 16, micro_batch = 2, global_batch = 8, steps = 10, saved_at = 5;

ModelSpec reshard_model() { return testing_support::tiny_gpt_spec("gpt-reshard", 2, 32, 4, 128, 257, T); }

std::unique_ptr<data::TextLoader> reshard_loader() {
  const std::string text =
      "A checkpoint saved under one plan loads under any other plan of the same model, and training continues "
      "from it as if nothing had happened. Resharding on load: each rank cuts its slices from full tensors. ";
  std::vector<std::uint8_t> corpus;
  for (int copy = 0; copy < 10; ++copy)
    for (std::size_t i = 0; i < text.size(); ++i)
      corpus.push_back(static_cast<std::uint8_t>(text[(i * static_cast<std::size_t>(2 * copy + 1)) % text.size()]));
  const data::TextSplitRange range{0, std::ssize(corpus)};
  return std::make_unique<data::TextLoader>(std::move(corpus), range, T, seed);
}

exec::TrainOptions reshard_options() {
  exec::TrainOptions o = testing_support::tiny_gpt_train_options(steps);
  o.micro_batch = micro_batch;
  return o;
}

Plan reshard_plan(const std::string& mesh, int zero_stage) {
  Plan plan;
  plan.mesh = parse_mesh(mesh, "mesh").value;
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.zero_stage = zero_stage;
  plan.precision = Precision::fp32;
  return plan;
}

void report(const char* run, const Problems& problems) {
  for (const auto& p : problems) std::fprintf(stderr, "parallel_reshard %s: %s\n", run, describe(p).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  auto world = exec::comm::mpi_world(&argc, &argv);
  if (!world.ok() || argc < 2) {
    report("setup", world.problems);
    std::fprintf(stderr, "usage: mpirun -np 4 parallel_reshard <scratch directory>\n");
    return 2;
  }
  exec::comm::Communicator& comm = *world.value;
  const std::string dir = argv[1];
  if (comm.rank() == 0) std::filesystem::remove_all(dir);
  comm.barrier();
  const ModelSpec spec = reshard_model();

  // A: the original run, saving after step `saved_at`.
  std::vector<double> a_losses;
  {
    const Plan plan = reshard_plan("dp=2,tp=2", 1);
    auto groups = exec::comm::MeshCommunicators::create(comm, plan.mesh);
    auto model = exec::parallel::ParallelGpt::create(spec, plan, groups.value, seed, T);
    if (!groups.ok() || !model.ok()) return report("A", model.problems), 1;
    auto loader = reshard_loader();
    exec::TrainOptions o = reshard_options();
    o.micro_batches = plan.micro_batches();
    Problems save_problems;
    o.on_step = [&](const exec::StepReport& r) {
      a_losses.push_back(r.loss);
      if (r.step + 1 != saved_at) return;
      exec::CheckpointContents contents;
      contents.step = saved_at;
      contents.seed = seed;
      contents.data_state = loader->state();
      contents.tensors = exec::parallel::gather_checkpoint_tensors(*model.value);
      contents.extra = {{"updates", saved_at}};
      if (comm.rank() == 0) save_problems = exec::save_checkpoint(dir, contents);
    };
    const exec::TrainResult result = exec::parallel::train_parallel(*model.value, plan, *loader, o);
    report("A", result.problems);
    report("A (save)", save_problems);
    if (!result.ok() || has_errors(save_problems)) return 1;
  }
  comm.barrier();  // the checkpoint is on disk
  auto path = exec::latest_checkpoint(dir);
  if (!path.ok() || !path.value) return report("load", path.problems), 1;
  auto checkpoint = exec::load_checkpoint(*path.value);
  if (!checkpoint.ok()) return report("load", checkpoint.problems), 1;
  const exec::CheckpointContents& saved = checkpoint.value;

  // B: another mesh, resharded on load.
  std::vector<double> b_losses;
  {
    const Plan plan = reshard_plan("pp=2,tp=2", 0);
    auto groups = exec::comm::MeshCommunicators::create(comm, plan.mesh);
    auto model = exec::parallel::ParallelGpt::create(spec, plan, groups.value, seed + 100, T);  // other init: overwritten
    if (!groups.ok() || !model.ok()) return report("B", model.problems), 1;
    const Problems restored = exec::parallel::restore_checkpoint_tensors(*model.value, saved.tensors, *path.value);
    auto loader = reshard_loader();
    const Problems data = loader->restore(saved.data_state);
    if (has_errors(restored) || has_errors(data)) return report("B", restored), report("B", data), 1;
    exec::TrainOptions o = reshard_options();
    o.micro_batches = plan.micro_batches();
    o.first_step = saved.step;
    o.completed_updates = saved.step;
    o.on_step = [&](const exec::StepReport& r) { b_losses.push_back(r.loss); };
    const exec::TrainResult result = exec::parallel::train_parallel(*model.value, plan, *loader, o);
    if (!result.ok()) return report("B", result.problems), 1;
  }
  if (comm.rank() != 0) return 0;

  // C: one rank, the single-rank trainer.
  std::vector<double> c_losses;
  {
    auto model = exec::make_reference_model<float>(spec, seed + 200, micro_batch, T);
    if (!model.ok()) return report("C", model.problems), 1;
    auto& params = model.value->parameters();
    for (const auto& blob : saved.tensors) {
      const std::string name = blob.name;
      auto* buffer = &params.values;
      std::string tensor = name;
      for (const auto& [suffix, moments] : {std::pair{std::string(".adam_m"), &params.adam_m}, {std::string(".adam_v"), &params.adam_v}})
        if (name.size() > suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
          buffer = moments, tensor = name.substr(0, name.size() - suffix.size());
      std::copy(blob.data.begin(), blob.data.end(), buffer->begin() + params.layout.at(tensor).offset);
    }
    auto loader = reshard_loader();
    report("C", loader->restore(saved.data_state));
    exec::TrainOptions o = reshard_options();
    o.micro_batches = global_batch / micro_batch;
    o.first_step = saved.step;
    o.completed_updates = saved.step;
    o.on_step = [&](const exec::StepReport& r) { c_losses.push_back(r.loss); };
    const exec::TrainResult result = exec::train(*model.value, *loader, o);
    if (!result.ok()) return report("C", result.problems), 1;
  }

  bool ok = a_losses.size() == static_cast<std::size_t>(steps) && b_losses.size() == static_cast<std::size_t>(steps - saved_at) &&
            c_losses.size() == b_losses.size();
  if (!ok) {
    std::fprintf(stderr, "parallel_reshard: runs took %zu / %zu / %zu steps\n", a_losses.size(), b_losses.size(), c_losses.size());
    return 1;
  }
  const double tolerance = 1e-5;
  for (const auto& [run, losses] : {std::pair{"pp=2,tp=2", &b_losses}, {"one rank", &c_losses}}) {
    double worst = 0;
    for (std::size_t k = 0; k < losses->size(); ++k) {
      const double original = a_losses[static_cast<std::size_t>(saved_at) + k];
      const double diff = std::abs((*losses)[k] - original) / std::abs(original);
      worst = std::max(worst, diff);
      if (diff > tolerance) {
        std::fprintf(stderr, "parallel_reshard: DIVERGED: loaded under %s, step %lld: loss %.9g, original run %.9g\n", run,
                     static_cast<long long>(saved_at + static_cast<std::int64_t>(k)), (*losses)[k], original);
        ok = false;
      }
    }
    std::printf("saved under dp=2,tp=2 at step %lld, loaded under %-10s: steps %lld-%lld, losses %.6f .. %.6f, "
                "largest relative difference to the original run %.3g (tolerance %.0e)\n",
                static_cast<long long>(saved_at), run, static_cast<long long>(saved_at),
                static_cast<long long>(steps - 1), losses->front(), losses->back(), worst, tolerance);
  }
  return ok ? 0 : 1;
}
