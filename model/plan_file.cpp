// Plan files (plan_file.hpp): writing is plan_to_json and friends; reading is
// a strict walk over the JSON that names the file and the key of every
// problem, then the plan rules of validate_plan, so a hand-edited file with
// tp = 5 is caught on load rather than at rank 3 of a training job.
#include "model/atomic_file.hpp"
#include "model/plan_file.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "model/json_lines.hpp"
#include "model/layer_graph.hpp"
#include "model/overlap_switches.hpp"
#include "model/suggest.hpp"
#include "model/text.hpp"
#include "model/plan_defaults.hpp"
#include "model/report_json.hpp"
#include "model/validate.hpp"

namespace meshplan {
namespace {

using Json = nlohmann::ordered_json;

enum class Need { required, optional };

std::string type_name(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  return "an object";
}

// A strict reader of one JSON object: typed accessors, ranges, and unknown
// keys reported by finish(). Problems read "<file> key '<prefix><key>'".
class JsonObject {
 public:
  JsonObject(const Json& node, std::string file, std::string prefix, Problems& problems)
      : node_(node), file_(std::move(file)), prefix_(std::move(prefix)), problems_(&problems) {}

  std::string where(const std::string& key) const { return file_ + " key '" + prefix_ + key + "'"; }
  void add_problem(const std::string& key, std::string message) {
    problems_->push_back({Severity::error, where(key), std::move(message)});
  }

  const Json* find(const std::string& key, Need need) {
    asked_.insert(key);
    auto it = node_.find(key);
    if (it == node_.end()) {
      if (need == Need::required) add_problem(key, "missing required key");
      return nullptr;
    }
    return &*it;
  }

  std::optional<std::int64_t> integer(const std::string& key, Need need, std::int64_t min_value,
                                      std::int64_t max_value) {
    const Json* value = find(key, need);
    if (!value) return std::nullopt;
    return as_integer(*value, key, min_value, max_value);
  }

  std::optional<std::int64_t> as_integer(const Json& value, const std::string& key, std::int64_t min_value,
                                         std::int64_t max_value) {
    std::optional<std::int64_t> result;
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(max_value)) {
      add_problem(key, "must be in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "], got " +
                           value.dump());
      return std::nullopt;
    }
    if (value.is_number_integer()) {
      result = value.get<std::int64_t>();
    } else if (value.is_number_float()) {
      const double d = value.get<double>();
      if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15) result = static_cast<std::int64_t>(d);
    }
    if (!result) {
      add_problem(key, "expected a whole number, got " + type_name(value) + (value.is_number() ? " " + value.dump() : ""));
      return std::nullopt;
    }
    if (*result < min_value || *result > max_value) {
      add_problem(key, "must be in [" + std::to_string(min_value) + ", " + std::to_string(max_value) + "], got " +
                           value.dump());
      return std::nullopt;
    }
    return result;
  }

  std::optional<double> number(const std::string& key, Need need, double min_value, double max_value) {
    const Json* value = find(key, need);
    if (!value) return std::nullopt;
    if (!value->is_number()) {
      add_problem(key, "expected a number, got " + type_name(*value));
      return std::nullopt;
    }
    const double d = value->get<double>();
    if (!(d >= min_value && d <= max_value)) {
      std::ostringstream range;
      range << "must be in [" << min_value << ", " << max_value << "], got " << value->dump();
      add_problem(key, range.str());
      return std::nullopt;
    }
    return d;
  }

  std::optional<bool> boolean(const std::string& key, Need need) {
    const Json* value = find(key, need);
    if (!value) return std::nullopt;
    if (!value->is_boolean()) {
      add_problem(key, "expected true or false, got " + type_name(*value));
      return std::nullopt;
    }
    return value->get<bool>();
  }

  std::optional<std::string> text(const std::string& key, Need need) {
    const Json* value = find(key, need);
    if (!value) return std::nullopt;
    if (!value->is_string()) {
      add_problem(key, "expected a string, got " + type_name(*value));
      return std::nullopt;
    }
    if (need == Need::required && trim(value->get<std::string>()).empty()) {
      add_problem(key, "is empty");
      return std::nullopt;
    }
    return value->get<std::string>();
  }

  std::optional<std::string> choice(const std::string& key, Need need, const std::vector<std::string>& allowed) {
    auto word = text(key, need);
    if (!word) return std::nullopt;
    for (const auto& a : allowed) {
      if (a == *word) return word;
    }
    std::string list;
    for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
    add_problem(key, "'" + *word + "' is not one of: " + list);
    return std::nullopt;
  }

  std::optional<JsonObject> object(const std::string& key, Need need) {
    const Json* value = find(key, need);
    if (!value) return std::nullopt;
    if (!value->is_object()) {
      add_problem(key, "expected an object, got " + type_name(*value));
      return std::nullopt;
    }
    return JsonObject(*value, file_, prefix_ + key + ".", *problems_);
  }

  // Unknown keys are errors (a misspelt key must not be silently ignored).
  void finish() {
    std::string allowed;
    for (const auto& k : asked_) allowed += (allowed.empty() ? "" : ", ") + k;
    for (const auto& item : node_.items()) {
      if (!asked_.count(item.key())) add_problem(item.key(), "unknown key (allowed here: " + allowed + ")");
    }
  }

  const Json& node() const { return node_; }
  const std::string& file() const { return file_; }
  const std::string& prefix() const { return prefix_; }
  Problems& problems() { return *problems_; }

 private:
  const Json& node_;
  std::string file_;
  std::string prefix_;
  Problems* problems_;
  std::set<std::string> asked_;
};

Json link_to_json(const LinkSpec& link, bool inter_node) {
  Json j;
  j["kind"] = link.kind;
  if (inter_node) j["nics_per_node"] = link.nics_per_node;
  j["bandwidth_bytes_per_s"] = link.bandwidth_bytes_per_s;
  j["latency_s"] = link.latency_s;
  j["achievable_fraction"] = link.achievable_fraction;
  j["overlaps_compute"] = link.overlaps_compute;
  return j;
}

// DeviceSpec's measured refinements: [[intensity, fraction], ...] and {class: bytes/s} of the set classes.
Json curve_to_json(const std::vector<GemmCurvePoint>& curve) {
  Json j = Json::array();
  for (const auto& p : curve) j.push_back({p.intensity, p.fraction});
  return j;
}
Json op_rates_to_json(const std::array<double, kStreamOps>& rates) {
  Json j = Json::object();
  for (std::size_t i = 0; i < kStreamOps; ++i) {
    if (rates[i] > 0) j[to_string(static_cast<StreamOp>(i))] = rates[i];
  }
  return j;
}

Json device_to_json(const DeviceSpec& device) {
  Json j;
  j["name"] = device.name;
  j["source"] = device.source;
  if (device.kind != DeviceKind::unspecified) j["kind"] = to_string(device.kind);
  Json peaks = Json::object();
  for (const auto& [dtype, flops] : device.peak_flops_per_s) peaks[to_string(dtype)] = flops;
  j["peak_flops_per_s"] = peaks;
  j["memory_bytes"] = device.memory_bytes;
  j["memory_bandwidth_bytes_per_s"] = device.memory_bandwidth_bytes_per_s;
  j["gemm_efficiency"] = device.gemm_efficiency;
  if (device.fp8_gemm_efficiency > 0) j["fp8_gemm_efficiency"] = device.fp8_gemm_efficiency;
  j["memory_efficiency"] = device.memory_efficiency;
  j["compute_units"] = device.compute_units;
  j["l2_bandwidth_bytes_per_s"] = device.l2_bandwidth_bytes_per_s;
  j["gemm_curve"] = curve_to_json(device.gemm_curve);
  j["op_bandwidth_bytes_per_s"] = op_rates_to_json(device.op_bandwidth_bytes_per_s);
  auto attention_curve = [](const std::vector<AttentionRatePoint>& curve) {
    Json c = Json::array();
    for (const auto& p : curve) c.push_back({p.forward_flops, p.flops_per_s});
    return c;
  };
  j["attention_forward_curve"] = attention_curve(device.attention_forward_curve);
  j["attention_backward_curve"] = attention_curve(device.attention_backward_curve);
  j["attention_dropout_slowdown"] = {{"forward", device.attention_dropout_slowdown[0]},
                                     {"backward", device.attention_dropout_slowdown[1]}};
  j["runtime"] = {{"launch_overhead_s", device.launch_overhead_s},
                  {"context_bytes", device.context_bytes},
                  {"workspace_bytes", device.workspace_bytes},
                  {"allocator_reserve_fraction", device.allocator_reserve_fraction}};
  if (device.threaded) {
    j["threaded"] = {{"threads", device.threaded->threads},
                     {"gemm_curve", curve_to_json(device.threaded->gemm_curve)},
                     {"op_bandwidth_bytes_per_s", op_rates_to_json(device.threaded->op_bandwidth_bytes_per_s)}};
  } else {
    j["threaded"] = nullptr;
  }
  return j;
}

// ---- reading ----

// The model goes back through the preset loader (JSON is YAML flow style), so
// a plan file's model obeys exactly the rules of a preset file. Its messages
// say "<file>:1 key 'heads'"; they are renamed to the plan file's key.
ModelSpec read_model_object(JsonObject& root) {
  const Json* node = root.find("model", Need::required);
  if (!node) return {};
  if (!node->is_object()) {
    root.add_problem("model", "expected an object (the model preset's keys), got " + type_name(*node));
    return {};
  }
  const std::string marker = root.file() + " (model)";
  auto loaded = load_model_text(node->dump(), marker);
  for (auto& p : loaded.problems) {
    const auto key = p.where.find(" key '");
    if (key == std::string::npos) {
      p.where = root.where("model");
    } else {
      std::string name = p.where.substr(key + 6);
      if (name.ends_with('\'')) name.pop_back();
      p.where = root.where("model." + name);
    }
    root.problems().push_back(std::move(p));
  }
  return loaded.value;
}

void read_link(JsonObject& link, LinkSpec& out, bool inter_node) {
  out.kind = link.choice("kind", Need::required,
                         inter_node ? std::vector<std::string>{"infiniband", "ethernet", "ici"}
                                    : std::vector<std::string>{"nvlink", "pcie", "ici", "shared-memory"})
                 .value_or("");
  if (inter_node) out.nics_per_node = link.integer("nics_per_node", Need::required, 1, 1024).value_or(1);
  out.bandwidth_bytes_per_s = link.number("bandwidth_bytes_per_s", Need::required, 1e-3, 1e18).value_or(0);
  out.latency_s = link.number("latency_s", Need::required, 0, 1).value_or(0);
  out.achievable_fraction = link.number("achievable_fraction", Need::required, kLinkFractionMin, 1).value_or(1);
  out.overlaps_compute = link.boolean("overlaps_compute", Need::optional).value_or(true);  // absent before 2026-11-22
  link.finish();
}

// An array of [a, b] number pairs, appended to `out` as Point{a, b}; false
// when the node is anything else (the caller names the key).
template <class Point>
bool read_number_pairs(const Json& node, std::vector<Point>& out) {
  if (!node.is_array()) return false;
  for (std::size_t i = 0; i < node.size(); ++i) {
    const Json& pair = node[i];
    if (!(pair.is_array() && pair.size() == 2 && pair[0].is_number() && pair[1].is_number())) return false;
    out.push_back({pair[0].get<double>(), pair[1].get<double>()});
  }
  return true;
}

// `gemm_curve` and `op_bandwidth_bytes_per_s` of a device (or its `threaded`) object, both optional.
void read_measured_rates(JsonObject& object, std::vector<GemmCurvePoint>& curve, std::array<double, kStreamOps>& rates) {
  if (const Json* node = object.find("gemm_curve", Need::optional)) {
    std::vector<GemmCurvePoint> read;
    if (!read_number_pairs(*node, read)) {
      object.add_problem("gemm_curve", "expected an array of [intensity, fraction] pairs");
    } else if (const std::string problem = gemm_curve_problem(read); !problem.empty()) {
      object.add_problem("gemm_curve", problem);
    } else {
      curve = std::move(read);
    }
  }
  if (auto ops = object.object("op_bandwidth_bytes_per_s", Need::optional)) {
    for (std::size_t i = 0; i < kStreamOps; ++i) {
      if (auto rate = ops->number(to_string(static_cast<StreamOp>(i)), Need::optional, 1e-3, 1e18)) rates[i] = *rate;
    }
    ops->finish();
  }
}

// `attention_forward_curve` / `attention_backward_curve`: [[forward FLOPs, FLOP/s], ...], optional.
void read_attention_curve(JsonObject& object, const char* key, double peak_flops_per_s,
                          std::vector<AttentionRatePoint>& curve) {
  const Json* node = object.find(key, Need::optional);
  if (!node) return;
  std::vector<AttentionRatePoint> read;
  if (!read_number_pairs(*node, read)) {
    object.add_problem(key, "expected an array of [forward FLOPs, FLOP/s] pairs");
  } else if (const std::string problem = attention_curve_problem(read, peak_flops_per_s); !problem.empty()) {
    object.add_problem(key, problem);
  } else {
    curve = std::move(read);
  }
}

void read_device(JsonObject& device, DeviceSpec& out) {
  out.name = device.text("name", Need::required).value_or("");
  out.source = device.text("source", Need::required).value_or("");
  // Optional: files written before 2026-11-27 do not say what the device is.
  if (auto kind = device.choice("kind", Need::optional, device_kind_names())) out.kind = *parse_device_kind(*kind);
  if (auto peaks = device.object("peak_flops_per_s", Need::required)) {
    for (Dtype dtype : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8}) {
      if (auto flops = peaks->number(to_string(dtype), Need::optional, 1e-3, 1e21)) out.peak_flops_per_s[dtype] = *flops;
    }
    peaks->finish();
    if (out.peak_flops_per_s.empty() && peaks->node().empty()) {
      device.add_problem("peak_flops_per_s", "needs at least one of fp32, tf32, bf16, fp16, fp8");
    }
  }
  out.memory_bytes = device.number("memory_bytes", Need::required, 1, 1e18).value_or(0);
  out.memory_bandwidth_bytes_per_s = device.number("memory_bandwidth_bytes_per_s", Need::required, 1, 1e18).value_or(0);
  out.gemm_efficiency = device.number("gemm_efficiency", Need::required, 0.01, 1).value_or(out.gemm_efficiency);
  // Optional: written only where the device measured its fp8 GEMMs (since 2026-11-29).
  out.fp8_gemm_efficiency = device.number("fp8_gemm_efficiency", Need::optional, 0.01, 1).value_or(0);
  out.memory_efficiency = device.number("memory_efficiency", Need::required, 0.01, 1).value_or(out.memory_efficiency);
  out.compute_units = device.integer("compute_units", Need::required, 0, 1 << 20).value_or(0);
  // Optional: files written before 2026-11-23 have no L2 figure (read as not modelled).
  out.l2_bandwidth_bytes_per_s = device.number("l2_bandwidth_bytes_per_s", Need::optional, 0, 1e18).value_or(0);
  // Optional: files written before the measured refinements existed have none.
  read_measured_rates(device, out.gemm_curve, out.op_bandwidth_bytes_per_s);
  // Optional: files written before fused attention and the stack's figures were modelled have none.
  read_attention_curve(device, "attention_forward_curve", attention_peak_flops_per_s(out), out.attention_forward_curve);
  read_attention_curve(device, "attention_backward_curve", attention_peak_flops_per_s(out), out.attention_backward_curve);
  // Optional: files written before 2026-11-26 have none (read as not modelled).
  if (auto slowdown = device.object("attention_dropout_slowdown", Need::optional)) {
    out.attention_dropout_slowdown[0] = slowdown->number("forward", Need::required, 1, 10).value_or(1);
    out.attention_dropout_slowdown[1] = slowdown->number("backward", Need::required, 1, 10).value_or(1);
    slowdown->finish();
  }
  if (auto runtime = device.object("runtime", Need::optional)) {
    out.launch_overhead_s = runtime->number("launch_overhead_s", Need::optional, 0, 1).value_or(0);
    out.context_bytes = runtime->number("context_bytes", Need::optional, 0, 1e18).value_or(0);
    out.workspace_bytes = runtime->number("workspace_bytes", Need::optional, 0, 1e18).value_or(0);
    out.allocator_reserve_fraction = runtime->number("allocator_reserve_fraction", Need::optional, 0, 1).value_or(0);
    runtime->finish();
  }
  if (const Json* threaded = device.find("threaded", Need::optional); threaded && !threaded->is_null()) {
    if (auto t = device.object("threaded", Need::optional)) {
      ThreadedRates rates;
      rates.threads = static_cast<int>(t->integer("threads", Need::required, 2, 4096).value_or(0));
      read_measured_rates(*t, rates.gemm_curve, rates.op_bandwidth_bytes_per_s);
      t->finish();
      if (rates.threads > 0) out.threaded = std::move(rates);
    }
  }
  device.finish();
}

ClusterSpec read_cluster_object(JsonObject& root) {
  ClusterSpec cluster;
  auto c = root.object("cluster", Need::required);
  if (!c) return cluster;
  cluster.name = c->text("name", Need::required).value_or("");
  cluster.source = c->text("source", Need::required).value_or("");
  cluster.devices_per_node = c->integer("devices_per_node", Need::required, 1, 1 << 20).value_or(1);
  if (const Json* max_nodes = c->find("max_nodes", Need::optional); max_nodes && !max_nodes->is_null()) {
    cluster.max_nodes = c->as_integer(*max_nodes, "max_nodes", 1, 1 << 24);
  }
  if (auto intra = c->object("intra_node", Need::required)) read_link(*intra, cluster.intra_node, false);
  if (auto inter = c->object("inter_node", Need::required)) read_link(*inter, cluster.inter_node, true);
  if (auto device = c->object("device", Need::required)) read_device(*device, cluster.device);
  c->finish();
  return cluster;
}

Mesh read_mesh(JsonObject& plan) {
  Mesh mesh;
  const Json* node = plan.find("mesh", Need::required);
  if (!node) return mesh;
  if (!node->is_object() || node->empty()) {
    plan.add_problem("mesh", "expected an object of axis sizes, outermost first, e.g. {\"dp\": 16, \"tp\": 8}; got " +
                                 (node->is_object() ? std::string("an empty object") : type_name(*node)));
    return mesh;
  }
  JsonObject axes(*node, plan.file(), plan.prefix() + "mesh.", plan.problems());
  for (const auto& item : node->items()) {
    const auto axis = parse_axis(item.key());
    if (!axis) {
      axes.add_problem(item.key(), "unknown mesh axis (axes: dp, fsdp, tp, pp, cp, ep)");
      continue;
    }
    if (std::any_of(mesh.axes.begin(), mesh.axes.end(), [&](const MeshAxis& a) { return a.axis == *axis; })) {
      axes.add_problem(item.key(), "axis " + to_string(*axis) + " appears twice");
      continue;
    }
    auto size = axes.as_integer(item.value(), item.key(), 1, kMaxMeshDevices);
    if (!size) continue;
    // Both factors are <= 2^30, so the product fits; a larger one would overflow the planner's products.
    if (mesh.world_size() * *size > kMaxMeshDevices) {
      axes.add_problem(item.key(), "makes the mesh " + std::to_string(mesh.world_size() * *size) +
                                       " devices; a mesh has at most " + std::to_string(kMaxMeshDevices));
      continue;
    }
    mesh.axes.push_back({*axis, *size});
  }
  return mesh;
}

Plan read_plan_object(JsonObject& root, std::optional<std::int64_t>& micro_batches) {
  Plan plan;
  auto p = root.object("plan", Need::required);
  if (!p) return plan;
  plan.mesh = read_mesh(*p);
  plan.micro_batch = p->integer("micro_batch", Need::required, 1, kMaxGlobalBatch).value_or(1);
  micro_batches = p->integer("micro_batches", Need::required, 0, std::int64_t{1} << 40);
  plan.global_batch = p->integer("global_batch", Need::required, 1, kMaxGlobalBatch).value_or(1);
  plan.seq_len = p->integer("seq_len", Need::required, 0, kMaxSeqLen).value_or(0);
  plan.zero_stage = static_cast<int>(p->integer("zero", Need::required, 0, 3).value_or(0));
  if (auto r = p->choice("recompute", Need::required, choice_words(recompute_choices))) plan.recompute = *parse_recompute(*r);
  plan.sequence_parallel = p->boolean("sequence_parallel", Need::required).value_or(false);
  // Absent in files written before attention was part of the plan: those
  // were computed with the s x s scores stored, i.e. unfused.
  plan.attention = Attention::unfused;
  if (auto a = p->choice("attention", Need::optional, {"fused", "unfused"})) plan.attention = *parse_attention(*a);
  // Absent in files written before it was part of the plan: ring attention, what they were priced with.
  if (auto c = p->choice("cp_comm", Need::optional, choice_words(cp_comm_choices))) plan.cp_comm = *parse_cp_comm(*c);
  // Optional: absent, the all-to-all dispatch (what files written before the key meant).
  if (auto d = p->choice("ep_dispatch", Need::optional, choice_words(ep_dispatch_choices))) {
    plan.ep_dispatch = *parse_ep_dispatch(*d);
  }
  // Absent in files written before it was part of the plan: the eager loss, what they were priced with.
  plan.loss = Loss::eager;
  if (auto l = p->choice("loss", Need::optional, choice_words(loss_choices))) plan.loss = *parse_loss(*l);
  if (auto s = p->text("schedule", Need::required)) {
    if (auto schedule = parse_schedule(*s)) {
      plan.schedule = *schedule;
    } else {
      p->add_problem("schedule", "'" + *s + "' is not one of: " + std::string(schedule_choices));
    }
  }
  if (auto s = p->text("precision", Need::required)) {
    if (auto precision = parse_precision(*s)) {
      plan.precision = *precision;
    } else {
      p->add_problem("precision", "'" + *s + "' is not one of: " + std::string(precision_choices));
    }
  }
  if (const Json* layers = p->find("stage_layers", Need::optional)) {
    if (!layers->is_array()) {
      p->add_problem("stage_layers", "expected an array of layer counts, got " + type_name(*layers));
    } else {
      for (std::size_t i = 0; i < layers->size(); ++i) {
        if (auto n = p->as_integer((*layers)[i], "stage_layers[" + std::to_string(i) + "]", 0, 1 << 20)) {
          plan.stage_layers.push_back(*n);
        }
      }
    }
  }
  plan.gradient_bucket_bytes = p->number("gradient_bucket_bytes", Need::required, 1, 1e15).value_or(plan.gradient_bucket_bytes);
  if (auto h = p->number("memory_headroom", Need::required, 0, 1)) {
    if (*h >= 1) {
      p->add_problem("memory_headroom", "must be a fraction in [0, 1)");
    } else {
      plan.memory_headroom = *h;
    }
  }
  plan.overlap_gradient_reduction =
      p->boolean("overlap_gradient_reduction", Need::optional).value_or(plan.overlap_gradient_reduction);
  plan.overlap_parameter_gather = p->boolean("overlap_parameter_gather", Need::optional).value_or(plan.overlap_parameter_gather);
  plan.overlap_tensor_parallel = p->boolean("overlap_tensor_parallel", Need::optional).value_or(plan.overlap_tensor_parallel);
  // Optional: absent, off (written only when set).
  for (const OverlapSwitch& s : kOverlapSwitches) plan.*s.field = p->boolean(std::string(s.key), Need::optional).value_or(false);
  // Optional: files written before the key existed kept 16-bit gradients.
  plan.fp32_gradients = p->boolean("fp32_gradients", Need::optional).value_or(plan.fp32_gradients);
  // Optional: absent, fp32 moments (written only when set).
  plan.bf16_moments = p->boolean("bf16_moments", Need::optional).value_or(false);
  // Optional: absent, selective recompute repeats the attention core (written only when other).
  if (const auto modules = p->text("recompute_modules", Need::optional)) {
    std::string bad;
    if (const auto parsed = parse_recompute_modules(*modules, bad)) {
      plan.recompute_modules = *parsed;
    } else {
      p->add_problem("recompute_modules", recompute_modules_problem(bad));
    }
  }
  // Optional: absent, the experts split over tp (what files written before the key meant).
  plan.expert_tensor_parallel = p->integer("expert_tensor_parallel", Need::optional, 0, kMaxMeshDevices).value_or(0);
  p->finish();
  return plan;
}

void read_memory(JsonObject& memory, MemoryBreakdown& out) {
  out.parameters_bytes = memory.number("parameters", Need::required, 0, 1e30).value_or(0);
  out.gradients_bytes = memory.number("gradients", Need::required, 0, 1e30).value_or(0);
  out.optimizer_bytes = memory.number("optimizer", Need::required, 0, 1e30).value_or(0);
  out.activations_bytes = memory.number("activations", Need::required, 0, 1e30).value_or(0);
  out.buffers_bytes = memory.number("buffers", Need::required, 0, 1e30).value_or(0);
  // Peak transients and runtime reserves: absent in files from before they were modelled.
  out.loss_transient_bytes = memory.number("loss_transient", Need::optional, 0, 1e30).value_or(0);
  out.activation_gradient_bytes = memory.number("activation_gradients", Need::optional, 0, 1e30).value_or(0);
  out.workspace_bytes = memory.number("workspaces", Need::optional, 0, 1e30).value_or(0);
  out.runtime_context_bytes = memory.number("runtime_context", Need::optional, 0, 1e30).value_or(0);
  out.allocator_reserve_bytes = memory.number("allocator_reserve", Need::optional, 0, 1e30).value_or(0);
  // Recomputed from the rows above, so only their type is checked: the rows
  // are bounded one by one, and their sum may exceed any one row's bound.
  constexpr double any = std::numeric_limits<double>::max();
  memory.number("allocated_peak", Need::optional, 0, any);
  memory.number("total", Need::optional, 0, any);
}

// The prediction is informative: its keys are checked for type, but keys a
// newer writer adds are ignored (no finish()).
PlanPrediction read_prediction(JsonObject& root) {
  PlanPrediction out;
  auto p = root.object("prediction", Need::required);
  if (!p) return out;
  constexpr double big = std::numeric_limits<double>::max();  // any finite figure the writer computed
  out.fits_memory = p->boolean("fits_memory", Need::required).value_or(false);
  out.parameters = p->number("parameters", Need::required, 0, big).value_or(0);
  out.worst_stage = p->integer("worst_stage", Need::required, 0, 1 << 20).value_or(0);
  out.parameters_per_device = p->number("parameters_per_device", Need::required, 0, big).value_or(0);
  if (auto memory = p->object("memory_bytes", Need::required)) read_memory(*memory, out.memory);
  out.capacity_bytes = p->number("capacity_bytes", Need::required, 0, big).value_or(0);
  out.usable_bytes = p->number("usable_bytes", Need::required, 0, big).value_or(0);
  if (auto t = p->object("time_s", Need::optional)) {
    TimeEstimate time;
    time.compute_s = t->number("compute", Need::required, 0, big).value_or(0);
    time.communication_s = t->number("communication", Need::required, 0, big).value_or(0);
    time.communication_exposed_s = t->number("communication_exposed", Need::required, 0, big).value_or(0);
    time.bubble_s = t->number("bubble", Need::required, 0, big).value_or(0);
    time.optimizer_s = t->number("optimizer", Need::required, 0, big).value_or(0);
    time.step_s = t->number("step", Need::required, 0, big).value_or(0);
    if (auto axes = p->object("communication_s_by_axis", Need::optional)) {
      for (const auto& item : axes->node().items()) {
        const auto axis = parse_axis(item.key());
        if (!axis) {
          axes->add_problem(item.key(), "unknown mesh axis (axes: dp, fsdp, tp, pp, cp, ep)");
          continue;
        }
        auto entry = axes->object(item.key(), Need::required);
        if (!entry) continue;
        const auto i = static_cast<std::size_t>(*axis);
        time.axis_communication_s[i] = entry->number("total", Need::required, 0, big).value_or(0);
        time.axis_exposed_s[i] = entry->number("exposed", Need::required, 0, big).value_or(0);
      }
    }
    time.tokens_per_s = p->number("tokens_per_s", Need::required, 0, big).value_or(0);
    time.mfu = p->number("mfu", Need::required, 0, big).value_or(0);
    time.hfu = p->number("hfu", Need::required, 0, big).value_or(0);
    time.model_flops_per_step = p->number("model_flops_per_step", Need::required, 0, big).value_or(0);
    time.hardware_flops_per_step = p->number("hardware_flops_per_step", Need::required, 0, big).value_or(0);
    out.time = time;
  }
  return out;
}

// The plan's own rules (validate_plan), named by plan-file key.
void validate_loaded(JsonObject& root, const PlanFile& file) {
  const std::int64_t seq_len = plan_seq_len(file.model, file.plan);
  if (seq_len < 1) return;
  const LayerGraph graph = build_layer_graph(file.model, seq_len);
  for (const auto& p : validate_plan(file.model, graph, file.cluster, Deployment{file.world_size, 0}, file.plan)) {
    if (p.severity != Severity::error) continue;
    root.problems().push_back({Severity::error, root.where(p.where == "world_size" ? "world_size" : "plan." + p.where),
                               p.message});
  }
}

}  // namespace

nlohmann::ordered_json model_to_json(const ModelSpec& model) {
  Json j;
  j["name"] = model.name;
  j["kind"] = to_string(model.kind);
  j["source"] = model.source;
  switch (model.kind) {
    case ModelKind::transformer: {
      const TransformerDims& t = model.transformer;
      j["layers"] = t.layers;
      j["hidden"] = t.hidden;
      j["heads"] = t.heads;
      j["kv_heads"] = t.kv_heads;
      if (t.latent_attention()) {  // the preset's fields; head_dim is their sum
        if (t.q_lora_rank > 0) j["q_lora_rank"] = t.q_lora_rank;
        j["kv_lora_rank"] = t.kv_lora_rank;
        j["qk_nope_head_dim"] = t.qk_nope_head_size();
        j["qk_rope_head_dim"] = t.qk_rope_head_dim;
        j["v_head_dim"] = t.v_head_dim;
      } else {
        j["head_dim"] = t.head_dim;
      }
      j["ffn"] = t.ffn;
      j["vocab"] = t.vocab;
      j["seq_len"] = t.seq_len;
      j["mlp"] = to_string(t.feed_forward);
      j["norm"] = to_string(t.norm);
      j["positions"] = to_string(t.positions);
      j["bias"] = t.bias;
      j["tied_embeddings"] = t.tied_embeddings;
      j["dropout"] = t.dropout;
      j["rope_theta"] = t.rope_theta;
      j["norm_eps"] = t.norm_eps;
      j["experts"] = t.experts;
      j["top_k"] = t.top_k;
      if (t.capacity_factor > 0) j["capacity_factor"] = t.capacity_factor;
      if (t.shared_expert_ffn > 0) j["shared_expert_ffn"] = t.shared_expert_ffn;
      if (t.expert_groups > 0) {
        j["expert_groups"] = t.expert_groups;
        j["group_top_k"] = t.group_top_k;
      }
      if (!t.dense_layers.empty()) j["dense_layers"] = t.dense_layers;
      if (t.dense_ffn > 0) j["dense_ffn"] = t.dense_ffn;
      break;
    }
    case ModelKind::mlp:
      j["layer_sizes"] = model.mlp.layer_sizes;
      j["activation"] = model.mlp.activation;
      break;
    case ModelKind::cnn: {
      const CnnDims& c = model.cnn;
      j["architecture"] = "resnet-bottleneck";
      j["image_size"] = c.image_size;
      j["channels"] = c.channels;
      j["stem_channels"] = c.stem_channels;
      j["stage_blocks"] = c.stage_blocks;
      j["stage_channels"] = c.stage_channels;
      j["expansion"] = c.expansion;
      j["classes"] = c.classes;
      break;
    }
  }
  return j;
}

nlohmann::ordered_json cluster_to_json(const ClusterSpec& cluster) {
  Json j;
  j["name"] = cluster.name;
  j["source"] = cluster.source;
  j["devices_per_node"] = cluster.devices_per_node;
  if (cluster.max_nodes) j["max_nodes"] = *cluster.max_nodes;
  j["intra_node"] = link_to_json(cluster.intra_node, false);
  j["inter_node"] = link_to_json(cluster.inter_node, true);
  j["device"] = device_to_json(cluster.device);
  return j;
}

PlanPrediction prediction_from(const Explanation& ex) {
  PlanPrediction p;
  p.fits_memory = ex.fits_memory();
  p.parameters = ex.parameter_count;
  if (ex.memory) {
    const StageMemory& worst = ex.memory->worst();
    p.worst_stage = worst.stage;
    p.parameters_per_device = worst.parameters_on_device;
    p.memory = worst.memory;
    p.capacity_bytes = ex.memory->capacity_bytes;
    p.usable_bytes = ex.memory->usable_bytes;
  }
  p.time = ex.time;
  return p;
}

nlohmann::ordered_json plan_file_to_json(const PlanFile& file) {
  Json j;
  j["version"] = file.version;
  j["model"] = model_to_json(file.model);
  j["cluster"] = cluster_to_json(file.cluster);
  j["world_size"] = file.world_size;
  Json plan = plan_to_json(file.plan);
  j["plan"] = plan;
  const PlanPrediction& p = file.prediction;
  Json prediction;
  prediction["fits_memory"] = p.fits_memory;
  prediction["parameters"] = whole_count(p.parameters);
  prediction["worst_stage"] = p.worst_stage;
  prediction["parameters_per_device"] = whole_count(p.parameters_per_device);
  prediction["memory_bytes"] = memory_to_json(p.memory);
  prediction["capacity_bytes"] = p.capacity_bytes;
  prediction["usable_bytes"] = p.usable_bytes;
  if (p.time) add_time_to_json(prediction, *p.time);
  j["prediction"] = prediction;
  return j;
}

PlanFile make_plan_file(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size, const Plan& plan,
                        const Explanation& explanation) {
  PlanFile file;
  file.model = model;
  file.cluster = cluster;
  file.world_size = world_size;
  file.plan = plan;
  file.prediction = prediction_from(explanation);
  return file;
}

Problems write_plan_file(const std::string& path, const ModelSpec& model, const ClusterSpec& cluster,
                         std::int64_t world_size, const Plan& plan, const Explanation& explanation) {
  if (!explanation.valid || !explanation.memory) {
    return {{Severity::error, path, "not written: the plan is not valid"}};
  }
  // Invalid UTF-8 in a preset's text (a `source` string) is replaced, not thrown.
  const std::string text = plan_file_to_json(make_plan_file(model, cluster, world_size, plan, explanation))
                               .dump(2, ' ', false, Json::error_handler_t::replace) +
                           "\n";
  return write_file_atomically(path, [&](std::ostream& out) { out << text; });
}

namespace {

Loaded<PlanFile> parse_plan_text(const std::string& json_text, const std::string& display_name);

// "<file> key 'plan.micro_batch'" -> "<file>:57 key 'plan.micro_batch'", where the key's line is known.
void add_key_lines(const std::string& json_text, const std::string& display_name, Problems& problems) {
  const std::string lead = display_name + " key '";
  std::optional<std::map<std::string, int>> lines;
  for (Problem& p : problems) {
    if (!p.where.starts_with(lead) || !p.where.ends_with('\'')) continue;
    if (!lines) lines = json_key_lines(json_text);
    std::string path = p.where.substr(lead.size(), p.where.size() - lead.size() - 1);
    // A key under an unknown or malformed one: the nearest enclosing key that is in the text.
    for (auto it = lines->find(path); !path.empty(); it = lines->find(path)) {
      if (it != lines->end()) {
        p.where = display_name + ":" + std::to_string(it->second) + p.where.substr(display_name.size());
        break;
      }
      const auto dot = path.find_last_of(".[");
      path = dot == std::string::npos ? "" : path.substr(0, dot);
    }
  }
}

}  // namespace

Loaded<PlanFile> parse_plan_file(const std::string& json_text, const std::string& display_name) {
  Loaded<PlanFile> result = parse_plan_text(json_text, display_name);
  add_key_lines(json_text, display_name, result.problems);
  return result;
}

namespace {

Loaded<PlanFile> parse_plan_text(const std::string& json_text, const std::string& display_name) {
  Loaded<PlanFile> result;
  Json j;
  try {
    j = Json::parse(json_text);
  } catch (const nlohmann::json::parse_error& e) {
    // "[json.exception.parse_error.101] parse error at line 3, column 5: syntax error ..." -> "file:3", the English.
    const std::size_t before = std::min<std::size_t>(e.byte > 0 ? e.byte - 1 : 0, json_text.size());
    const auto line = 1 + std::count(json_text.begin(), json_text.begin() + static_cast<std::ptrdiff_t>(before), '\n');
    std::string message = e.what();
    if (const auto colon = message.find(": "); message.find("parse error") != std::string::npos && colon != std::string::npos) {
      message = message.substr(colon + 2);
    }
    result.problems.push_back({Severity::error, display_name + ":" + std::to_string(line), "malformed JSON: " + message});
    return result;
  } catch (const nlohmann::json::exception&) {
    result.problems.push_back({Severity::error, display_name, "malformed JSON"});
    return result;
  }
  if (!j.is_object()) {
    result.problems.push_back({Severity::error, display_name, "expected a JSON object (a meshplan plan file), got " + type_name(j)});
    return result;
  }
  JsonObject root(j, display_name, "", result.problems);
  PlanFile& file = result.value;
  const auto version = root.integer("version", Need::required, 0, std::numeric_limits<int>::max());
  if (!version) return result;
  if (*version != plan_file_version) {
    root.add_problem("version", "version " + std::to_string(*version) + " is not supported (this meshplan reads version " +
                                    std::to_string(plan_file_version) + ")");
    return result;
  }
  file.version = static_cast<int>(*version);
  file.model = read_model_object(root);
  file.cluster = read_cluster_object(root);
  file.world_size = root.integer("world_size", Need::required, 1, kMaxMeshDevices).value_or(0);
  std::optional<std::int64_t> micro_batches;
  file.plan = read_plan_object(root, micro_batches);
  file.prediction = read_prediction(root);
  root.finish();
  if (!has_errors(result.problems)) validate_loaded(root, file);
  // After validation, which says first when the batch does not split or the mesh is not world_size.
  if (micro_batches && !has_errors(result.problems) && *micro_batches != file.plan.micro_batches()) {
    result.problems.push_back({Severity::error, root.where("plan.micro_batches"),
                               std::to_string(*micro_batches) +
                                   " does not match global_batch / (micro_batch x dp x fsdp x ep) = " +
                                   std::to_string(file.plan.micro_batches())});
  }
  return result;
}

}  // namespace

Loaded<PlanFile> read_plan_file(const std::string& path) {
  if (const auto why = why_unreadable(path)) return {{}, {{Severity::error, path, *why}}};
  std::ifstream in(path, std::ios::binary);
  if (!in) return {{}, {{Severity::error, path, "cannot open file"}}};
  std::ostringstream text;
  text << in.rdbuf();
  return parse_plan_file(text.str(), path);
}

}  // namespace meshplan
