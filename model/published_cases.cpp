#include "model/published_cases.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "model/cluster_spec.hpp"

namespace meshplan {
namespace {

ModelSpec must_load(const std::string& yaml, const char* what) {
  auto loaded = load_model_text(yaml, what);
  if (!loaded.ok()) throw std::logic_error(std::string(__FILE__) + ": built-in " + what + " failed to load");
  return loaded.value;
}

ModelSpec must_load_preset(const std::string& name) {
  auto model = load_model(name);
  if (!model.ok()) throw std::logic_error(std::string(__FILE__) + ": model preset " + name + " failed to load");
  return model.value;
}

// Korthikanti et al. 2022, Table 3 configurations (Selene, DGX A100, tp 8).
struct KorthikantiRow {
  const char* model;
  std::int64_t layers, hidden, heads, tp, pp, micro_batch, global_batch, interleave;
  double full_recompute_s, selective_s;         // Table 5
  double activations_none_gib, activations_selective_gib;  // Figure 1 (read off the figure)
};
constexpr KorthikantiRow kKorthikanti[] = {
    {"22B", 48, 6144, 64, 8, 1, 4, 4, 1, 1.42, 1.10, 59.25, 9.56},
    {"175B", 96, 12288, 96, 8, 8, 1, 64, 3, 18.13, 13.75, 66.84, 12.35},
    {"530B", 105, 20480, 128, 8, 35, 1, 280, 3, 49.05, 37.83, 114.02, 23.08},
    {"1T", 128, 25600, 160, 8, 64, 1, 512, 1, 94.42, 71.49, 131.25, 26.56},
};

PublishedCase korthikanti_case(const KorthikantiRow& row, Recompute recompute, bool sequence_parallel) {
  PublishedCase c;
  c.model = korthikanti_model(row.layers, row.hidden, row.heads);
  c.cluster = "dgx-a100";
  Plan& plan = c.plan;
  plan.mesh.axes = {{Axis::pp, row.pp}, {Axis::tp, row.tp}};
  plan.micro_batch = row.micro_batch;
  plan.global_batch = row.global_batch;
  plan.recompute = recompute;
  plan.sequence_parallel = sequence_parallel;
  plan.attention = Attention::unfused;  // Megatron-LM in 2022 had no fused attention: s x s scores stored
  plan.loss = Loss::eager;              // nor a fused cross-entropy: the logits cast to float (vocab_parallel_cross_entropy)
  plan.schedule = row.interleave > 1 ? Schedule{ScheduleKind::interleaved, row.interleave} : Schedule{};
  plan.precision = Precision::bf16;
  return c;
}

// Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on
// GPU Clusters Using Megatron-LM", Table 1 (weak scaling on Selene, DGX A100
// 80GB): GPT models with vocabulary 51200 and sequence 2048, achieved
// teraFLOP/s per GPU counted with Eq. 3 (recomputation included).
struct NarayananRow {
  const char* billions;
  std::int64_t heads, hidden, layers, tp, pp, gpus, batch;
  double tflops_per_gpu;
  // The paper's Table 1 states neither micro-batch, schedule nor data-parallel
  // implementation; its reproduction script does, per row (Megatron-LM,
  // examples/sc21/run_table_1.sh: MBS, --num-layers-per-virtual-pipeline-stage,
  // --DDP-impl). interleave is layers per stage / layers per virtual stage.
  std::int64_t micro_batch, interleave;
  bool torch_ddp;
};
constexpr NarayananRow kNarayanan[] = {
    {"1.7", 24, 2304, 24, 1, 1, 32, 512, 137, 16, 1, true},
    {"3.6", 32, 3072, 30, 2, 1, 64, 512, 138, 16, 1, true},
    {"7.5", 32, 4096, 36, 4, 1, 128, 512, 142, 16, 1, true},
    {"18.4", 48, 6144, 40, 8, 1, 256, 1024, 135, 8, 1, true},
    {"39.1", 64, 8192, 48, 8, 2, 512, 1536, 138, 4, 1, false},
    {"76.1", 80, 10240, 60, 8, 4, 1024, 1792, 140, 2, 3, false},
    {"145.6", 96, 12288, 80, 8, 8, 1536, 2304, 148, 2, 2, false},
    {"310.1", 128, 16384, 96, 8, 16, 1920, 2160, 155, 1, 2, false},
    {"529.6", 128, 20480, 105, 8, 35, 2520, 2520, 163, 1, 3, false},
    {"1008.0", 160, 25600, 128, 8, 64, 3072, 3072, 163, 1, 1, false},
};

std::string format_figure(const char* format, double value) {
  char text[64];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// Narayanan et al. 2021, Eq. 3: FLOPs of one iteration with activation
// recomputation (four passes of the GEMMs), F = 96 B s l h^2 (1 + s / 6h + V / 16 l h).
double megatron_flops_per_step(const ModelSpec& model, std::int64_t global_batch, std::int64_t seq_len) {
  const double b = static_cast<double>(global_batch), s = static_cast<double>(seq_len);
  const double l = static_cast<double>(model.transformer.layers), h = static_cast<double>(model.transformer.hidden);
  const double v = static_cast<double>(model.transformer.vocab);
  return 96 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h));
}

// Llama 3 405B in 126 layers over 16 stages, interleaved v = 2: 32 chunks of
// 4 layers, "one Transformer layer less" on the first and the last stage
// (Llama Team 2024, Sec. 3.3.2): 3 + 30 x 4 + 3.
std::vector<std::int64_t> llama3_405b_chunks() {
  std::vector<std::int64_t> chunks(32, 4);
  chunks.front() = 3;
  chunks.back() = 3;
  return chunks;
}

}  // namespace

std::string unit_of(PublishedQuantity quantity) {
  switch (quantity) {
    case PublishedQuantity::iteration_time_s: return "s";
    case PublishedQuantity::first_stage_activations_gib: return "GiB";
    case PublishedQuantity::model_states_gb: return "GB";
    case PublishedQuantity::peak_reserved_gib: return "GiB";
  }
  return "";
}

ModelSpec korthikanti_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads) {
  return must_load("name: gpt-" + std::to_string(layers) + "x" + std::to_string(hidden) +
                       "\nkind: transformer\nsource: Korthikanti et al. 2022, Table 3\nlayers: " + std::to_string(layers) +
                       "\nhidden: " + std::to_string(hidden) + "\nheads: " + std::to_string(heads) +
                       "\nffn: " + std::to_string(4 * hidden) +
                       "\nvocab: 51200\nseq_len: 2048\nmlp: gelu\npositions: learned\n"
                       "tied_embeddings: true\ndropout: 0.1\n",
                   "Korthikanti model");
}

ModelSpec zero_paper_model() {
  return must_load("name: zero-7.5b\nkind: mlp\nsource: Rajbhandari et al. 2020, Figure 1 (Psi = 7.5B)\n"
                   "layer_sizes: [50000, 150000]\n",
                   "ZeRO model");
}

std::vector<PublishedCase> korthikanti_iteration_time_cases() {
  std::vector<PublishedCase> cases;
  for (const auto& row : kKorthikanti) {
    for (bool selective : {false, true}) {
      PublishedCase c = korthikanti_case(row, selective ? Recompute::selective : Recompute::full, selective);
      c.name = std::string(row.model) + (selective ? " selective+SP" : " full recompute");
      c.source = "Korthikanti et al. 2022, Table 5";
      c.quantity = PublishedQuantity::iteration_time_s;
      c.published = selective ? row.selective_s : row.full_recompute_s;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<PublishedCase> korthikanti_activation_cases() {
  std::vector<PublishedCase> cases;
  for (const auto& row : kKorthikanti) {
    for (bool selective : {false, true}) {
      PublishedCase c = korthikanti_case(row, selective ? Recompute::selective : Recompute::none, selective);
      c.name = std::string(row.model) + (selective ? " selective+SP" : " tp only, no recompute");
      c.source = "Korthikanti et al. 2022, Figure 1 (read off the figure)";
      c.quantity = PublishedQuantity::first_stage_activations_gib;
      c.published = selective ? row.activations_selective_gib : row.activations_none_gib;
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

std::vector<PublishedCase> zero_model_state_cases() {
  const double published[] = {120, 31.4, 16.6, 1.88};
  std::vector<PublishedCase> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    PublishedCase c;
    c.name = "ZeRO stage " + std::to_string(stage) + ", 7.5B, N_d = 64";
    c.source = "Rajbhandari et al. 2020, Figure 1";
    c.quantity = PublishedQuantity::model_states_gb;
    c.published = published[stage];
    c.model = zero_paper_model();
    c.cluster = "dgx-a100";
    c.plan.mesh.axes = {{Axis::dp, 64}};
    c.plan.micro_batch = 1;
    c.plan.global_batch = 64;
    c.plan.zero_stage = stage;
    c.plan.precision = Precision::bf16;
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<PublishedCase> torchtitan_h100_memory_cases() {
  // benchmarks/llama3_h100_202412_torchtitan.md (pytorch/torchtitan, torchtitan 9dec370, torch 1963fc8,
  // December 2024): "Llama 3.1 8B model. 8 GPUs [128 GPUs]. Local batch size 2 ... Selective activation
  // checkpointing", FSDP, 82.4 [67.0] GiB; H100s of 96 GB HBM2e at 500 W, 8 a host over NVLink, 400 Gb/s
  // RDMA per GPU. Memory is read as torchtitan logs it, the caching allocator's peak reserved bytes (the
  // maximum over the GPUs).
  std::vector<PublishedCase> cases;
  for (const auto& [gpus, gib] : {std::pair<std::int64_t, double>{8, 82.4}, {128, 67.0}}) {
    PublishedCase c;
    c.name = "Llama 3.1 8B, " + std::to_string(gpus) + " H100, FSDP";
    c.source = "torchtitan benchmarks/llama3_h100_202412_torchtitan.md, Table " + std::string(gpus == 8 ? "1" : "3");
    c.quantity = PublishedQuantity::peak_reserved_gib;
    c.published = gib;
    c.model = must_load_preset("llama3-8b");  // Llama 3.1 8B's shapes are Llama 3 8B's
    c.cluster = "dgx-h100";
    Plan& plan = c.plan;
    plan.mesh.axes = {{Axis::fsdp, gpus}};
    plan.micro_batch = 2;
    plan.global_batch = 2 * gpus;
    plan.seq_len = 8192;                     // torchtitan's llama3_8b.toml
    plan.recompute = Recompute::selective_op;  // its default selective mode, "op"
    plan.attention = Attention::fused;       // SDPA
    plan.loss = Loss::eager;                 // the rows without torch.compile
    plan.fp32_gradients = true;              // mixed_precision_reduce = "float32"
    c.note = "the rows without torch.compile or Float8; 96 GB HBM2e H100s (capacity does not enter the "
             "estimate); sequence 8192 from torchtitan's llama3_8b.toml; selective checkpointing in its default "
             "op mode; gradients reduced in fp32 (mixed_precision_reduce); memory read as the caching allocator's "
             "peak reserved bytes, so the prediction leaves the CUDA context out";
    cases.push_back(std::move(c));
  }
  return cases;
}

namespace {

// Narayanan et al. 2021, Table 1, as plans of their reproduction script.
void add_narayanan_cases(std::vector<PublishedCase>& cases) {
  for (const auto& row : kNarayanan) {
    PublishedCase c;
    c.name = std::string(row.billions) + "B, " + std::to_string(row.gpus) + " A100";
    c.source = "Narayanan et al. 2021 (arXiv 2104.04473), Table 1";
    c.model = korthikanti_model(row.layers, row.hidden, row.heads);
    c.cluster = "dgx-a100";
    Plan& plan = c.plan;
    plan.mesh.axes = {{Axis::dp, row.gpus / (row.tp * row.pp)}, {Axis::pp, row.pp}, {Axis::tp, row.tp}};
    plan.micro_batch = row.micro_batch;
    plan.global_batch = row.batch;
    if (row.interleave > 1) plan.schedule = Schedule{ScheduleKind::interleaved, row.interleave};
    plan.recompute = Recompute::full;       // Eq. 3 counts the recomputed forward pass
    plan.attention = Attention::unfused;    // Megatron-LM in 2021 had no fused attention
    plan.loss = Loss::eager;                // nor a fused cross-entropy
    // "mixed precision": --fp16 in the paper's scripts (Megatron-LM,
    // examples/academic_paper_scripts/sc21/CONFIG.sh), so 16-bit gradients.
    plan.precision = Precision::fp16;
    // --DDP-impl torch: PyTorch's DistributedDataParallel, which all-reduces
    // buckets of gradients while the backward runs. --DDP-impl local:
    // Megatron-LM's own DDP, which all-reduced the gradients once, after the
    // last micro-batch's backward (train_step in megatron/training.py, timer
    // "backward-params-all-reduce"), not overlapped.
    plan.overlap_gradient_reduction = row.torch_ddp;
    c.unit = ThroughputUnit::megatron_tflops_per_device;
    c.throughput = row.tflops_per_gpu;
    c.note = std::string("micro-batch, schedule and data-parallel implementation as the paper's reproduction script "
                         "gives them (Megatron-LM examples/sc21/run_table_1.sh: --micro-batch-size, ") +
             (row.interleave > 1 ? "--num-layers-per-virtual-pipeline-stage, " : "") +
             "--DDP-impl); no sequence parallelism (2021); dropout 0.1 as in Megatron's GPT recipe; gradients " +
             (row.torch_ddp ? "all-reduced in buckets while the backward runs (--DDP-impl torch: PyTorch DDP)"
                            : "all-reduced after the last backward, not overlapped (--DDP-impl local: Megatron-LM's DDP)") +
             ", in fp16 (--fp16 in the script's CONFIG.sh); eager loss (no fused cross-entropy in 2021)";
    c.miss_reason = "predicted fast, as every Megatron A100 row here and in Table 5: the a100-80g preset has no "
                    "measured GEMM curve, so its kernels run nearer peak than Megatron's 2021 kernels did; the two "
                    "pipelines of this table that Korthikanti et al. 2022 also ran were measured 8.7% and 10.3% "
                    "slower here than there (the cross-check below), where meshplan puts the difference under 1%";
    cases.push_back(std::move(c));
  }
}

void add_torchtitan_cases(std::vector<PublishedCase>& cases) {
  // torchtitan docs/performance.md (pytorch/torchtitan, commit 0413364), "Llama 3
  // performance numbers" (local batch 1, sequence 8192) and "Llama 2
  // performance numbers" (sequence 4096, Llama 2's; local batch as each row
  // says): FSDP2 on 64 A100 80GB. Every row of both tables whose activation
  // checkpointing meshplan can state; the two "selective layer" rows
  // (torchtitan checkpoints every second layer whole) it cannot.
  struct TorchtitanRow {
    const char* name;
    const char* model;
    const char* table;
    std::int64_t seq_len, local_batch;
    Recompute recompute;
    double tokens_per_s_per_gpu;
    const char* note;
    const char* miss_reason;
  };
  constexpr const char* kLlama2Note = "network unstated: dgx-a100 (8 x 200 Gb/s HDR per node) assumed; SDPA (flash) attention";
  constexpr const char* kLlama2Miss = "predicted fast as the Llama 3 rows: no measured A100 GEMM curve or eager-PyTorch "
                                      "op rates";
  const TorchtitanRow torchtitan[] = {
      {"Llama 3 8B, 64 A100, FSDP", "llama3-8b", "Llama 3", 8192, 1, Recompute::selective_op, 2973,
       "torchtitan's \"selective op\" checkpointing as selective-op (every second matmul of a layer and every "
       "memory-bound op repeated in the backward; torchtitan parallelize_llama.py); network unstated: dgx-a100 "
       "(8 x 200 Gb/s HDR per node) assumed; SDPA (flash) attention",
       "predicted 72% MFU where torchtitan measured 58%: the a100-80g preset has no measured GEMM curve or "
       "eager-PyTorch op rates (its fused attention follows FlashAttention-2's published range)"},
      {"Llama 3 70B, 64 A100, FSDP", "llama3-70b", "Llama 3", 8192, 1, Recompute::full, 331,
       "network unstated: dgx-a100 (8 x 200 Gb/s HDR per node) assumed; SDPA (flash) attention",
       "predicted fast as the 8B row: no measured A100 GEMM curve or eager-PyTorch op rates; FSDP's per-layer "
       "all-gathers on an unstated network"},
      {"Llama 2 13B, 64 A100, FSDP, no AC", "llama2-13b", "Llama 2", 4096, 2, Recompute::none, 2162, kLlama2Note, kLlama2Miss},
      {"Llama 2 13B, 64 A100, FSDP, op AC", "llama2-13b", "Llama 2", 4096, 2, Recompute::selective_op, 1904,
       "torchtitan's \"selective op\" checkpointing as selective-op; network unstated: dgx-a100 (8 x 200 Gb/s HDR per "
       "node) assumed; SDPA (flash) attention", kLlama2Miss},
      {"Llama 2 70B, 64 A100, FSDP, op AC", "llama2-70b", "Llama 2", 4096, 1, Recompute::selective_op, 355,
       "torchtitan's \"selective op\" checkpointing as selective-op; network unstated: dgx-a100 (8 x 200 Gb/s HDR per "
       "node) assumed; SDPA (flash) attention", kLlama2Miss},
      {"Llama 2 70B, 64 A100, FSDP, full AC", "llama2-70b", "Llama 2", 4096, 2, Recompute::full, 353, kLlama2Note, kLlama2Miss},
  };
  for (const auto& row : torchtitan) {
    PublishedCase c;
    c.name = row.name;
    c.source = std::string("torchtitan docs/performance.md, ") + row.table + " table (WPS per GPU)";
    c.model = must_load_preset(row.model);
    c.cluster = "dgx-a100";
    c.plan.mesh.axes = {{Axis::fsdp, 64}};
    c.plan.micro_batch = row.local_batch;
    c.plan.global_batch = 64 * row.local_batch;
    c.plan.seq_len = row.seq_len;
    c.plan.recompute = row.recompute;
    c.plan.attention = Attention::fused;
    c.plan.loss = Loss::eager;  // compile = false in torchtitan's train configs of the time: an eager loss
    c.plan.precision = Precision::bf16;
    // FSDP2's MixedPrecisionPolicy with torchtitan's defaults: bf16 parameters
    // gathered, gradients reduce-scattered in fp32 (mixed_precision_reduce =
    // "float32", torchtitan config_manager.py at the commit above).
    c.plan.fp32_gradients = true;
    c.unit = ThroughputUnit::tokens_per_s_per_device;
    c.throughput = row.tokens_per_s_per_gpu;
    c.note = std::string(row.note) + "; gradients reduce-scattered in fp32 (torchtitan's mixed_precision_reduce default); "
                                     "eager loss (compile = false in torchtitan's configs then)";
    c.miss_reason = row.miss_reason;
    cases.push_back(std::move(c));
  }
}

void add_llama3_cases(std::vector<PublishedCase>& cases) {
  // Llama Team 2024, "The Llama 3 Herd of Models" (arXiv 2407.21783), Table 4:
  // Llama 3 405B pre-training on H100 80GB HBM3 (700 W), tp 8, pp 16, DP = FSDP.
  struct Llama3Row {
    std::int64_t gpus, cp, dp, seq_len, batch_per_dp;
    double tflops_per_gpu;
  };
  const Llama3Row llama3[] = {{8192, 1, 64, 8192, 32, 430}, {16384, 1, 128, 8192, 16, 400}, {16384, 16, 8, 131072, 16, 380}};
  for (const auto& row : llama3) {
    PublishedCase c;
    c.name = "Llama 3 405B, " + std::to_string(row.gpus) + " H100, seq " + std::to_string(row.seq_len);
    c.source = "Llama Team 2024 (arXiv 2407.21783), Table 4";
    c.model = must_load_preset("llama3-405b");
    c.cluster = "dgx-h100";
    Plan& plan = c.plan;
    // The paper orders the groups [TP, CP, PP, DP] from the innermost; meshplan lists the outermost first.
    plan.mesh.axes = {{Axis::dp, row.dp}, {Axis::pp, 16}, {Axis::cp, row.cp}, {Axis::tp, 8}};
    if (row.cp == 1) plan.mesh.axes.erase(plan.mesh.axes.begin() + 2);
    plan.micro_batch = 1;
    plan.global_batch = row.dp * row.batch_per_dp;
    plan.seq_len = row.seq_len;
    plan.zero_stage = 2;  // FSDP sharding optimizer state and gradients, weights kept after the forward (Sec. 3.3.2)
    plan.overlap_zero_gather = true;  // FSDP gathers them in the first forward, each module's beside the one before
    plan.sequence_parallel = true;
    plan.recompute = Recompute::none;  // "pre-train on 8K tokens without activation checkpointing" (Sec. 3.3.2)
    plan.attention = Attention::fused;
    plan.schedule = Schedule{ScheduleKind::interleaved, 2};
    plan.stage_layers = llama3_405b_chunks();
    plan.precision = Precision::bf16;
    // "we use an all-gather based method where we first all-gather the key (K) and value (V) tensors ...
    // the all-gather communication latency is exposed in the critical path" (Sec. 3.3.2).
    plan.cp_comm = CpComm::all_gather;
    c.unit = ThroughputUnit::model_tflops_per_device;
    c.throughput = row.tflops_per_gpu;
    c.note = "RoCE at 400 Gb/s per GPU in the paper: dgx-h100 (8 x 400 Gb/s per node) assumed; interleaved, v "
             "unstated: 2 as in the paper's Figure 6; micro-batch 1; sequence parallelism and fused attention "
             "assumed; FLOPs formula unstated (MFU per Chowdhery et al.): meshplan's model FLOPs used; FSDP's "
             "gather of the updated weights beside the first forward (overlap_zero_gather); no recomputation" +
             std::string(row.cp > 1 ? " (stated for 8K; assumed at 128K); context parallelism all-gathers keys and "
                                      "values, exposed (Sec. 3.3.2)"
                                    : "");
    c.miss_reason = row.cp > 1 ? "at 131072 tokens attention is most of the FLOPs: the measured flash-attention curve "
                                 "ends at 8192 tokens and is extrapolated; the all-gather's load balance (2 cp chunks "
                                 "per rank) is assumed perfect"
                               : "pipeline bubble and FSDP communication at 16K GPUs, with v and the network assumed";
    cases.push_back(std::move(c));
  }
}

void add_megatron_bridge_cases(std::vector<PublishedCase>& cases) {
  // Megatron Bridge (NVIDIA-NeMo/Megatron-Bridge) docs/performance-summary.md,
  // "System: DGX-H100" pre-training tables of the 25.11 and 26.02 NeMo
  // containers: every dense row of a model meshplan has (the Llama 3 8B row
  // runs Megatron-FSDP with a recompute of some layers, which no plan states).
  // Each row's recipe: scripts/performance/configs/llama/ (workload base
  // configs: tp, pp, cp, vp, GBS; llama3_llm_pretrain.py, llama31_llm_pretrain.py:
  // sequence 8192, gradients reduced in bf16) over src/megatron/bridge/recipes/
  // llama/llama3.py (no recompute, sequence parallelism, the distributed
  // optimizer with overlapped gradient reduce-scatter and parameter gather,
  // the fused cross-entropy, TE's tp communication overlap).
  struct BridgeRow {
    const char* name;
    const char* container;
    const char* model;
    std::int64_t gpus, tp, pp, cp, vp, global_batch;
    double tokens_per_s_per_gpu;
  };
  const BridgeRow rows[] = {
      {"Llama 3 70B, 64 H100, FP8, GBS 128", "25.11", "llama3-70b", 64, 4, 8, 1, 5, 128, 1602},
      {"Llama 3 70B, 64 H100, FP8, GBS 256", "26.02", "llama3-70b", 64, 4, 8, 1, 5, 256, 1621},
      {"Llama 3.1 405B, 1024 H100, FP8, GBS 512", "25.11", "llama3-405b", 1024, 8, 8, 2, 8, 512, 292},
      {"Llama 3.1 405B, 1024 H100, FP8, GBS 1536", "26.02", "llama3-405b", 1024, 8, 8, 2, 8, 1536, 311},
  };
  for (const auto& row : rows) {
    PublishedCase c;
    c.name = row.name;
    c.source = std::string("Megatron Bridge performance summary, NeMo ") + row.container + ", DGX-H100";
    c.model = must_load_preset(row.model);
    c.cluster = "dgx-h100";
    Plan& plan = c.plan;
    const std::int64_t dp = row.gpus / (row.tp * row.pp * row.cp);
    plan.mesh.axes = {{Axis::dp, dp}, {Axis::pp, row.pp}, {Axis::cp, row.cp}, {Axis::tp, row.tp}};
    if (row.cp == 1) plan.mesh.axes.erase(plan.mesh.axes.begin() + 2);
    plan.micro_batch = 1;
    plan.global_batch = row.global_batch;
    plan.seq_len = 8192;
    plan.zero_stage = 1;  // use_distributed_optimizer
    plan.overlap_zero_gather = true;  // overlap_param_gather
    plan.sequence_parallel = true;
    plan.tp_comm_overlap = true;
    plan.overlap_p2p_comm = true;  // overlap_p2p_comm where vp > 1 (Megatron Bridge's CommOverlapConfig)
    plan.recompute = Recompute::none;
    plan.attention = Attention::fused;
    plan.loss = Loss::fused;
    plan.schedule = Schedule{ScheduleKind::interleaved, row.vp};
    if (c.model.transformer.layers % (row.pp * row.vp) != 0) {
      // account_for_embedding_in_pipeline_split and _loss_: the embedding and the loss count as a
      // layer each, so 126 + 2 split evenly: the first and last chunks hold one layer.
      plan.stage_layers.assign(static_cast<std::size_t>(row.pp * row.vp), (c.model.transformer.layers + 2) / (row.pp * row.vp));
      plan.stage_layers.front() -= 1;
      plan.stage_layers.back() -= 1;
    }
    plan.precision = Precision::fp8;
    plan.fp32_gradients = false;
    c.unit = ThroughputUnit::tokens_per_s_per_device;
    c.throughput = row.tokens_per_s_per_gpu;
    c.note = std::string("FP8 with current scaling (FP8-CS) priced as meshplan's fp8 (its casts' amax in the same "
                         "pass; weights gathered in bf16); DGX-H100 as dgx-h100; tp communication overlap "
                         "(tp_comm_overlap), overlapped pipeline transfers (overlap_p2p_comm, on where vp > 1) and no "
                         "recompute from the recipe; ZeRO-1 (distributed optimizer) with its parameter gather "
                         "overlapped (overlap_zero_gather), "
                         "gradients in bf16, fused loss; micro-batch 1") +
             (plan.stage_layers.empty() ? "" : "; the embedding and the loss each count as a layer in the pipeline "
                                               "split (account_for_embedding / _loss_in_pipeline_split): chunks of "
                                               "1, 2 x 62, 1 layers") +
             (row.cp > 1 ? "; context parallelism as Megatron's p2p ring" : "");
    c.miss_reason = "the h100-sxm preset has no measured fp8 GEMM rate (fp8 GEMMs at its bf16 fraction of the fp8 peak, "
                    "which explain calls likely optimistic), and the SMs the tp overlap's kernels hold beside the GEMMs "
                    "are not priced (docs/cost-model.md, \"Tensor-parallel communication overlap\")";
    cases.push_back(std::move(c));
  }
}

}  // namespace

std::vector<PublishedCase> published_multi_gpu_cases() {
  std::vector<PublishedCase> cases;
  add_narayanan_cases(cases);
  add_torchtitan_cases(cases);
  add_llama3_cases(cases);
  add_megatron_bridge_cases(cases);
  return cases;
}

std::string published_figure_text(const PublishedCase& c) {
  switch (c.unit) {
    case ThroughputUnit::none: return format_figure("%.2f ", c.published) + unit_of(c.quantity);
    case ThroughputUnit::tokens_per_s_per_device: return format_figure("%.0f tokens/s per GPU", c.throughput);
    case ThroughputUnit::megatron_tflops_per_device:
    case ThroughputUnit::model_tflops_per_device: return format_figure("%.0f TFLOP/s per GPU", c.throughput);
  }
  return "";
}

double error_quantile(const std::vector<PublishedResult>& results, double q) {
  if (results.empty()) return 0;
  std::vector<double> errors;
  for (const auto& r : results) errors.push_back(std::abs(r.error()));
  std::sort(errors.begin(), errors.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(errors.size())));
  return errors[std::clamp<std::size_t>(rank, 1, errors.size()) - 1];
}

std::vector<PublishedResult> predict(const std::vector<PublishedCase>& cases) {
  std::vector<PublishedResult> results;
  for (const auto& c : cases) {
    auto cluster = load_cluster(c.cluster);
    if (!cluster.ok()) throw std::logic_error(std::string(__FILE__) + ": cluster preset " + c.cluster + " failed to load");
    const Explanation ex = explain_plan(c.model, cluster.value, {c.plan.mesh.world_size(), 0}, c.plan);
    PublishedResult r{c, 0};
    const double devices = static_cast<double>(c.plan.mesh.world_size());
    const std::int64_t seq_len = ex.seq_len;
    switch (c.unit) {
      case ThroughputUnit::none: break;
      case ThroughputUnit::tokens_per_s_per_device:
        r.c.published = static_cast<double>(c.plan.global_batch * seq_len) / (c.throughput * devices);
        break;
      case ThroughputUnit::megatron_tflops_per_device:
        r.c.published = megatron_flops_per_step(c.model, c.plan.global_batch, seq_len) / (c.throughput * 1e12 * devices);
        break;
      case ThroughputUnit::model_tflops_per_device:
        r.c.published = ex.time ? ex.time->model_flops_per_step / (c.throughput * 1e12 * devices) : 0;
        break;
    }
    if (ex.memory) {
      const auto& stage0 = ex.memory->stages.front().memory;
      switch (c.quantity) {
        case PublishedQuantity::iteration_time_s: r.predicted = ex.time ? ex.time->step_s : 0; break;
        case PublishedQuantity::first_stage_activations_gib:
          r.predicted = stage0.activations_bytes / (1024.0 * 1024 * 1024);
          break;
        case PublishedQuantity::model_states_gb:
          r.predicted = (stage0.parameters_bytes + stage0.gradients_bytes + stage0.optimizer_bytes) / 1e9;
          break;
        case PublishedQuantity::peak_reserved_gib: {
          const MemoryBreakdown& worst = ex.memory->worst().memory;
          r.predicted = (worst.total_bytes() - worst.runtime_context_bytes) / (1024.0 * 1024 * 1024);
          break;
        }
      }
    }
    results.push_back(std::move(r));
  }
  return results;
}

}  // namespace meshplan
