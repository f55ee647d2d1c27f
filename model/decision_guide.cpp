// The decision guide (decision_guide.hpp): each question builds one Plan
// and asks explain_plan() about it; the data-parallel check reads W from
// place_axes() on the cluster's topology, as the evaluator does.
#include "model/decision_guide.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "model/explain.hpp"
#include "model/plan_defaults.hpp"
#include "model/topology.hpp"

namespace meshplan {
namespace {


Mesh mesh_of(std::initializer_list<MeshAxis> axes) {
  Mesh mesh;
  for (const auto& a : axes) {
    if (a.size > 1) mesh.axes.push_back(a);
  }
  if (mesh.axes.empty()) mesh.axes.push_back({Axis::dp, 1});
  return mesh;
}

// The global batch a memory question is asked with: the user's, when it
// splits over `data` ranks with micro-batch 1 and is at least `smallest`
// (a multiple of `data`); else `smallest`. Peak memory does not depend on it
// once a pipeline has at least pp micro-batches in flight.
std::int64_t batch_for(std::int64_t wanted, std::int64_t data, std::int64_t smallest) {
  return wanted % data == 0 && wanted >= smallest ? wanted : smallest;
}

struct Asker {
  const ModelSpec& model;
  const ClusterSpec& cluster;
  std::int64_t world_size;
  std::int64_t global_batch;
  std::int64_t seq_len_flag;
  Precision precision;
  double memory_headroom;

  Plan plan(const Mesh& mesh, std::int64_t batch) const {
    Plan p = default_plan(model.kind, mesh, seq_len_flag > 0 ? seq_len_flag : model.default_seq_len());
    p.global_batch = batch;
    p.seq_len = seq_len_flag;
    p.precision = precision;
    p.memory_headroom = memory_headroom;
    return p;
  }

  // Costs `mesh` on `world` devices and fills the answer from it.
  bool ask(GuideQuestion& q, const Mesh& mesh, std::int64_t world, std::int64_t batch) const {
    const Plan p = plan(mesh, batch);
    const Explanation ex = explain_plan(model, cluster, Deployment{world, 0}, p);
    q.mesh = mesh.to_string();
    if (!ex.valid || !ex.memory) {
      for (const auto& problem : ex.problems) {
        if (problem.severity == Severity::error && problem.where != "memory") {
          q.reason = q.mesh + " is not a valid plan here: " + problem.message;
          break;
        }
      }
      return false;
    }
    const StageMemory& worst = ex.memory->worst();
    q.answered = true;
    q.fits = ex.fits_memory();
    q.memory = worst.memory;
    q.parameters_on_device = worst.parameters_on_device;
    q.usable_bytes = ex.memory->usable_bytes;
    q.global_batch = batch;
    q.batch_differs = batch != global_batch;
    return true;
  }
};

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> small, large;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d != 0) continue;
    small.push_back(d);
    if (d != n / d) large.push_back(n / d);
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

DataParallelCheck check_data_parallel(const Asker& a) {
  DataParallelCheck check;
  const std::int64_t world = a.world_size;
  if (world < 2) {
    check.note = "one device: no data-parallel communication";
    return check;
  }
  check.applicable = true;
  const std::int64_t seq = a.seq_len_flag > 0 ? a.seq_len_flag : a.model.default_seq_len();
  check.transformer = a.model.kind == ModelKind::transformer;
  check.batch_per_device = static_cast<double>(a.global_batch) * static_cast<double>(seq) / static_cast<double>(world);
  check.peak_flops_per_s = a.cluster.device.peak_for(gemm_dtype(a.precision)).value_or(0);
  const Mesh dp = mesh_of({{Axis::dp, world}});
  const auto placements = place_axes(build_topology(a.cluster, world), dp);
  check.bandwidth_bytes_per_s = placements.front().bandwidth_bytes_per_s;
  check.threshold = check.bandwidth_bytes_per_s > 0 ? check.peak_flops_per_s / check.bandwidth_bytes_per_s : 0;
  check.compute_bound = check.batch_per_device > check.threshold;

  if (a.global_batch % world != 0) {
    check.note = "the global batch " + std::to_string(a.global_batch) + " does not split over " + std::to_string(world) +
                 " data-parallel ranks, so the evaluator cannot time pure data parallelism";
    return check;
  }
  // One micro-batch of B / X per rank: the gradient all-reduce overlaps the whole backward.
  Plan p = a.plan(dp, a.global_batch);
  p.micro_batch = a.global_batch / world;
  p.zero_stage = 0;
  const Explanation ex = explain_plan(a.model, a.cluster, Deployment{world, 0}, p);
  if (!ex.time) {
    check.note = "pure data parallelism is not a valid plan here";
    return check;
  }
  check.evaluated = true;
  check.mesh = dp.to_string();
  check.micro_batch = p.micro_batch;
  check.compute_s = ex.time->compute_s;
  check.dp_communication_s = ex.time->axis_communication_s[static_cast<std::size_t>(Axis::dp)];
  check.dp_exposed_s = ex.time->axis_exposed_s[static_cast<std::size_t>(Axis::dp)];
  return check;
}

}  // namespace

DecisionGuide build_decision_guide(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size,
                                   std::int64_t global_batch, std::int64_t seq_len_flag, Precision precision,
                                   double memory_headroom) {
  DecisionGuide guide;
  // The plans' default (plan_defaults.hpp) under fused attention, whose kernels keep no s x s tensors to drop.
  const Plan defaults = default_plan(model.kind, mesh_of({{Axis::dp, 1}}), model.default_seq_len());
  guide.recompute = model.kind != ModelKind::transformer ? "no recompute"
                    : to_string(defaults.recompute) + " recompute" +
                          (recompute_repeats_nothing(defaults.recompute, defaults.attention)
                               ? " (nothing to repeat under fused attention)"
                               : "");
  const Asker a{model, cluster, world_size, global_batch, seq_len_flag, precision, memory_headroom};
  const std::int64_t world = world_size;
  const std::string devices = std::to_string(world);

  // 1. One device: model states (16 B per parameter under mixed-precision Adam) + activations.
  GuideQuestion one;
  one.question = "Does " + model.name + " train on one " + cluster.device.name + "?";
  a.ask(one, mesh_of({{Axis::dp, 1}}), 1, global_batch);
  guide.questions.push_back(one);
  if (one.fits) {
    guide.recommendation = "plain data parallelism, dp=" + devices + ": every device holds the whole model";
  }

  // 2. FSDP (ZeRO-3) over every device: 16 Psi / N + activations.
  if (guide.recommendation.empty() && world > 1) {
    GuideQuestion q;
    q.question = "Does FSDP (ZeRO-3) over all " + devices + " devices fit?";
    a.ask(q, mesh_of({{Axis::fsdp, world}}), world, batch_for(global_batch, world, world));
    guide.questions.push_back(q);
    if (q.fits) guide.recommendation = "FSDP over every device, " + q.mesh;
  }

  // 3. Tensor parallelism inside a node (the largest tp up to a node that the model allows), FSDP across.
  std::int64_t tp = 1;
  if (guide.recommendation.empty() && world > 1 && model.kind != ModelKind::cnn) {
    GuideQuestion q;
    const std::int64_t per_node = std::min(cluster.devices_per_node, world);
    q.question = "Does tensor parallelism inside a node (tp up to " + std::to_string(per_node) + ") with FSDP across fit?";
    for (std::int64_t t = per_node; t >= 2 && !q.answered; --t) {
      if (world % t != 0) continue;
      GuideQuestion attempt = q;
      if (a.ask(attempt, mesh_of({{Axis::fsdp, world / t}, {Axis::tp, t}}), world, batch_for(global_batch, world / t, world / t))) {
        q = attempt;
        tp = t;
      } else if (q.reason.empty()) {
        q.reason = attempt.reason;
      }
    }
    if (!q.answered && q.reason.empty()) q.reason = "no tp between 2 and " + std::to_string(per_node) + " divides the model";
    guide.questions.push_back(q);
    if (q.fits) guide.recommendation = "FSDP x tensor parallelism inside a node, " + q.mesh;
  } else if (guide.recommendation.empty() && model.kind == ModelKind::cnn) {
    GuideQuestion q;
    q.question = "Tensor or pipeline parallelism?";
    q.reason = "not for cnn models (meshplan splits them over dp and fsdp only)";
    guide.questions.push_back(q);
  }

  // 4. Pipeline: the smallest pp that fits, with tp inside a node (that of
  //    question 3, or the part of it that still divides the devices left
  //    per stage) and ZeRO-1 data parallelism across.
  if (guide.recommendation.empty() && world > 1 && model.kind != ModelKind::cnn) {
    GuideQuestion q;
    q.question = "Which pipeline depth fits (the smallest pp dividing the layers; tp up to " + std::to_string(tp) +
                 " inside a node, ZeRO-1 dp across, 1F1B)?";
    GuideQuestion last;
    for (std::int64_t pp : divisors(world)) {
      if (pp < 2) continue;
      const std::int64_t stage_tp = std::gcd(tp, world / pp);  // divides tp, so it divides what tp divides
      const std::int64_t dp = world / (stage_tp * pp);
      GuideQuestion attempt = q;
      const Mesh mesh = mesh_of({{Axis::pp, pp}, {Axis::dp, dp}, {Axis::tp, stage_tp}});
      if (!a.ask(attempt, mesh, world, batch_for(global_batch, dp, dp * pp))) continue;  // the layers do not split
      last = attempt;
      if (attempt.fits) break;
    }
    if (last.answered) {
      q = last;
    } else {
      q.reason = "no pipeline depth from 2 to " + devices + " splits the layers evenly";
    }
    guide.questions.push_back(q);
    if (q.fits) {
      guide.recommendation = "pipeline parallelism, " + q.mesh + " (the smallest pp that fits; ZeRO-1, 1F1B)";
    }
  }
  if (guide.recommendation.empty()) {
    guide.recommendation = "none of these shapes fits with micro-batch 1 and " +
                           std::string(model.kind == ModelKind::transformer ? "selective" : "no") +
                           " recompute; the search also tries full recompute, ZeRO-3 with pipelines, cp and ep";
  }
  guide.data_parallel = check_data_parallel(a);
  return guide;
}

}  // namespace meshplan
