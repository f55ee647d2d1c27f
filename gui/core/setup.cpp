// Setup inputs to a planning job. The rules are the CLI's (cli/search_options.cpp)
// restated with the Setup panel's field keys, plus checks on the model
// overrides that the preset loader would have made on a YAML file.
#include "gui/core/setup.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include "model/plan_defaults.hpp"
#include "model/default_batch.hpp"
#include "model/layer_graph.hpp"
#include "model/validate.hpp"
#include "model/text.hpp"

namespace meshplan::studio {
namespace {


// Strict comma list: an empty item is a problem at `field`.
std::vector<std::string> split(const std::string& text, const std::string& field, Problems& problems) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) {
      problems.push_back({Severity::error, field, "empty item in '" + text + "' (expected a comma-separated list)"});
      return {};
    }
    out.push_back(item);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

void error(Problems& problems, const std::string& field, const std::string& message) {
  problems.push_back({Severity::error, field, message});
}

void resolve_space(const SetupInputs& in, SearchSpace& space, Problems& problems) {
  space.axes.clear();  // empty: the model's default axes (resolve_setup)
  const std::vector<std::string> words = trim(in.axes).empty() ? std::vector<std::string>{} : split(in.axes, "axes", problems);
  for (const auto& word : words) {
    const auto axis = parse_axis(word);
    if (!axis) error(problems, "axes", "'" + word + "' is not one of: dp, fsdp, tp, pp, cp, ep");
    else if (std::find(space.axes.begin(), space.axes.end(), *axis) == space.axes.end()) space.axes.push_back(*axis);
  }
  if (in.max_tp < 0) error(problems, "max_tp", "must be 0 (the devices per node) or more");
  if (in.max_pp < 0) error(problems, "max_pp", "must be 0 (no limit but the layers) or more");
  if (in.max_cp < 0) error(problems, "max_cp", "must be 0 (no limit but the device count) or more");
  if (in.max_ep < 0) error(problems, "max_ep", "must be 0 (no limit but the device count) or more");
  space.max_tp = in.max_tp;
  space.max_pp = in.max_pp;
  space.max_cp = in.max_cp;
  space.max_ep = in.max_ep;
  if (!(in.headroom >= 0 && in.headroom < 1)) error(problems, "headroom", "must be a fraction in [0, 1)");
  space.memory_headroom = in.headroom;

  space.schedules.clear();
  for (const auto& word : split(in.schedules, "schedules", problems)) {
    std::optional<ScheduleKind> kind;
    if (word == "interleaved") kind = ScheduleKind::interleaved;
    else if (auto s = parse_schedule(word); s && s->kind != ScheduleKind::interleaved) kind = s->kind;
    if (!kind) error(problems, "schedules", "'" + word + "' is not one of: gpipe, 1f1b, interleaved, zb-h1");
    else if (std::find(space.schedules.begin(), space.schedules.end(), *kind) == space.schedules.end()) space.schedules.push_back(*kind);
  }
  space.zero_stages.clear();
  for (const auto& word : split(in.zero, "zero", problems)) {
    if (word.size() == 1 && word[0] >= '0' && word[0] <= '3') {
      const int stage = word[0] - '0';
      if (std::find(space.zero_stages.begin(), space.zero_stages.end(), stage) == space.zero_stages.end()) space.zero_stages.push_back(stage);
    } else {
      error(problems, "zero", "'" + word + "' is not a ZeRO stage 0, 1, 2 or 3");
    }
  }
  space.recomputes.clear();
  for (const auto& word : split(in.recompute, "recompute", problems)) {
    const auto r = parse_recompute(word);
    if (!r) error(problems, "recompute", "'" + word + "' is not one of: " + std::string(recompute_choices));
    else if (std::find(space.recomputes.begin(), space.recomputes.end(), *r) == space.recomputes.end()) space.recomputes.push_back(*r);
  }
  space.attentions.clear();
  for (const auto& word : split(in.attention, "attention", problems)) {
    const auto a = parse_attention(word);
    if (!a) error(problems, "attention", "'" + word + "' is not one of: " + std::string(attention_choices));
    else if (std::find(space.attentions.begin(), space.attentions.end(), *a) == space.attentions.end()) space.attentions.push_back(*a);
  }
  if (auto c = parse_cp_comm(in.cp_comm)) {
    space.cp_comm = *c;
  } else {
    error(problems, "cp_comm", "'" + in.cp_comm + "' is not one of: " + std::string(cp_comm_choices));
  }
  if (auto l = parse_loss(in.loss)) {
    space.loss = *l;
  } else {
    error(problems, "loss", "'" + in.loss + "' is not one of: " + std::string(loss_choices));
  }
  space.fp32_gradients = in.fp32_gradients;
  space.bf16_moments = in.bf16_moments;
  space.overlaps = in.overlaps;
  space.expert_tensor_parallel.clear();
  for (const auto& word : split(in.expert_tp, "expert_tp", problems)) {
    const auto value = parse_expert_tp(word);
    if (!value) error(problems, "expert_tp", "'" + word + "' is not one of: " + std::string(expert_tp_choices));
    else if (std::find(space.expert_tensor_parallel.begin(), space.expert_tensor_parallel.end(), *value) ==
             space.expert_tensor_parallel.end()) space.expert_tensor_parallel.push_back(*value);
  }
  std::string bad;
  if (const auto modules = parse_recompute_modules(in.recompute_modules, bad)) {
    space.recompute_modules = *modules;
  } else {
    error(problems, "recompute_modules", recompute_modules_problem(bad));
  }
  if (auto d = parse_ep_dispatch(in.ep_dispatch)) {
    space.ep_dispatch = *d;
  } else {
    error(problems, "ep_dispatch", "'" + in.ep_dispatch + "' is not one of: " + std::string(ep_dispatch_choices));
  }
  if (in.threads < 0 || in.threads > 4096) error(problems, "threads", "must be 0 (one per core) to 4096");
}

// The key figures of a transformer, overridden; the checks the preset loader
// makes on the same keys (model/model_spec.cpp).
void apply_model_overrides(const SetupInputs& in, ModelSpec& model, Problems& problems) {
  const bool transformer = model.kind == ModelKind::transformer;
  const std::pair<const char*, std::int64_t> given[] = {{"layers", in.layers}, {"hidden", in.hidden}, {"heads", in.heads}, {"seq", in.seq}};
  for (const auto& [field, value] : given) {
    if (value < 0) error(problems, field, "must be positive (0 keeps the preset's value), got " + std::to_string(value));
    if (value > 0 && !transformer && std::string(field) != "seq") {
      error(problems, field, std::string("applies to transformer models only; ") + model.name + " is " + to_string(model.kind));
    }
  }
  if (!transformer || has_errors(problems)) return;
  TransformerDims& t = model.transformer;
  const bool derived_head_dim = t.head_dim * t.heads == t.hidden;
  const bool multi_head = t.kv_heads == t.heads;
  if (in.layers > 0) t.layers = in.layers;
  if (in.heads > 0) t.heads = in.heads;
  if (in.hidden > 0) t.hidden = in.hidden;
  if (in.hidden > 0 || in.heads > 0) {
    if (multi_head) t.kv_heads = t.heads;
    if (derived_head_dim) {
      if (t.hidden % t.heads != 0) {
        error(problems, in.hidden > 0 ? "hidden" : "heads",
              "hidden (" + std::to_string(t.hidden) + ") must be a multiple of heads (" + std::to_string(t.heads) + ")");
      } else {
        t.head_dim = t.hidden / t.heads;
      }
    }
    if (t.heads % t.kv_heads != 0) {
      error(problems, "heads", "heads (" + std::to_string(t.heads) + ") must be a multiple of the preset's kv_heads (" +
                                   std::to_string(t.kv_heads) + ")");
    }
  }
}

}  // namespace

Loaded<PlanningJob> resolve_setup(const SetupInputs& in) {
  Loaded<PlanningJob> result;
  Problems& problems = result.problems;
  PlanningJob& job = result.value;
  resolve_space(in, job.space, problems);
  job.threads = in.threads;

  auto model = load_model(trim(in.model));
  for (auto p : model.problems) {
    p.message = (p.where.empty() ? "" : p.where + ": ") + p.message;
    p.where = "model";
    problems.push_back(p);
  }
  auto cluster = load_cluster(trim(in.cluster));
  for (auto p : cluster.problems) {
    p.message = (p.where.empty() ? "" : p.where + ": ") + p.message;
    p.where = "cluster";
    problems.push_back(p);
  }
  if (in.global_batch < 0) {
    error(problems, "global_batch", "must be at least 1 (0: the default rule), got " + std::to_string(in.global_batch));
  }
  if (in.nodes < 1) error(problems, "nodes", "must be at least 1, got " + std::to_string(in.nodes));
  if (in.devices_per_node < 0) error(problems, "devices_per_node", "must be positive (0 keeps the preset's), got " + std::to_string(in.devices_per_node));
  if (!model.ok() || !cluster.ok()) return result;

  job.model = model.value;
  if (job.space.axes.empty()) job.space.axes = default_search_axes(job.model);
  job.cluster = cluster.value;
  apply_model_overrides(in, job.model, problems);
  if (in.devices_per_node > 0) job.cluster.devices_per_node = in.devices_per_node;
  job.world_size = std::max<std::int64_t>(in.nodes, 1) * job.cluster.devices_per_node;
  job.global_batch = in.global_batch;
  job.seq_len = in.seq > 0 ? in.seq : job.model.default_seq_len();
  if (job.space.precisions.empty() || job.space.precisions == SearchSpace{}.precisions) {
    job.space.precisions = {job.cluster.device.peak_for(Dtype::bf16) ? Precision::bf16 : Precision::fp32};
  }
  if (has_errors(problems)) return result;

  const LayerGraph graph = build_layer_graph(job.model, job.seq_len);
  if (job.global_batch == 0) {  // the CLI's rule (model/default_batch.hpp), per model and GPU count
    const DefaultBatch batch = default_global_batch(job.model, graph.parameter_count(), job.seq_len, job.world_size);
    job.global_batch = batch.sequences;
    job.global_batch_rule = batch.rule;
  }

  // The validator's rules about the job itself, on a one-axis probe plan (as the CLI does).
  Plan probe;
  probe.mesh.axes = {{Axis::dp, job.world_size}};
  probe.global_batch = job.world_size;
  probe.seq_len = in.seq;
  probe.precision = job.space.precisions.front();
  std::set<std::string> seen;
  for (const auto& p : validate_plan(job.model, graph, job.cluster, Deployment{job.world_size, 0}, probe)) {
    if (p.severity != Severity::error) continue;
    std::string field;
    if (p.where == "world_size") field = "nodes";
    if (p.where == "seq_len") field = "seq";
    if (field.empty()) continue;  // the probe's own shape; the search tries others
    if (seen.insert(field + p.message).second) error(problems, field, p.message);
  }
  return result;
}

std::string describe_job(const PlanningJob& job) {
  const std::int64_t per_node = job.cluster.devices_per_node;
  const std::int64_t nodes = (job.world_size + per_node - 1) / per_node;
  std::string text = job.model.name + " on " + std::to_string(job.world_size) + " x " + job.cluster.device.name + " (" +
                     job.cluster.name + ": " + std::to_string(nodes) + (nodes == 1 ? " node" : " nodes") + " of " +
                     std::to_string(per_node) + "); global batch " + std::to_string(job.global_batch);
  if (job.model.kind == ModelKind::transformer) text += " x " + std::to_string(job.seq_len) + " tokens";
  if (!job.global_batch_rule.empty()) text += " (default: " + job.global_batch_rule + ")";
  return text;
}

}  // namespace meshplan::studio
