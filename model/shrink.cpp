// The shrinking ladder of shrink.hpp.
#include "model/shrink.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/explain.hpp"
#include "model/validate.hpp"

namespace meshplan {
namespace {

std::int64_t round_down(std::int64_t value, std::int64_t multiple) { return value / multiple * multiple; }

std::int64_t scaled(std::int64_t value, double s) {
  return static_cast<std::int64_t>(std::floor(static_cast<double>(value) * s));
}

struct Rung {
  ModelSpec model;
  Plan plan;
};

// The rung at scale s (every dimension non-decreasing in s, never above the original).
Rung rung(const ModelSpec& original, const Plan& plan, double s, const ShrinkBudget& budget) {
  const TransformerDims& t = original.transformer;
  const std::int64_t tp = plan.mesh.size(Axis::tp), pp = plan.mesh.size(Axis::pp);
  const std::int64_t v = plan.schedule.kind == ScheduleKind::interleaved ? plan.schedule.virtual_stages : 1;
  const std::int64_t chunks = pp * v;
  const std::int64_t head_dim = t.head_dim > 0 ? t.head_dim : t.hidden / t.heads;
  const std::int64_t seq = plan.seq_len > 0 ? plan.seq_len : t.seq_len;

  Rung r{original, plan};
  TransformerDims& d = r.model.transformer;
  d.layers = std::max(chunks, round_down(scaled(t.layers, s), chunks));
  d.heads = std::max(tp, round_down(scaled(t.heads, s), tp));
  std::int64_t dim = std::min(head_dim, std::max(budget.min_head_dim, scaled(head_dim, s)));
  if (t.positions == Positions::rotary && dim % 2 != 0 && dim > 1) --dim;  // rotary pairs up a head's dimensions
  d.hidden = d.heads * dim;
  d.head_dim = t.head_dim > 0 ? dim : 0;
  if (t.kv_heads != 0 && t.kv_heads != t.heads) {
    // Grouped-query attention keeps its group size where it can; the kv heads must divide the heads.
    // Where tp splits the original's kv heads they stay a multiple of tp (tp always qualifies); where
    // they are replicated over tp (kv_tp_split), any divisor of the heads will do (1 always does).
    const std::int64_t least = t.kv_tp_split(tp) == tp ? tp : 1;
    std::int64_t kv = std::max(least, d.heads / (t.heads / t.kv_heads));
    while (kv > least && (d.heads % kv != 0 || kv % least != 0)) --kv;
    d.kv_heads = kv;
  } else if (d.kv_heads != 0) {
    d.kv_heads = d.heads;
  }
  const double ffn_ratio = static_cast<double>(t.ffn) / static_cast<double>(t.hidden);
  d.ffn = std::max(tp, round_down(static_cast<std::int64_t>(std::floor(ffn_ratio * static_cast<double>(d.hidden))), tp));
  d.vocab = std::min(t.vocab, budget.vocab_floor);
  std::int64_t seq_len = std::min(seq, std::max(budget.min_seq_len, scaled(seq, s)));
  if (plan.sequence_parallel) {
    // micro_batch x seq_len rows split over tp: step down to the nearest length that divides.
    while (seq_len > 1 && (plan.micro_batch * seq_len) % tp != 0) --seq_len;
  }
  d.seq_len = seq_len;
  r.plan.seq_len = seq_len;
  r.plan.stage_layers.clear();
  r.plan.precision = Precision::fp32;
  return r;
}

std::string count(std::int64_t n) { return std::to_string(n); }

std::string gib(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return text;
}

std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g s", s);
  return text;
}

std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", x);
  return text;
}

std::string layers_text(const std::vector<std::int64_t>& layers) {
  std::string text = "[";
  for (std::size_t i = 0; i < layers.size(); ++i) text += (i ? "," : "") + std::to_string(layers[i]);
  return text + "]";
}

}  // namespace

Loaded<ShrinkResult> shrink_plan(const ModelSpec& model, const Plan& plan, const ShrinkBudget& budget) {
  Loaded<ShrinkResult> result;
  if (model.kind != ModelKind::transformer) {
    result.problems.push_back({Severity::error, "--shrink", "shrinks transformer models only (this plan's model is " +
                                                                to_string(model.kind) + ")"});
    return result;
  }
  if (!(budget.memory_bytes_per_rank > 0) || !(budget.step_seconds > 0)) {
    result.problems.push_back({Severity::error, "--shrink", "needs a positive memory and step-time budget"});
    return result;
  }
  const TransformerDims& t = model.transformer;
  if (t.layers <= 0 || t.heads <= 0 || t.hidden <= 0 || t.ffn <= 0 || t.seq_len <= 0 || t.vocab <= 0) {
    result.problems.push_back({Severity::error, "--shrink", "the model's layers, hidden, heads, ffn, vocab and seq_len must be positive"});
    return result;
  }
  if (t.latent_attention()) {  // its four head and latent sizes have no rung rule; the executor trains none
    result.problems.push_back({Severity::error, "--shrink", "multi-head latent attention (kv_lora_rank) is planned, not "
                                                            "trained: the executor has no latent attention to shrink to"});
    return result;
  }
  const std::int64_t world = plan.mesh.world_size();
  ClusterSpec cluster = budget.cluster;
  cluster.devices_per_node = std::max(cluster.devices_per_node, world);  // every rank on this one machine
  const Deployment deployment{world, 0};

  ShrinkResult& out = result.value;
  bool found = false;
  Rung previous{};
  bool have_previous = false;
  for (int i = 0; i <= 160; ++i) {
    const double s = std::pow(2.0, -static_cast<double>(i) / 4.0);
    Rung r = rung(model, plan, s, budget);
    // Consecutive scales often round to the same sizes: evaluate each distinct rung once.
    if (have_previous && r.model.transformer.layers == previous.model.transformer.layers &&
        r.model.transformer.hidden == previous.model.transformer.hidden &&
        r.model.transformer.heads == previous.model.transformer.heads &&
        r.model.transformer.ffn == previous.model.transformer.ffn &&
        r.model.transformer.seq_len == previous.model.transformer.seq_len)
      continue;
    previous = r;
    have_previous = true;
    const Explanation e = explain_plan(r.model, cluster, deployment, r.plan);
    if (!e.valid || !e.memory || !e.time) continue;
    const double memory = e.memory->worst().memory.total_bytes();
    const double step = e.time->step_s;
    out.model = r.model;
    out.plan = r.plan;
    out.scale = s;
    out.parameters = e.parameter_count;
    out.memory_bytes_per_rank = memory;
    out.step_seconds = step;
    out.fits_memory = memory <= budget.memory_bytes_per_rank;
    out.fits_time = step <= budget.step_seconds;
    found = true;
    if (out.fits_memory && out.fits_time) break;
  }
  if (!found) {
    result.problems.push_back({Severity::error, "--shrink",
                               "no reduced model of this plan is valid (mesh " + plan.mesh.to_string() + ")"});
    return result;
  }
  out.cluster = cluster;

  const TransformerDims& a = out.model.transformer;
  const std::int64_t seq = plan.seq_len > 0 ? plan.seq_len : t.seq_len;
  const auto change = [&](const std::string& field, const std::string& before, const std::string& after) {
    if (before != after) out.changes.push_back({field, before, after});
  };
  change("layers", count(t.layers), count(a.layers));
  change("hidden", count(t.hidden), count(a.hidden));
  change("heads", count(t.heads), count(a.heads));
  change("ffn", count(t.ffn), count(a.ffn));
  if (t.kv_heads != 0 && t.kv_heads != t.heads) change("kv_heads", count(t.kv_heads), count(a.kv_heads));
  change("vocab", count(t.vocab), count(a.vocab));
  change("seq_len", count(seq), count(a.seq_len));
  if (!plan.stage_layers.empty()) change("stage_layers", layers_text(plan.stage_layers), "even");
  change("precision", to_string(plan.precision), to_string(out.plan.precision));

  const std::string estimate = gib(out.memory_bytes_per_rank) + " per rank (budget " +
                               gib(budget.memory_bytes_per_rank) + "), step " + seconds(out.step_seconds) +
                               " (target " + seconds(budget.step_seconds) + ")";
  if (out.fits_memory && out.fits_time) {
    out.why = out.changes.empty() || (out.changes.size() == 1 && out.changes[0].field == "precision")
                  ? "the plan fits as it is: " + estimate
                  : "the largest rung of the reduction ladder that fits (scale " + number(out.scale) + "): " + estimate;
  } else {
    out.why = std::string("even the smallest model the plan allows is over ") +
              (!out.fits_memory ? "the memory budget" : "the step-time target") + ": " + estimate +
              (out.fits_memory ? "; the plan's global batch of " + count(plan.global_batch) + " sequences sets the step" : "");
  }
  return result;
}

}  // namespace meshplan
