// The decision guide (decision_guide.hpp): each question builds one Plan
// and asks explain_plan() about it; the data-parallel check reads W from
// place_axes() on the cluster's topology, as the evaluator does.
#include "cli/decision_guide.hpp"

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "cli/text_report.hpp"
#include "model/explain.hpp"
#include "model/topology.hpp"

namespace meshplan::cli {
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
    Plan p;
    p.mesh = mesh;
    p.micro_batch = 1;
    p.global_batch = batch;
    p.seq_len = seq_len_flag;
    p.zero_stage = mesh.size(Axis::dp) > 1 ? 1 : 0;
    p.recompute = model.kind == ModelKind::transformer ? Recompute::selective : Recompute::none;
    p.sequence_parallel = model.kind == ModelKind::transformer && mesh.size(Axis::tp) > 1;
    p.schedule = {ScheduleKind::one_f_one_b, 1};
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
          q.detail = q.mesh + " is not a valid plan here: " + problem.message;
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
    const double states = worst.memory.parameters_bytes + worst.memory.gradients_bytes + worst.memory.optimizer_bytes;
    const double per_parameter = worst.parameters_on_device > 0 ? states / worst.parameters_on_device : 0;
    q.detail = q.mesh + (batch != global_batch ? " (global batch " + std::to_string(batch) + ")" : "") +
               ": model states " + human_bytes(states) + " (" + format("%.0f", per_parameter) + " B x " +
               human_count(worst.parameters_on_device) + " parameters held) + activations " +
               human_bytes(worst.memory.activations_bytes) + " + buffers " + human_bytes(worst.memory.buffers_bytes) +
               " = " + human_bytes(worst.memory.total_bytes()) + " needed, " + human_bytes(q.usable_bytes) + " usable";
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
  guide.recompute = model.kind == ModelKind::transformer ? "selective" : "no";
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
      } else if (q.detail.empty()) {
        q.detail = attempt.detail;
      }
    }
    if (!q.answered && q.detail.empty()) q.detail = "no tp between 2 and " + std::to_string(per_node) + " divides the model";
    guide.questions.push_back(q);
    if (q.fits) guide.recommendation = "FSDP x tensor parallelism inside a node, " + q.mesh;
  } else if (guide.recommendation.empty() && model.kind == ModelKind::cnn) {
    GuideQuestion q;
    q.question = "Tensor or pipeline parallelism?";
    q.detail = "not for cnn models (meshplan splits them over dp and fsdp only)";
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
      q.detail = "no pipeline depth from 2 to " + devices + " splits the layers evenly";
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

void print_decision_guide(std::ostream& out, const DecisionGuide& guide) {
  out << "decision guide (each question answered by costing one plan: micro-batch 1, " << guide.recompute
      << " recompute)\n";
  int number = 1;
  for (const auto& q : guide.questions) {
    out << "  " << number++ << ". " << q.question << "  "
        << (q.answered ? (q.fits ? "yes" : "no") : "does not apply") << "\n";
    if (!q.detail.empty()) out << "     " << q.detail << "\n";
  }
  out << "  -> start from: " << guide.recommendation << "\n";

  const DataParallelCheck& d = guide.data_parallel;
  out << "\n  Is pure data parallelism compute- or communication-bound? (How to Scale Your Model, \"Training\":\n"
         "  compute-bound when the per-device batch B/X exceeds C/W)\n";
  if (!d.applicable) {
    out << "     " << d.note << "\n";
    return;
  }
  if (d.transformer) {
    out << "     B/X = " << format("%.0f", d.batch_per_device) << " tokens per device; C/W = "
        << format("%.1f", d.peak_flops_per_s / 1e12) << " TFLOP/s / " << format("%.1f", d.bandwidth_bytes_per_s / 1e9)
        << " GB/s = " << format("%.0f", d.threshold) << "\n"
        << "     (W: the per-device bus bandwidth of a dp axis over every device, from the topology)\n";
    out << "     -> pure data parallelism would be " << (d.compute_bound ? "compute-bound" : "communication-bound") << " ("
        << format("%.0f", d.batch_per_device) << (d.compute_bound ? " > " : " <= ") << format("%.0f", d.threshold)
        << ")\n";
  } else {
    out << "     B/X = " << format("%.0f", d.batch_per_device)
        << " samples per device; C/W counts a transformer's 6 FLOPs per parameter per token and does not\n"
           "     apply to this model as it stands: the evaluator answers instead\n";
  }
  if (d.evaluated) {
    out << "     evaluator, " << d.mesh << " with micro-batch " << d.micro_batch << ": compute " << format("%.4g", d.compute_s)
        << " s, dp gradient communication " << format("%.4g", d.dp_communication_s) << " s ("
        << format("%.4g", d.dp_exposed_s) << " s exposed) -> "
        << (d.dp_communication_s <= d.compute_s ? "compute-bound" : "communication-bound") << "\n";
  } else if (!d.note.empty()) {
    out << "     " << d.note << "\n";
  }
}

}  // namespace meshplan::cli
