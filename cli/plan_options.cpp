#include "cli/plan_options.hpp"

#include <algorithm>
#include <cctype>

#include "model/mesh.hpp"

namespace meshplan::cli {

void add_plan_flags(CLI::App& command, PlanFlags& f) {
  command.add_option("--model", f.model, "Model preset name or YAML file (meshplan presets lists them)")
      ->capture_default_str();
  command.add_option("--cluster", f.cluster, "Cluster preset name or YAML file")->capture_default_str();
  command.add_option("--gpus", f.gpus, "Devices in the job (world size)")->capture_default_str();
  auto* mesh = command.add_option("--mesh", f.mesh,
                                  "Mesh axes outermost first, e.g. dp=16,pp=8,tp=8 (axes dp fsdp tp pp cp ep; "
                                  "the last axis varies fastest and stays inside a node)")
                   ->capture_default_str();
  command.add_option("--mesh-shape", f.mesh_shape, "Mesh as the seeds write it: '[[4,2],[\"fsdp\",\"tp\"]]'")
      ->excludes(mesh);
  command.add_option("--micro-batch", f.micro_batch, "Sequences per micro-batch per data-parallel rank")
      ->capture_default_str();
  command.add_option("--global-batch", f.global_batch, "Sequences per optimizer step across all ranks")
      ->capture_default_str();
  command.add_option("--seq", f.seq, "Training sequence length (default: the model's seq_len)");
  command.add_option("--zero", f.zero, "ZeRO stage on dp: 0-3, or auto (1 when dp x ep > 1, else 0)")->capture_default_str();
  command.add_option("--recompute", f.recompute, "Activation recomputation: none, selective, full")
      ->capture_default_str();
  command.add_option("--attention", f.attention,
                     "Attention kernels: fused (FlashAttention / cuDNN / SDPA: no s x s tensors) or unfused")
      ->capture_default_str();
  auto* sp = command.add_flag("--sequence-parallel", f.sequence_parallel,
                              "Sequence parallelism in tp regions (default: on for transformers with tp > 1)");
  command.add_flag("--no-sequence-parallel", f.no_sequence_parallel, "Turn sequence parallelism off")->excludes(sp);
  command.add_option("--schedule", f.schedule, "Pipeline schedule: gpipe, 1f1b, interleaved:<v>, zb-h1")
      ->capture_default_str();
  command.add_option("--precision", f.precision, "fp32, bf16, fp16, fp8, or auto (bf16 where the device has it)")
      ->capture_default_str();
  command.add_option("--stage-layers", f.stage_layers,
                     "Layers per pipeline chunk when uneven, e.g. 13,12,12,11 (pp x v entries)");
  command.add_option("--headroom", f.headroom, "Fraction of device memory kept free")->capture_default_str();
  command.add_option("--rank", f.rank, "Report this rank's device instead of the worst one");
}

std::string flag_for_field(const std::string& field) {
  if (field.starts_with("mesh")) return "--mesh";
  static const std::pair<const char*, const char*> table[] = {
      {"global_batch", "--global-batch"}, {"micro_batch", "--micro-batch"},   {"seq_len", "--seq"},
      {"zero", "--zero"},                 {"recompute", "--recompute"},       {"schedule", "--schedule"},
      {"precision", "--precision"},       {"stage_layers", "--stage-layers"}, {"memory_headroom", "--headroom"},
      {"rank", "--rank"},                 {"world_size", "--gpus"},           {"sequence_parallel", "--sequence-parallel"},
      {"attention", "--attention"},
  };
  for (const auto& [name, flag] : table) {
    if (field == name) return flag;
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
  in.deployment.rank = f.rank >= 0 ? f.rank : 0;
  if (f.gpus < 1) problems.push_back({Severity::error, "--gpus", "must be at least 1, got " + std::to_string(f.gpus)});

  Plan& plan = in.plan;
  auto mesh = f.mesh_shape.empty() ? parse_mesh(f.mesh, "--mesh") : parse_mesh_shape(f.mesh_shape, "--mesh-shape");
  problems.insert(problems.end(), mesh.problems.begin(), mesh.problems.end());
  plan.mesh = mesh.value;
  plan.micro_batch = f.micro_batch;
  plan.global_batch = f.global_batch;
  plan.seq_len = f.seq;
  if (f.seq < 0) problems.push_back({Severity::error, "--seq", "must be positive"});

  if (f.zero == "auto") {
    plan.zero_stage = plan.mesh.size(Axis::dp) * plan.mesh.size(Axis::ep) > 1 ? 1 : 0;
  } else if (f.zero.size() == 1 && f.zero[0] >= '0' && f.zero[0] <= '3') {
    plan.zero_stage = f.zero[0] - '0';
  } else {
    problems.push_back({Severity::error, "--zero", "'" + f.zero + "' is not one of: 0, 1, 2, 3, auto"});
  }
  if (auto r = parse_recompute(f.recompute)) {
    plan.recompute = *r;
  } else {
    problems.push_back({Severity::error, "--recompute",
                        "'" + f.recompute + "' is not one of: " + std::string(recompute_choices)});
  }
  if (auto a = parse_attention(f.attention)) {
    plan.attention = *a;
  } else {
    problems.push_back({Severity::error, "--attention",
                        "'" + f.attention + "' is not one of: " + std::string(attention_choices)});
  }
  if (auto s = parse_schedule(f.schedule)) {
    plan.schedule = *s;
  } else {
    problems.push_back({Severity::error, "--schedule",
                        "'" + f.schedule + "' is not one of: " + std::string(schedule_choices)});
  }
  if (f.precision == "auto") {
    plan.precision = cluster.ok() && cluster.value.device.peak_for(Dtype::bf16) ? Precision::bf16 : Precision::fp32;
  } else if (auto p = parse_precision(f.precision)) {
    plan.precision = *p;
  } else {
    problems.push_back({Severity::error, "--precision",
                        "'" + f.precision + "' is not one of: " + std::string(precision_choices) + ", auto"});
  }
  if (f.sequence_parallel) {
    plan.sequence_parallel = true;
  } else if (!f.no_sequence_parallel) {
    plan.sequence_parallel = model.ok() && in.model.kind == ModelKind::transformer && plan.mesh.size(Axis::tp) > 1;
  }
  if (!f.stage_layers.empty()) {
    std::string text = f.stage_layers;
    std::replace(text.begin(), text.end(), ',', ' ');
    std::size_t pos = 0;
    while (pos < text.size()) {
      while (pos < text.size() && text[pos] == ' ') ++pos;
      std::size_t end = pos;
      while (end < text.size() && std::isdigit(static_cast<unsigned char>(text[end]))) ++end;
      if (pos == text.size()) break;
      if (end == pos || (end < text.size() && text[end] != ' ') || end - pos > 9) {
        problems.push_back({Severity::error, "--stage-layers", "expected whole numbers separated by commas, e.g. 13,12,12,11"});
        plan.stage_layers.clear();
        break;
      }
      plan.stage_layers.push_back(std::stoll(text.substr(pos, end - pos)));
      pos = end;
    }
  }
  plan.memory_headroom = f.headroom;
  if (!(f.headroom >= 0 && f.headroom < 1)) {
    problems.push_back({Severity::error, "--headroom", "must be a fraction in [0, 1)"});
  }
  return result;
}

}  // namespace meshplan::cli
