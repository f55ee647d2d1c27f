// The writers of export.hpp. Each first collects what the framework cannot
// express (errors) and what it expresses only approximately (warnings, also
// written into the output as comments where the format has them), then writes
// the fields in the framework's own names (docs/export.md cites them).
#include "model/export.hpp"

#include <nlohmann/json.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <sstream>

#include "model/explain.hpp"
#include "model/plan_defaults.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

struct Writer {
  const PlanFile& file;
  Problems problems;
  std::vector<std::string> notes;  // the warnings, for comments in the output

  const Plan& plan() const { return file.plan; }
  const Mesh& mesh() const { return file.plan.mesh; }
  std::int64_t size(Axis axis) const { return file.plan.mesh.size(axis); }
  void error(const std::string& field, const std::string& message) { problems.push_back({Severity::error, field, message}); }
  void warning(const std::string& field, const std::string& message) {
    problems.push_back({Severity::warning, field, message});
    notes.push_back(field + ": " + message);
  }
  bool transformer(const std::string& framework) {
    if (file.model.kind == ModelKind::transformer) return true;
    error("model.kind", framework + " trains transformers; this plan's model is " + to_string(file.model.kind));
    return false;
  }
  std::int64_t seq_len() const { return plan_seq_len(file.model, plan()); }
  // Layers per pipeline chunk when they divide evenly (stage_partition.hpp's even split), else 0.
  std::int64_t layers_per_chunk() const {
    const std::int64_t chunks = size(Axis::pp) * plan().schedule.virtual_stages;
    const std::int64_t layers = file.model.transformer.layers;
    return chunks > 0 && layers % chunks == 0 ? chunk_layers(layers, chunks, {}, 0) : 0;
  }
  std::string header(const std::string& comment, const std::string& framework) const {
    std::string h = comment + " " + framework + " for " + file.model.name + " on " + mesh().to_string() + " (" +
                    std::to_string(mesh().world_size()) + " devices), written by `meshplan export` (docs/export.md)\n";
    for (const std::string& note : notes) h += comment + " approximate: " + note + "\n";
    return h;
  }
};

std::string number_text(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

// ---- Megatron-LM

// What Megatron-LM cannot run (errors) or runs only approximately (warnings).
void megatron_checks(Writer& w) {
  const Plan& plan = w.plan();
  const TransformerDims& t = w.file.model.transformer;
  if (w.size(Axis::fsdp) > 1 || plan.zero_stage == 3) {
    w.error(w.size(Axis::fsdp) > 1 ? "mesh.fsdp" : "zero", "Megatron-LM's distributed optimizer shards optimizer state and reduce-scatters gradients "
                         "(ZeRO-1/2); sharded parameters (fsdp, ZeRO-3) are not exported to it: use --to torchtitan");
  }
  if (plan.schedule.kind == ScheduleKind::gpipe || plan.schedule.kind == ScheduleKind::zb_h1) {
    w.error("schedule", "Megatron-LM runs 1F1B and interleaved 1F1B; " + to_string(plan.schedule) + " is not one of them");
  }
  if (plan.stage_layers.empty() && w.size(Axis::pp) > 1 && w.layers_per_chunk() == 0) {
    w.error("mesh.pp", "pp x virtual stages do not divide the " + std::to_string(t.layers) + " layers evenly (state "
                       "the partition with stage_layers: it is written as --pipeline-model-parallel-layout)");
  }
  if (t.feed_forward == FeedForward::geglu) {
    w.error("model.mlp", "GeGLU: Megatron-LM's command line has --swiglu but no gated GELU");
  }
  if (plan.zero_stage == 2) {
    w.warning("zero", "Megatron-LM's distributed optimizer reduce-scatters the gradients but keeps the whole "
                      "gradient buffer: ZeRO-1's memory, not ZeRO-2's");
  }
  if (plan.precision == Precision::fp8) {
    w.warning("precision", "fp8: --fp8-format hybrid needs Transformer Engine; the other tensors stay bf16");
  }
  if (expert_split(plan).tokens > 1 && w.size(Axis::cp) > 1) {
    w.warning("expert_tensor_parallel", "experts out of tp with cp > 1: Megatron-Core orders ranks tp, cp, ep, dp and "
                                        "takes its expert groups from consecutive ranks, so they span cp ranks, not "
                                        "this plan's ep x tp");
  }
}

// Megatron-LM's command line, one flag and its value (empty for a switch) at a time.
struct MegatronArgs {
  std::vector<std::pair<std::string, std::string>> args;
  void operator()(const std::string& flag, const std::string& value = "") { args.push_back({flag, value}); }
  static std::string count(std::int64_t n) { return std::to_string(n); }
};

// Uneven chunks as Megatron-Core's --pipeline-model-parallel-layout ("Custom Pipeline Model Parallel
// Layout", Megatron-LM docs, experimental): the chunks in model order separated by '|', chunk c on
// pipeline rank c mod pp (meshplan's order too, stage_partition.hpp), "t*n" for n decoder layers, the
// embedding (E) in the first chunk and the loss (L) in the last, where meshplan places them.
std::string megatron_layout(const std::vector<std::int64_t>& layers_per_chunk) {
  std::string layout;
  for (std::size_t c = 0; c < layers_per_chunk.size(); ++c) {
    if (c > 0) layout += "|";
    if (c == 0) layout += "E";
    if (layers_per_chunk[c] > 0) layout += "t*" + std::to_string(layers_per_chunk[c]);
    if (c + 1 == layers_per_chunk.size()) layout += "L";
  }
  return layout;
}

// The mesh, the batch, recomputation and precision.
void megatron_parallelism_and_training(Writer& w, MegatronArgs& arg) {
  const Plan& plan = w.plan();
  auto count = MegatronArgs::count;
  arg("--tensor-model-parallel-size", count(w.size(Axis::tp)));
  arg("--pipeline-model-parallel-size", count(w.size(Axis::pp)));
  if (!plan.stage_layers.empty()) {
    arg("--pipeline-model-parallel-layout", "\"" + megatron_layout(plan.stage_layers) + "\"");
  } else if (plan.schedule.kind == ScheduleKind::interleaved) {
    arg("--num-layers-per-virtual-pipeline-stage", count(w.layers_per_chunk()));
  }
  if (w.size(Axis::cp) > 1) {
    arg("--context-parallel-size", count(w.size(Axis::cp)));
    arg("--cp-comm-type", plan.cp_comm == CpComm::ring ? "p2p" : plan.cp_comm == CpComm::all_gather ? "allgather" : "a2a");
  }
  const ExpertSplit experts = expert_split(plan);
  if (experts.ep > 1) arg("--expert-model-parallel-size", count(experts.ep));
  if (experts.tokens > 1) arg("--expert-tensor-parallel-size", "1");
  if (plan.sequence_parallel && w.size(Axis::tp) > 1) arg("--sequence-parallel");
  if (plan.zero_stage == 1 || plan.zero_stage == 2) arg("--use-distributed-optimizer");
  // Megatron-LM reduces the gradients after the last backward unless told to
  // overlap them (--overlap-grad-reduce, off by default); the plan prices
  // what overlap_gradient_reduction says (on by default).
  if (plan.overlap_gradient_reduction && plan.mesh.zero_group_size() > 1) arg("--overlap-grad-reduce");
  if (zero_gather_overlap_applies(plan)) arg("--overlap-param-gather");
  arg("--micro-batch-size", count(plan.micro_batch));
  arg("--global-batch-size", count(plan.global_batch));
  if (plan.recompute == Recompute::selective_op) {
    w.warning("recompute", "Megatron-LM has no torchtitan-style op-level checkpointing (every second matmul); written "
                           "as --recompute-granularity selective, which keeps more and repeats only the attention core");
  }
  if (plan.recompute == Recompute::selective || plan.recompute == Recompute::selective_op) {
    arg("--recompute-granularity", "selective");
  }
  if (plan.recompute == Recompute::selective && plan.recompute_modules != kDefaultRecomputeModules) {
    std::string modules = recompute_modules_text(plan.recompute_modules);  // Megatron-Core takes them space-separated
    std::replace(modules.begin(), modules.end(), ',', ' ');
    arg("--recompute-modules", modules);
  }
  if (plan.recompute == Recompute::full) {
    arg("--recompute-granularity", "full");
    arg("--recompute-method", "uniform");
    arg("--recompute-num-layers", "1");
  }
  const bool bf16_weights = plan.precision == Precision::bf16 || plan.precision == Precision::fp8;
  if (bf16_weights) arg("--bf16");
  if (plan.precision == Precision::fp16) arg("--fp16");
  if (plan.precision == Precision::fp8) arg("--fp8-format", "hybrid");
  // Megatron-LM accumulates and reduces gradients in fp32 for bf16 unless told
  // not to, and in the 16-bit type for fp16 unless told to (arguments.py).
  if (bf16_weights && !gradients_in_fp32(plan)) arg("--grad-reduce-in-bf16");
  if (plan.precision == Precision::fp16 && gradients_in_fp32(plan)) arg("--accumulate-allreduce-grads-in-fp32");
  arg("--attention-backend", plan.attention == Attention::fused ? "flash" : "unfused");
  // "the faster ... fused form of cross entropy, which also has bf16 grads internally" (arguments.py).
  if (plan.loss == Loss::fused) arg("--cross-entropy-loss-fusion");
  if (plan.bf16_moments) {  // Megatron-Core's precision-aware optimizer (arguments.py)
    arg("--use-precision-aware-optimizer");
    arg("--exp-avg-dtype", "bf16");
    arg("--exp-avg-sq-dtype", "bf16");
  }
  // Combined 1F1B (Megatron-Core v0.14, "batch-level overlapping to hide EP-A2A communication").
  if (plan.overlap_expert_parallel) arg("--overlap-moe-expert-parallel-comm");
  // Transformer Engine's userbuffers overlap of the sequence-parallel collectives (arguments.py).
  if (tp_comm_overlap_applies(plan)) arg("--tp-comm-overlap");
  if (p2p_overlap_applies(plan)) arg("--overlap-p2p-communication");
}

// The model's shape.
void megatron_model(Writer& w, MegatronArgs& arg) {
  const TransformerDims& t = w.file.model.transformer;
  auto count = MegatronArgs::count;
  arg("--num-layers", count(t.layers));
  arg("--hidden-size", count(t.hidden));
  arg("--num-attention-heads", count(t.heads));
  if (t.latent_attention()) {  // Megatron-Core's MLA (arguments.py: --qk-head-dim is the part without rotation)
    arg("--multi-latent-attention");
    if (t.q_lora_rank > 0) arg("--q-lora-rank", count(t.q_lora_rank));
    arg("--kv-lora-rank", count(t.kv_lora_rank));
    arg("--qk-head-dim", count(t.qk_nope_head_size()));
    arg("--qk-pos-emb-head-dim", count(t.qk_rope_head_dim));
    arg("--v-head-dim", count(t.v_head_dim));
  } else if (t.head_size() * t.heads != t.hidden) {
    arg("--kv-channels", count(t.head_size()));
  }
  if (t.key_value_heads() != t.heads) {
    arg("--group-query-attention");
    arg("--num-query-groups", count(t.key_value_heads()));
  }
  arg("--ffn-hidden-size", count(t.dense_width()));  // the experts' width too, unless dense layers name their own (below)
  if (t.feed_forward == FeedForward::swiglu) arg("--swiglu");
  arg("--seq-length", count(w.seq_len()));
  arg("--max-position-embeddings", count(t.seq_len));
  arg("--position-embedding-type", t.positions == Positions::rotary    ? "rope"
                                   : t.positions == Positions::learned ? "learned_absolute"
                                                                       : "none");
  // Megatron-LM's --rotary-base is type=int: int('1e+06') fails, so a whole base is written whole.
  if (t.positions == Positions::rotary) {
    arg("--rotary-base", t.rope_theta == std::floor(t.rope_theta) && t.rope_theta < 9e15
                             ? std::to_string(static_cast<std::int64_t>(t.rope_theta))
                             : number_text(t.rope_theta));
  }
  if (t.norm == Norm::rmsnorm) arg("--normalization", "RMSNorm");
  arg("--norm-epsilon", number_text(t.norm_eps));
  if (!t.tied_embeddings) arg("--untie-embeddings-and-output-weights");
  if (!t.bias) arg("--disable-bias-linear");
  arg("--attention-dropout", number_text(t.dropout));
  arg("--hidden-dropout", number_text(t.dropout));
}

// A mixture of experts: its experts, the dispatch the plan was priced with, capacity, shared experts and
// the dense layers among them.
void megatron_experts(Writer& w, MegatronArgs& arg) {
  const Plan& plan = w.plan();
  const TransformerDims& t = w.file.model.transformer;
  auto count = MegatronArgs::count;
  arg("--num-experts", count(t.experts));
  // The dispatch the plan was priced with; Megatron-Core's own default is allgather.
  if (plan.ep_dispatch == EpDispatch::deduplicated) {
    arg("--moe-token-dispatcher-type", "flex");  // with DeepEP (Megatron-Core MoE README, v0.12)
    arg("--moe-enable-deepep");
  } else {
    arg("--moe-token-dispatcher-type", "alltoall");
  }
  arg("--moe-router-topk", count(t.top_k));
  if (t.capacity_factor > 0) {  // drop and pad (Megatron-Core MoE README, "Token Dispatch Mechanism")
    arg("--moe-expert-capacity-factor", number_text(t.capacity_factor));
    arg("--moe-pad-expert-input-to-capacity");
  }
  if (t.shared_expert_ffn > 0) arg("--moe-shared-expert-intermediate-size", count(t.shared_expert_ffn));
  if (t.expert_groups > 0) {  // group-limited routing (arguments.py: --moe-router-num-groups, --moe-router-group-topk)
    arg("--moe-router-num-groups", count(t.expert_groups));
    arg("--moe-router-group-topk", count(t.group_top_k));
  }
  if (!t.dense_layers.empty()) {
    // --ffn-hidden-size is then the dense layers' width; the experts' is --moe-ffn-hidden-size, and which
    // layers have experts a list of 0 (dense) and 1 (experts), one per layer (arguments.py, --moe-layer-freq).
    arg("--moe-ffn-hidden-size", count(t.ffn));
    std::string pattern = "[";
    for (std::int64_t layer = 0; layer < t.layers; ++layer) pattern += std::string(layer > 0 ? "," : "") + (t.expert_layer(layer) ? "1" : "0");
    arg("--moe-layer-freq", "\"" + pattern + "]\"");
  }
}

std::string megatron(Writer& w) {
  if (!w.transformer("Megatron-LM")) return "";
  megatron_checks(w);
  if (has_errors(w.problems)) return "";
  MegatronArgs arg;
  megatron_parallelism_and_training(w, arg);
  megatron_model(w, arg);
  if (w.file.model.transformer.experts > 0) megatron_experts(w, arg);
  const TransformerDims& t = w.file.model.transformer;
  const auto& args = arg.args;
  std::string out = w.header("#", "Megatron-LM arguments (pretrain_gpt.py)");
  out += "# world size " + std::to_string(w.mesh().world_size()) + " = tp x pp x cp x data-parallel " +
         std::to_string(w.mesh().data_parallel_size()) + "; the vocabulary (" + std::to_string(t.vocab) +
         ") comes from your tokenizer\n";
  for (std::size_t i = 0; i < args.size(); ++i) {
    out += args[i].first + (args[i].second.empty() ? "" : " " + args[i].second) + (i + 1 < args.size() ? " \\\n" : "\n");
  }
  return out;
}

// ---- torchtitan

std::string torchtitan(Writer& w) {
  if (!w.transformer("torchtitan")) return "";
  const Plan& plan = w.plan();
  const std::int64_t dp = w.size(Axis::dp), fsdp = w.size(Axis::fsdp), pp = w.size(Axis::pp);
  if (plan.zero_stage == 1) {
    w.error("zero", "ZeRO-1: torchtitan's data parallelism is DDP (replicate) or FSDP2 (shard parameters, gradients "
                    "and optimizer state); neither shards the optimizer alone (plan with --zero 0, 2 or 3)");
  }
  if (plan.zero_stage >= 1 && dp > 1 && fsdp > 1) w.error("zero", "ZeRO on dp together with fsdp > 1 has no torchtitan form");
  if (w.size(Axis::ep) > 1) {
    w.error("mesh.ep", "torchtitan carves expert parallelism out of the FSDP ranks (dp2ep), which also shard the dense "
                       "weights; this plan replicates them over ep: use --to megatron");
  } else if (expert_split(plan).tokens > 1) {
    w.error("expert_tensor_parallel", "experts out of tp: not exported to torchtitan (its expert_tensor_parallel_degree "
                                      "works with dp2ep expert parallelism): use --to megatron");
  }
  if (plan.schedule.kind == ScheduleKind::zb_h1 && pp > 1) {
    w.error("schedule", "zb-h1: PyTorch's zero-bubble schedules (InterleavedZeroBubble, ZBVZeroBubble) need two or more "
                        "stages per rank; there is no single-stage ZB-H1");
  }
  if (plan.precision == Precision::fp16) w.error("precision", "fp16: torchtitan's mixed_precision_param is bfloat16 or float32");
  if (plan.bf16_moments) {
    w.warning("bf16_moments", "torchtitan's AdamW keeps its moments in the parameters' fp32: 4 bytes per parameter "
                              "of optimizer state more than the plan prices");
  }
  if (tp_comm_overlap_applies(plan)) {
    w.warning("tp_comm_overlap", "torchtitan's async tensor parallelism needs the model compiled, so [compile] is "
                                 "on: compiled memory-bound passes run faster than the eager ones the plan prices");
  }
  if (plan.overlap_expert_parallel) {
    w.warning("overlap_expert_parallel", "torchtitan runs each micro-batch's all-to-alls on its own critical path (no "
                                         "combined 1F1B): the step is slower than the plan prices by the hidden part");
  }
  // torchtitan keeps gradient sync on while it accumulates (pytorch/torchtitan
  // PR 1710, declined: "doing gradient sync requires extra communication but
  // reduce the memory overhead"), and FSDP2 reshards after every backward.
  if (dp > 1 && plan.zero_stage < 3 && plan.micro_batches() > 1) {
    w.warning("zero", "torchtitan reduces the data-parallel gradients in every micro-batch's backward (" +
                          std::to_string(plan.micro_batches()) + " a step)" +
                          (plan.zero_stage == 2 ? " and gathers the weights again in every forward" : "") +
                          ", where the plan does it once a step: the step is slower than priced by the extra "
                          "collectives that do not hide");
  }
  if (!plan.overlap_gradient_reduction && dp > 1 && plan.zero_stage < 3) {  // fsdp's reduce-scatters are per block anyway
    w.warning("overlap_gradient_reduction", "torchtitan's FSDP2 and DDP reduce the gradients during the backward, "
                                            "where the plan prices the reduction after it: the step is faster than "
                                            "priced by the hidden part");
  }
  if (!plan.stage_layers.empty()) {
    w.error("stage_layers", "uneven pipeline stages: give torchtitan pipeline_parallel_split_points by hand");
  } else if (pp > 1 && w.layers_per_chunk() == 0) {
    w.error("mesh.pp", "pp x virtual stages do not divide the " + std::to_string(w.file.model.transformer.layers) +
                           " layers evenly");
  }
  if (w.size(Axis::tp) > 1 && !plan.sequence_parallel) {
    w.warning("sequence_parallel", "torchtitan's tensor parallelism always shards the norms and residual stream over "
                                   "the sequence (sequence parallelism); the plan has it off");
  }
  if (plan.zero_stage == 2) {
    w.warning("zero", "ZeRO-2 as FSDP2 with fsdp_reshard_after_forward = \"never\": parameters stay gathered from the "
                      "forward to the backward, where ZeRO-2 keeps them whole all the time");
  }
  if (plan.precision == Precision::fp8) {
    w.warning("precision", "fp8: add [model] converters = [\"float8\"] and [float8] filter_fqns = [\"output\"] (torchao; "
                           "the plan prices the LM head in bf16)");
  }
  if (!gradients_in_fp32(plan) && plan.mesh.data_parallel_size() > 1) {
    w.warning("fp32_gradients", "torchtitan reduces gradients in float32 (FSDP2's mixed_precision_reduce; DDP under "
                                "autocast keeps fp32 gradients), twice the bytes the plan's 16-bit gradients are "
                                "priced at: plan with --fp32-gradients to match");
  }
  if (plan.loss == Loss::fused) {
    w.warning("loss", "the plan prices a fused cross-entropy (logits kept in bf16); torchtitan's loss runs it so only "
                      "when compiled (torch.compile), else it holds fp32 log-probabilities as --loss eager prices");
  }
  if (w.size(Axis::cp) > 1 && plan.cp_comm != CpComm::ring) {
    w.warning("cp_comm", "torchtitan's context parallelism is ring attention; the plan's " + to_string(plan.cp_comm) +
                             " key/value exchange is written as its ring");
  }
  if (plan.recompute == Recompute::selective && plan.recompute_modules != kDefaultRecomputeModules) {
    w.error("recompute_modules", "torchtitan has no module-level recompute (Megatron-Core's --recompute-modules " +
                                     recompute_modules_text(plan.recompute_modules) + "): use --to megatron");
  } else if (plan.recompute == Recompute::selective) {
    w.warning("recompute", "torchtitan has no checkpointing of the attention core alone, and its SDPA keeps no s x s "
                           "tensors to drop, so 'selective' is written as mode \"none\", what the plan was priced as; "
                           "--recompute selective-op is torchtitan's selective_ac_option = \"op\"");
  }
  const bool replicated_dp = dp > 1 && plan.zero_stage < 2 && fsdp == 1;
  if (replicated_dp && (w.size(Axis::tp) > 1 || pp > 1 || w.size(Axis::cp) > 1)) {
    // pytorch/torchtitan parallelize_llama.py, apply_ddp's guard (world_mesh.ndim > 1 in releases that apply
    // DDP to the whole mesh; newer ones apply it to the dp_replicate mesh alone).
    w.warning("mesh.dp", "DDP (data_parallel_replicate_degree " + std::to_string(dp) +
                             ") beside tp, pp or cp: torchtitan releases that apply DDP to the whole device mesh stop "
                             "with \"DDP has not supported > 1D parallelism\"; if yours does, plan with --zero 3 "
                             "(FSDP2) or give the data-parallel ranks to fsdp");
  }
  if (w.size(Axis::cp) > 1 && plan.zero_stage < 3 && fsdp == 1) {
    w.warning("mesh.cp", "torchtitan shards the weights with FSDP2 over the data-parallel and cp ranks together "
                         "(dp_shard_cp) whenever cp > 1, where the plan keeps them whole on each cp rank: less "
                         "memory than priced, and FSDP's gathers and reduce-scatters in the step");
  }
  if (has_errors(w.problems)) return "";

  const bool shard_dp = plan.zero_stage >= 2;
  std::ostringstream o;
  o << w.header("#", "torchtitan job config");
  o << "# [model] name and flavor: torchtitan's own model registry; meshplan planned " << w.file.model.name << "\n\n";
  o << "[parallelism]\n"
    << "data_parallel_replicate_degree = " << (shard_dp ? 1 : dp) << "\n"
    << "data_parallel_shard_degree = " << (shard_dp ? dp * fsdp : fsdp) << "\n";
  if (plan.zero_stage == 2) o << "fsdp_reshard_after_forward = \"never\"\n";
  o << "tensor_parallel_degree = " << w.size(Axis::tp) << "\n"
    << "context_parallel_degree = " << w.size(Axis::cp) << "\n"
    << "pipeline_parallel_degree = " << pp << "\n";
  // Async TP: torch.compile's micro-pipelined all-gather / reduce-scatter matmuls (torchtitan
  // distributed/tensor_parallel.py, maybe_enable_async_tp: needs the model compiled).
  if (tp_comm_overlap_applies(plan)) o << "enable_async_tensor_parallel = true\n";
  if (pp > 1) {
    const char* schedule = plan.schedule.kind == ScheduleKind::gpipe         ? "GPipe"
                           : plan.schedule.kind == ScheduleKind::interleaved ? "Interleaved1F1B"
                                                                             : "1F1B";
    o << "pipeline_parallel_schedule = \"" << schedule << "\"\n"
      << "pipeline_parallel_microbatch_size = " << plan.micro_batch << "\n"
      << "pipeline_parallel_layers_per_stage = " << w.layers_per_chunk() << "\n";
  }
  // Without pp, torchtitan accumulates gradients over global / (local x data-parallel) steps.
  const std::int64_t local = pp > 1 ? plan.micro_batch * plan.micro_batches() : plan.micro_batch;
  o << "\n[training]\n"
    << "local_batch_size = " << local << "\n"
    << "global_batch_size = " << plan.global_batch << "\n"
    << "seq_len = " << w.seq_len() << "\n"
    << "mixed_precision_param = \"" << (plan.precision == Precision::fp32 ? "float32" : "bfloat16") << "\"\n";
  if (gradients_in_fp32(plan)) o << "mixed_precision_reduce = \"float32\"\n";
  o << "\n[activation_checkpoint]\n"
    << "mode = \"" << (plan.recompute == Recompute::full ? "full" : plan.recompute == Recompute::selective_op ? "selective" : "none")
    << "\"\n";
  if (plan.recompute == Recompute::selective_op) o << "selective_ac_option = \"op\"\n";
  if (tp_comm_overlap_applies(plan)) o << "\n[compile]\nenable = true\ncomponents = [\"model\"]  # async tensor parallelism needs it\n";
  return o.str();
}

// ---- DeepSpeed

std::string deepspeed(Writer& w) {
  const Plan& plan = w.plan();
  const std::pair<Axis, const char*> model_parallel[] = {
      {Axis::tp, "tensor parallelism comes from the model code (Megatron-DeepSpeed, AutoTP), not the JSON"},
      {Axis::pp, "pipeline stages are PipelineModule(num_stages=...) in the model code, not the JSON"},
      {Axis::cp, "context parallelism (Ulysses) is set up in the model code, not the JSON"},
      {Axis::ep, "expert parallelism is deepspeed.moe.layer.MoE(ep_size=...) in the model code, not the JSON"}};
  for (const auto& [axis, why] : model_parallel)
    if (w.size(axis) > 1) w.error("mesh." + to_string(axis), to_string(axis) + " > 1: " + why + "; use --to megatron");
  if (w.size(Axis::dp) > 1 && w.size(Axis::fsdp) > 1) {
    w.error("mesh.fsdp", "dp x fsdp (hybrid sharding): DeepSpeed's ZeRO shards over every data-parallel rank");
  }
  if (plan.recompute != Recompute::none) {
    w.warning("recompute", "activation checkpointing is applied by the model code (deepspeed.checkpointing), not the JSON");
  }
  if (plan.precision == Precision::fp8) w.error("precision", "fp8: DeepSpeed's JSON sets fp16 or bf16");
  if (plan.bf16_moments) {
    w.warning("bf16_moments", "DeepSpeed's Adam keeps fp32 moments: 4 bytes per parameter of optimizer state more "
                              "than the plan prices");
  }
  if (plan.loss == Loss::fused) {
    w.warning("loss", "the plan prices a fused cross-entropy (logits kept in their own dtype); the model code must "
                      "run one (a compiled or fused loss), else it holds fp32 log-probabilities as --loss eager prices");
  }
  const int stage = w.size(Axis::fsdp) > 1 ? 3 : plan.zero_stage;
  // DeepSpeed overlaps the gradients' reduction with the backward (overlap_comm)
  // from ZeRO-2 up; ZeRO-0/1 reduce after the backward (DeepSpeed PR 1246:
  // "Overlap and contiguous grads are meaningless in stage 1").
  const bool reduced_over_dp = w.size(Axis::dp) > 1 && stage < 3;
  if (reduced_over_dp && plan.overlap_gradient_reduction && stage < 2) {
    w.warning("overlap_gradient_reduction", "DeepSpeed reduces ZeRO-" + std::to_string(stage) +
                                                " gradients after the last backward, where the plan prices the "
                                                "reduction overlapped with it (set overlap_gradient_reduction false "
                                                "in the plan file to price DeepSpeed's)");
  }
  if (zero_gather_overlap_applies(plan)) {
    w.warning("overlap_zero_gather", "DeepSpeed gathers ZeRO-1/2's updated weights after the optimizer step, where "
                                     "the plan prices the gather under the next step's forward");
  }
  if (has_errors(w.problems)) return "";
  nlohmann::ordered_json j;
  j["train_batch_size"] = plan.global_batch;
  j["train_micro_batch_size_per_gpu"] = plan.micro_batch;
  j["gradient_accumulation_steps"] = plan.micro_batches();
  j["zero_optimization"] = {{"stage", stage}};
  if (reduced_over_dp && stage == 2) j["zero_optimization"]["overlap_comm"] = plan.overlap_gradient_reduction;
  if (plan.precision == Precision::bf16) j["bf16"] = {{"enabled", true}};
  if (plan.precision == Precision::fp16) j["fp16"] = {{"enabled", true}};
  if (gradients_in_fp32(plan) && plan.precision != Precision::fp32) {
    j["data_types"] = {{"grad_accum_dtype", "fp32"}};
    j["communication_data_type"] = "fp32";
  } else if (plan.precision == Precision::bf16 && stage == 0) {
    // Without ZeRO, bf16 runs DeepSpeed's BF16_Optimizer, which accumulates gradients in fp32 unless told
    // (microsoft/DeepSpeed PR 4713): 4 bytes per parameter where the plan prices its 16-bit gradients' 2.
    j["data_types"] = {{"grad_accum_dtype", "bf16"}};
  }
  j["gradient_clipping"] = 1.0;
  return j.dump(2) + "\n";
}

}  // namespace

std::optional<ExportTarget> parse_export_target(const std::string& name) {
  if (name == "jax") return ExportTarget::jax;
  if (name == "megatron") return ExportTarget::megatron;
  if (name == "torchtitan") return ExportTarget::torchtitan;
  if (name == "deepspeed") return ExportTarget::deepspeed;
  return std::nullopt;
}

namespace {

// What every target shares: a plan predicted not to fit is written with a warning (a config that runs
// out of memory was written with nothing said); causal context parallelism in Megatron-Core and
// torchtitan cuts each sequence into 2 x cp chunks (two per rank, for load balance), so cp needs
// seq % (2 cp) == 0 there.
Problems common_export_problems(const PlanFile& file, ExportTarget target) {
  Problems problems;
  const std::int64_t cp = file.plan.mesh.size(Axis::cp);
  const std::int64_t seq = plan_seq_len(file.model, file.plan);
  if (cp > 1 && (target == ExportTarget::megatron || target == ExportTarget::torchtitan) && seq % (2 * cp) != 0) {
    problems.push_back({Severity::error, "mesh.cp",
                        "sequence " + std::to_string(seq) + " does not split into 2 x cp = " + std::to_string(2 * cp) +
                            " chunks: Megatron-Core and torchtitan give each cp rank two chunks of every sequence "
                            "(causal load balance); plan a sequence length divisible by " + std::to_string(2 * cp)});
  }
  const Explanation ex = explain_plan(file.model, file.cluster, Deployment{file.plan.mesh.world_size(), 0}, file.plan);
  if (ex.memory && !ex.memory->fits()) {
    const StageMemory& worst = ex.memory->worst();
    char text[200];
    std::snprintf(text, sizeof text, "the plan is predicted not to fit: pipeline stage %lld needs %.2f GiB per device, "
                                     "%.2f GiB usable (the plan file's prediction says the same)",
                  static_cast<long long>(worst.stage), worst.memory.total_bytes() / (1024.0 * 1024 * 1024),
                  ex.memory->usable_bytes / (1024.0 * 1024 * 1024));
    problems.push_back({Severity::warning, "memory", text});
  }
  return problems;
}

}  // namespace

Loaded<std::string> export_plan(const PlanFile& file, ExportTarget target) {
  Problems common = common_export_problems(file, target);
  if (has_errors(common)) return {{}, std::move(common)};
  Writer w{file, {}, {}};
  for (const Problem& p : common) w.warning(p.where, p.message);
  std::string text;
  switch (target) {
    case ExportTarget::jax: {
      Loaded<std::string> jax = export_jax(file);
      jax.problems.insert(jax.problems.begin(), common.begin(), common.end());
      return jax;
    }
    case ExportTarget::megatron: text = megatron(w); break;
    case ExportTarget::torchtitan: text = torchtitan(w); break;
    case ExportTarget::deepspeed: text = deepspeed(w); break;
  }
  return {std::move(text), std::move(w.problems)};
}

}  // namespace meshplan
