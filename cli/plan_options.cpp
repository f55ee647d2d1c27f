#include "cli/plan_options.hpp"

#include <algorithm>
#include <cctype>
#include <set>

#include <cstdio>

#include "cli/search_options.hpp"
#include "cli/text_report.hpp"
#include "model/default_batch.hpp"
#include "model/evaluate.hpp"
#include "model/fit_search.hpp"
#include "model/layer_graph.hpp"
#include "model/mesh.hpp"
#include "model/plan_defaults.hpp"
#include "model/suggest.hpp"
#include "model/validate.hpp"

namespace meshplan::cli {

CLI::Validator sequence_length_check() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        std::int64_t tokens = 0;
        if (!CLI::detail::lexical_cast(value, tokens) || tokens < 1 || tokens > kMaxSeqLen) {
          return value + " is not a sequence length: give a whole number of tokens from 1 to 2^40";
        }
        return {};
      },
      "TOKENS");
}

void add_plan_flags(CLI::App& command, PlanFlags& f) {
  command.add_option("--model", f.model, "Model preset name or YAML file (meshplan presets lists them)")
      ->capture_default_str();
  command.add_option("--cluster", f.cluster, "Cluster preset name or YAML file")->capture_default_str();
  command.add_option("--gpus", f.gpus, "Devices in the job (world size, 1 to " + std::to_string(kMaxMeshDevices) + ")")->capture_default_str();
  auto* mesh = command.add_option("--mesh", f.mesh,
                                  "Mesh axes outermost first, e.g. dp=16,pp=8,tp=8 (axes dp fsdp tp pp cp ep; "
                                  "the last axis varies fastest and stays inside a node). Default: the plan the "
                                  "search ranks first (meshplan plan), with the other plan flags given held fixed");
  command.add_option("--mesh-shape", f.mesh_shape, "Mesh as a JAX-style mesh_shape (sizes, then axis names): '[[4,2],[\"fsdp\",\"tp\"]]'")
      ->excludes(mesh);
  command.add_option("--micro-batch", f.micro_batch,
                     "Sequences per micro-batch per data-parallel rank (default: 1 with --mesh, else searched)");
  command.add_option("--global-batch", f.global_batch,
                     "Sequences per optimizer step across all ranks (default: GPT-3's batch in tokens for the "
                     "nearest GPT-3 size / the sequence length, 256 samples for MLPs and CNNs, at least one per "
                     "device)");
  command.add_option("--seq", f.seq, "Training sequence length (default: the model's seq_len)")
      ->check(sequence_length_check());
  command.add_option("--zero", f.zero, "ZeRO stage on dp: 0-3, or auto (with --mesh: 1 when dp x ep > 1, else 0; "
                                       "without: searched)")->capture_default_str();
  command.add_option("--recompute", f.recompute,
                     "Activation recomputation: none, selective (attention core), full (each layer from its input), selective-op "
                     "(torchtitan's op-level checkpointing; transformers) (default with --mesh: selective for transformers, "
                     "none for MLPs and CNNs; else searched)");
  command.add_option("--attention", f.attention,
                     "Attention kernels: fused (FlashAttention / cuDNN / SDPA: no s x s tensors) or unfused")
      ->capture_default_str();
  add_fixed_plan_flags(command, f.cp_comm, f.loss, f.fp32_gradients, f.bf16_moments, f.overlaps, f.ep_dispatch);
  add_recompute_modules_flag(command, f.recompute_modules);
  auto* sp = command.add_flag("--sequence-parallel", f.sequence_parallel,
                              "Sequence parallelism in tp regions (default: on for transformers with tp > 1)");
  command.add_flag("--no-sequence-parallel", f.no_sequence_parallel, "Turn sequence parallelism off")->excludes(sp);
  command.add_option("--expert-tp", f.expert_tp,
                     "Routed experts' tensor parallelism (Megatron-Core's --expert-tensor-parallel-size): tp (split "
                     "over tp like the dense layers) or 1 (each expert whole; the tp ranks join the expert-parallel "
                     "group, ep x tp; needs sequence parallelism and ep directly outside tp in --mesh) (default with "
                     "--mesh: tp; else searched)");
  command.add_option("--schedule", f.schedule,
                     "Pipeline schedule: gpipe, 1f1b, interleaved:<v>, zb-h1 (default: 1f1b with --mesh, else searched)");
  command.add_option("--precision", f.precision, "fp32, bf16, fp16, fp8, or auto (bf16 where the device has it)")
      ->capture_default_str();
  command.add_option("--stage-layers", f.stage_layers,
                     "Layers per pipeline chunk when uneven, e.g. 13,12,12,11 (pp x v entries; needs --mesh)");
  command.add_option("--headroom", f.headroom, "Fraction of device memory kept free")->capture_default_str();
  command.add_option("--rank", f.rank, "Report this rank's device instead of the worst one");
}

namespace {

// A flag's value that must be one of `choices`, or an error naming them.
template <class T>
std::optional<T> parse_choice_flag(const std::string& text, const char* flag, std::string_view choices,
                                   std::optional<T> (*parse)(std::string_view), Problems& problems) {
  const auto value = parse(text);
  if (!value) {
    problems.push_back({Severity::error, flag,
                        "'" + text + "' is not one of: " + std::string(choices) + did_you_mean(text, choice_words(choices))});
  }
  return value;
}

}  // namespace

std::optional<CpComm> parse_cp_comm_flag(const std::string& text, Problems& problems) {
  return parse_choice_flag<CpComm>(text, "--cp-comm", cp_comm_choices, parse_cp_comm, problems);
}

std::optional<Loss> parse_loss_flag(const std::string& text, Problems& problems) {
  return parse_choice_flag<Loss>(text, "--loss", loss_choices, parse_loss, problems);
}

std::optional<EpDispatch> parse_ep_dispatch_flag(const std::string& text, Problems& problems) {
  return parse_choice_flag<EpDispatch>(text, "--ep-dispatch", ep_dispatch_choices, parse_ep_dispatch, problems);
}

void add_fixed_plan_flags(CLI::App& command, std::string& cp_comm, std::string& loss, bool& fp32_gradients,
                          bool& bf16_moments, OverlapWanted& overlaps, std::string& ep_dispatch) {
  command.add_option("--ep-dispatch", ep_dispatch,
                     "How routed tokens reach their experts across nodes: all-to-all (NCCL; a token crosses once per "
                     "expert on another node) or deduplicated (DeepEP, Megatron-Core's flex dispatcher: once per other "
                     "node holding any of its experts, then NVLink)")
      ->capture_default_str();
  command.add_option("--cp-comm", cp_comm,
                     "How context parallelism moves keys and values: ring (ring attention, hidden under the attention), "
                     "all-gather (Llama 3: gathered before the attention, exposed) or all-to-all (DeepSpeed-Ulysses: "
                     "heads regrouped, exposed)")
      ->capture_default_str();
  command.add_option("--loss", loss,
                     "How the cross-entropy runs: eager (PyTorch's fp32 log_softmax: fp32 log-probabilities kept, two "
                     "fp32 gradients at its backward) or fused (torch.compile, Megatron's --cross-entropy-loss-fusion, "
                     "Liger: the logits kept in their own dtype); memory only")
      ->capture_default_str();
  command.add_flag("--fp32-gradients", fp32_gradients,
                   "Gradients accumulated and reduced across data-parallel ranks in fp32 (Megatron-LM's default for "
                   "bf16, torchtitan's mixed_precision_reduce = float32): 4 bytes per parameter in memory and on the "
                   "wire instead of 2");
  command.add_flag("--bf16-moments", bf16_moments,
                   "Adam's two moments kept in bf16 beside fp32 master weights (Megatron-Core's precision-aware "
                   "optimizer, --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; DeepSeek-V3): 4 bytes per parameter of "
                   "optimizer state fewer");
  for (const OverlapSwitch& s : kOverlapSwitches) {
    command.add_flag(std::string(s.flag), overlaps.*s.wanted, std::string(s.help));
  }
}

void add_recompute_modules_flag(CLI::App& command, std::optional<std::string>& modules) {
  command.add_option("--recompute-modules", modules,
                     "What selective recompute repeats, Megatron-Core's --recompute-modules: core_attn (the attention "
                     "core, the default), layernorm (the pre-norms' outputs), mla_up_proj (latent attention's "
                     "up-projections), moe_act (the experts' activation), mlp (a dense MLP whole), shared_experts (the "
                     "shared experts whole), comma-separated; implies --recompute "
                     "selective on explain and simulate");
}

std::optional<RecomputeModules> parse_recompute_modules_flag(const std::optional<std::string>& text, Problems& problems) {
  if (!text) return std::nullopt;
  std::string bad;
  const auto modules = parse_recompute_modules(*text, bad);
  if (!modules) {
    problems.push_back({Severity::error, "--recompute-modules", recompute_modules_problem(bad)});
  }
  return modules;
}

std::string flag_for_field(const std::string& field) {
  if (field.starts_with("mesh")) return "--mesh";
  static const std::pair<const char*, const char*> table[] = {
      {"global_batch", "--global-batch"}, {"micro_batch", "--micro-batch"},   {"seq_len", "--seq"},
      {"zero", "--zero"},                 {"recompute", "--recompute"},       {"schedule", "--schedule"},
      {"precision", "--precision"},       {"stage_layers", "--stage-layers"}, {"memory_headroom", "--headroom"},
      {"rank", "--rank"},                 {"world_size", "--gpus"},           {"sequence_parallel", "--sequence-parallel"},
      {"attention", "--attention"},       {"cp_comm", "--cp-comm"},
      {"fp32_gradients", "--fp32-gradients"}, {"bf16_moments", "--bf16-moments"}, {"loss", "--loss"},
      {"recompute_modules", "--recompute-modules"},
      {"expert_tensor_parallel", "--expert-tp"}, {"ep_dispatch", "--ep-dispatch"},
  };
  for (const auto& [name, flag] : table) {
    if (field == name) return flag;
  }
  for (const OverlapSwitch& s : kOverlapSwitches) {
    if (field == s.key) return std::string(s.flag);
  }
  return field;
}

namespace {

void add_problems(Problems& into, const Problems& from, const std::string& flag) {
  for (auto p : from) {
    p.where = flag + " " + p.where;
    into.push_back(std::move(p));
  }
}

std::string gib_text(double bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f GiB", bytes / (1024.0 * 1024 * 1024));
  return text;
}

// job_problems (model/validate.hpp) before the search builds a topology for
// --gpus devices, named by flag.
Problems plannable(const ModelSpec& model, const ClusterSpec& cluster, const PlanFlags& f, Precision precision) {
  const std::int64_t seq_len = f.seq > 0 ? f.seq : model.default_seq_len();
  Problems problems = job_problems(model, build_layer_graph(model, seq_len), cluster, f.gpus, f.seq, precision);
  for (Problem& p : problems) p.where = flag_for_field(p.where);
  return problems;
}

// No --mesh: the plan the search ranks first, or (when none fits) the
// candidate needing the least memory, so that explain shows how far it is.
void search_default_plan(PlanInputs& in, Problems& problems, const PlanFlags& f) {
  const std::int64_t seq_len = f.seq > 0 ? f.seq : in.model.default_seq_len();
  const Evaluator evaluator(in.model, in.cluster, f.gpus, seq_len);
  const BestPlans best = best_plans(evaluator, in.plan.global_batch, in.space);
  const Candidate* chosen = best.fastest ? &*best.fastest : best.smallest_peak ? &*best.smallest_peak : nullptr;
  if (!chosen) {
    std::string axes;
    for (Axis a : in.space.axes) axes += (axes.empty() ? "" : ",") + to_string(a);
    problems.push_back({Severity::error, "--mesh",
                        "not given, and no plan the search tries (axes " + axes + ") is valid for " +
                            std::to_string(f.gpus) + " devices and global batch " +
                            std::to_string(in.plan.global_batch) + "; give --mesh or another --global-batch"});
    return;
  }
  const std::vector<std::int64_t> stage_layers = in.plan.stage_layers;
  in.plan = chosen->plan;
  in.plan.seq_len = f.seq;
  if (!stage_layers.empty()) in.plan.stage_layers = stage_layers;  // else the searched split (uneven where it must be)
  in.mesh_searched = true;
  if (best.fastest) {
    in.notes.push_back("no --mesh: using the plan the search ranks first of " + std::to_string(best.stats.feasible) +
                       " that fit (" + describe_plan_briefly(in.plan) + "); give --mesh to explain another");
  } else {
    in.notes.push_back("no --mesh: no plan the search tries fits; showing the one that needs the least memory (" +
                       gib_text(chosen->estimate.worst_memory.total_bytes()) + " per device: " + describe_plan_briefly(in.plan) +
                       ")");
  }
}

// --recompute, --attention, --schedule and --precision: the plan's value
// and, where given, the search's only choice.
void resolve_choices(const PlanFlags& f, const ClusterSpec* cluster, PlanInputs& in, Problems& problems) {
  Plan& plan = in.plan;
  SearchSpace& space = in.space;
  const auto modules = parse_recompute_modules_flag(f.recompute_modules, problems);
  const std::string recompute = f.recompute.value_or(
      modules ? to_string(Recompute::selective) : to_string(default_recompute(in.model.kind)));
  if (auto r = parse_choice_flag<Recompute>(recompute, "--recompute", recompute_choices, parse_recompute, problems)) {
    plan.recompute = *r;
    if (f.recompute || modules) space.recomputes = {*r};
  }
  if (modules) {
    plan.recompute_modules = space.recompute_modules = *modules;
    if (plan.recompute != Recompute::selective) {
      problems.push_back({Severity::error, "--recompute-modules",
                          "names what selective recompute repeats; --recompute is " + to_string(plan.recompute)});
    }
  }
  if (auto a = parse_choice_flag<Attention>(f.attention, "--attention", attention_choices, parse_attention, problems)) {
    plan.attention = *a;
    space.attentions = {*a};
  }
  if (auto c = parse_cp_comm_flag(f.cp_comm, problems)) plan.cp_comm = space.cp_comm = *c;
  if (auto l = parse_loss_flag(f.loss, problems)) plan.loss = space.loss = *l;
  if (auto d = parse_ep_dispatch_flag(f.ep_dispatch, problems)) plan.ep_dispatch = space.ep_dispatch = *d;
  plan.fp32_gradients = space.fp32_gradients = f.fp32_gradients;
  plan.bf16_moments = space.bf16_moments = f.bf16_moments;
  space.overlaps = f.overlaps;
  for (const OverlapSwitch& s : kOverlapSwitches) plan.*s.field = f.overlaps.*s.wanted;  // as asked: validation says where it cannot apply
  if (f.expert_tp) {
    if (auto e = parse_choice_flag<std::int64_t>(*f.expert_tp, "--expert-tp", expert_tp_choices, parse_expert_tp, problems)) {
      plan.expert_tensor_parallel = *e;
      space.expert_tensor_parallel = {*e};
    }
  }
  const std::string schedule = f.schedule.value_or("1f1b");
  if (auto s = parse_schedule(schedule)) {
    plan.schedule = *s;
    if (f.schedule) {
      space.schedules = {s->kind};
      if (s->kind == ScheduleKind::interleaved) space.interleave = {s->virtual_stages};
    }
  } else {
    problems.push_back({Severity::error, "--schedule",
                        "'" + schedule + "' is not one of: " + std::string(schedule_choices) +
                            did_you_mean(schedule, choice_words(schedule_choices))});
  }
  if (f.precision == "auto") {
    plan.precision = cluster != nullptr && cluster->device.peak_for(Dtype::bf16) ? Precision::bf16 : Precision::fp32;
  } else if (auto p = parse_precision(f.precision)) {
    plan.precision = *p;
  } else {
    problems.push_back({Severity::error, "--precision",
                        "'" + f.precision + "' is not one of: " + std::string(precision_choices) + ", auto" +
                            did_you_mean(f.precision, choice_words(std::string(precision_choices) + ", auto"))});
  }
}

// A flag refused above stops explain and simulate before the plan is
// validated, so `--headroom 2 --global-batch 0` named only the headroom. With
// the model, cluster, mesh and sequence readable, the plan's own errors are
// added too (a flag already named is not named twice): one run lists all.
void add_plan_problems_beside_flag_problems(const PlanInputs& in, const PlanFlags& f, Problems& problems) {
  if (!has_errors(problems) || f.seq < 0 || in.plan.mesh.axes.empty()) return;
  std::set<std::string> named;
  for (const Problem& p : problems) {
    if (p.severity == Severity::error) named.insert(p.where);
  }
  for (const char* unreadable : {"--mesh", "--mesh-shape", "--seq"}) {
    for (const std::string& where : named) {
      if (where.starts_with(unreadable)) return;
    }
  }
  const LayerGraph graph = build_layer_graph(in.model, plan_seq_len(in.model, in.plan));
  for (Problem p : validate_plan(in.model, graph, in.cluster, in.deployment, in.plan)) {
    if (p.severity != Severity::error) continue;
    p.where = flag_for_field(p.where);
    if (named.insert(p.where).second) problems.push_back(p);
  }
}

}  // namespace

Loaded<PlanInputs> resolve_plan_flags(const PlanFlags& f) {
  Loaded<PlanInputs> result;
  Problems& problems = result.problems;
  PlanInputs& in = result.value;

  auto model = load_model(f.model);
  add_problems(problems, model.problems, "--model");
  in.model = model.value;
  auto cluster = load_cluster(f.cluster);
  add_problems(problems, cluster.problems, "--cluster");
  in.cluster = cluster.value;

  in.deployment.world_size = f.gpus;
  in.deployment.rank = f.rank.value_or(0);  // a typed rank out of [0, world size) is refused by validate_plan
  if (f.gpus < 1 || f.gpus > kMaxMeshDevices) {
    problems.push_back({Severity::error, "--gpus",
                        "must be between 1 and " + std::to_string(kMaxMeshDevices) + ", got " + std::to_string(f.gpus)});
  }

  Plan& plan = in.plan;
  SearchSpace& space = in.space;
  space.axes = default_search_axes(in.model);
  const bool search_mesh = !f.mesh && f.mesh_shape.empty();
  if (!search_mesh) {
    auto mesh = f.mesh_shape.empty() ? parse_mesh(*f.mesh, "--mesh") : parse_mesh_shape(f.mesh_shape, "--mesh-shape");
    problems.insert(problems.end(), mesh.problems.begin(), mesh.problems.end());
    plan.mesh = mesh.value;
  }
  plan.micro_batch = f.micro_batch.value_or(1);
  if (f.micro_batch) {
    space.micro_batches = {*f.micro_batch};
    if (search_mesh && *f.micro_batch < 1) {
      problems.push_back({Severity::error, "--micro-batch", "must be at least 1, got " + std::to_string(*f.micro_batch)});
    }
  }
  plan.seq_len = f.seq;
  if (f.seq < 0) problems.push_back({Severity::error, "--seq", "must be positive"});

  std::optional<int> zero;
  if (f.zero.size() == 1 && f.zero[0] >= '0' && f.zero[0] <= '3') {
    zero = f.zero[0] - '0';
    space.zero_stages = {*zero};
    // dp with ZeRO-3 is what fsdp is: the search leaves fsdp out so as not to try each plan twice.
    if (*zero == 3) std::erase(space.axes, Axis::fsdp);
  } else if (f.zero != "auto") {
    problems.push_back({Severity::error, "--zero", "'" + f.zero + "' is not one of: 0, 1, 2, 3, auto"});
  }
  resolve_choices(f, cluster.ok() ? &cluster.value : nullptr, in, problems);
  space.precisions = {plan.precision};
  if (f.sequence_parallel || f.no_sequence_parallel) space.sequence_parallel = {f.sequence_parallel};
  if (!f.stage_layers.empty()) {
    auto layers = parse_int_list(f.stage_layers, "--stage-layers", 1, std::int64_t{1} << 20, true);
    problems.insert(problems.end(), layers.problems.begin(), layers.problems.end());
    plan.stage_layers = layers.value;
    if (search_mesh) {
      problems.push_back({Severity::error, "--stage-layers", "needs --mesh (uneven stages are laid out over its pp)"});
    }
  }
  plan.memory_headroom = f.headroom;
  space.memory_headroom = f.headroom;
  if (!(f.headroom >= 0 && f.headroom < 1)) {
    problems.push_back({Severity::error, "--headroom", "must be a fraction in [0, 1)"});
  }

  if (f.global_batch) {
    plan.global_batch = *f.global_batch;
  } else if (model.ok() && f.seq >= 0) {
    const std::int64_t seq_len = f.seq > 0 ? f.seq : in.model.default_seq_len();
    const DefaultBatch batch = default_global_batch(
        in.model, build_layer_graph(in.model, seq_len).parameter_count(), seq_len, std::max<std::int64_t>(f.gpus, 1));
    plan.global_batch = batch.sequences;
    in.notes.push_back("no --global-batch: using " + std::to_string(batch.sequences) + " (" + batch.rule + ")");
  }

  if (search_mesh && !has_errors(problems)) {
    const Problems unplannable = plannable(in.model, in.cluster, f, plan.precision);
    problems.insert(problems.end(), unplannable.begin(), unplannable.end());
    if (!has_errors(problems)) {
      if (plan.global_batch < 1) {
        problems.push_back({Severity::error, "--global-batch", "must be at least 1, got " + std::to_string(plan.global_batch)});
      } else if (const std::string large = batch_size_problem(plan.global_batch); !large.empty()) {
        problems.push_back({Severity::error, "--global-batch", large});  // before the search, which ran on it
      } else {
        search_default_plan(in, problems, f);
      }
    }
  }
  if (!search_mesh) {
    // The defaults of model/plan_defaults.hpp for what the flags left open.
    plan.zero_stage = zero ? *zero : default_zero_stage(plan.mesh);
    if (f.sequence_parallel) {
      plan.sequence_parallel = true;
    } else if (!f.no_sequence_parallel) {
      plan.sequence_parallel = model.ok() && default_sequence_parallel(in.model.kind, plan.mesh, plan_seq_len(in.model, plan));
    }
  }
  if (!search_mesh && model.ok() && cluster.ok()) add_plan_problems_beside_flag_problems(in, f, problems);
  return result;
}

}  // namespace meshplan::cli
