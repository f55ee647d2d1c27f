#include "model/validate.hpp"

#include "model/plan_defaults.hpp"
#include "model/stage_cost.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

std::string str(std::int64_t value) { return std::to_string(value); }

class Checker {
 public:
  explicit Checker(Problems& problems) : problems_(problems) {}
  void error(std::string where, std::string message) {
    problems_.push_back({Severity::error, std::move(where), std::move(message)});
  }
  void warning(std::string where, std::string message) {
    problems_.push_back({Severity::warning, std::move(where), std::move(message)});
  }

 private:
  Problems& problems_;
};

void check_world(Checker& check, const ClusterSpec& cluster, const Deployment& d, const Plan& plan) {
  const std::int64_t world = d.world_size;
  const std::int64_t per_node = cluster.devices_per_node;
  if (world < 1) {
    check.error("world_size", "must be at least 1, got " + str(world));
    return;
  }
  if (world > kMaxMeshDevices) {
    check.error("world_size", str(world) + " devices; meshplan models at most " + str(kMaxMeshDevices) +
                                  " (every device is a vertex of its topology graph)");
    return;
  }
  if (plan.mesh.world_size() != world) {
    check.error("mesh", "product of the mesh axes (" + plan.mesh.to_string() + " = " + str(plan.mesh.world_size()) +
                            ") must equal the world size (" + str(world) + " devices)");
  }
  if (world > per_node && world % per_node != 0) {
    check.error("world_size", "world size = nodes x devices per node: " + str(world) + " devices is not a whole number of " +
                                  cluster.name + " nodes of " + str(per_node));
  }
  const std::int64_t nodes = (world + per_node - 1) / per_node;
  if (cluster.max_nodes && nodes > *cluster.max_nodes) {
    check.error("world_size", str(world) + " devices need " + str(nodes) + " nodes; " + cluster.name + " has " +
                                  str(*cluster.max_nodes));
  }
  if (d.rank < 0 || d.rank >= world) {
    check.error("rank", "rank " + str(d.rank) + " must be in [0, world size " + str(world) + ")");
  }
}

}  // namespace

std::string batch_size_problem(std::int64_t sequences) {
  if (sequences <= kMaxGlobalBatch) return "";
  return "must be at most 2^40 = " + std::to_string(kMaxGlobalBatch) + " sequences, got " + std::to_string(sequences);
}

namespace {

void check_batch(Checker& check, const Plan& plan) {
  if (plan.micro_batch < 1) check.error("micro_batch", "must be at least 1, got " + str(plan.micro_batch));
  if (plan.global_batch < 1) check.error("global_batch", "must be at least 1, got " + str(plan.global_batch));
  if (const std::string problem = batch_size_problem(plan.global_batch); !problem.empty()) check.error("global_batch", problem);
  if (const std::string problem = batch_size_problem(plan.micro_batch); !problem.empty()) check.error("micro_batch", problem);
  if (plan.micro_batch < 1 || plan.global_batch < 1 || plan.global_batch > kMaxGlobalBatch ||
      plan.micro_batch > kMaxGlobalBatch) {
    return;
  }
  const Mesh& mesh = plan.mesh;
  std::int64_t per_step = 0;
  if (__builtin_mul_overflow(plan.micro_batch, mesh.data_parallel_size(), &per_step)) {
    check.error("micro_batch", "micro-batch " + str(plan.micro_batch) + " x data-parallel degree " +
                                   str(mesh.data_parallel_size()) + " is past any global batch");
    return;
  }
  if (plan.global_batch % per_step != 0) {
    check.error("global_batch", "micro-batches x micro-batch x data-parallel degree must equal the global batch: " +
                                    str(plan.global_batch) + " is not a multiple of micro-batch " + str(plan.micro_batch) +
                                    " x (dp " + str(mesh.size(Axis::dp)) + " x fsdp " + str(mesh.size(Axis::fsdp)) +
                                    " x ep " + str(mesh.size(Axis::ep)) + ") = " + str(per_step));
  }
  if (plan.zero_stage < 0 || plan.zero_stage > 3) check.error("zero", "ZeRO stage must be 0, 1, 2 or 3, got " + str(plan.zero_stage));
  if (plan.zero_stage > 0 && mesh.zero_group_size() == 1) {
    check.warning("zero", "ZeRO stage " + str(plan.zero_stage) + " shards over dp (and ep for dense weights), which is 1 here: no effect");
  }
  if (plan.memory_headroom < 0 || plan.memory_headroom >= 1) {
    check.error("memory_headroom", "must be a fraction in [0, 1)");
  }
}

void check_unsupported_axes(Checker& check, const ModelSpec& model, const Plan& plan) {
  const Mesh& mesh = plan.mesh;
  const std::string kind = to_string(model.kind);
  if (model.kind == ModelKind::cnn) {
    for (Axis axis : {Axis::tp, Axis::pp, Axis::cp, Axis::ep}) {
      if (mesh.size(axis) > 1) {
        check.error("mesh." + to_string(axis), to_string(axis) + " is not supported for cnn models (use dp and fsdp)");
      }
    }
  }
  if (model.kind == ModelKind::mlp) {
    for (Axis axis : {Axis::cp, Axis::ep}) {
      if (mesh.size(axis) > 1) check.error("mesh." + to_string(axis), to_string(axis) + " needs a transformer; this is an mlp");
    }
  }
  if (plan.recompute == Recompute::selective_op && model.kind != ModelKind::transformer) {
    check.error("recompute", "selective-op is torchtitan's op-level checkpointing of transformer blocks; " + kind +
                                 " models have none (use none or full)");
  }
  if (plan.recompute_modules != kDefaultRecomputeModules) {
    const TransformerDims& t = model.transformer;
    if (plan.recompute != Recompute::selective) {
      check.error("recompute_modules", "recompute modules are what selective recompute repeats; the plan's recompute is " +
                                           to_string(plan.recompute));
    } else if (plan.recompute_modules == 0) {
      check.error("recompute_modules", "names no module (choose from " + std::string(recompute_module_choices) + ")");
    } else if (model.kind != ModelKind::transformer) {
      check.error("recompute_modules", "recompute modules are parts of transformer layers; " + kind + " models have none");
    } else if (recomputes(plan, RecomputeModule::mla_up_proj) && !t.latent_attention()) {
      check.error("recompute_modules", "mla_up_proj recomputes multi-head latent attention's up-projections; this "
                                       "model's attention has none (kv_lora_rank)");
    } else if (recomputes(plan, RecomputeModule::moe_act) && t.experts == 0) {
      check.error("recompute_modules", "moe_act recomputes the routed experts' activation; this model has no experts");
    } else if (recomputes(plan, RecomputeModule::mlp) && t.experts > 0 && t.dense_layers.empty()) {
      check.error("recompute_modules", "mlp checkpoints a dense MLP; every layer of this model has experts (moe_act "
                                       "recomputes theirs)");
    } else if (recomputes(plan, RecomputeModule::shared_experts) && t.shared_expert_ffn == 0) {
      check.error("recompute_modules", "shared_experts checkpoints the shared experts; this model has none");
    }
  }
  if (plan.sequence_parallel && model.kind != ModelKind::transformer) {
    check.error("sequence_parallel", "sequence parallelism splits a sequence dimension; " + kind + " models have none");
  } else if (plan.sequence_parallel && mesh.size(Axis::tp) == 1) {
    check.warning("sequence_parallel", "sequence parallelism works within tp, which is 1 here: no effect");
  }
  if (plan.cp_comm != CpComm::ring && mesh.size(Axis::cp) == 1) {
    check.warning("cp_comm", "the " + to_string(plan.cp_comm) + " exchange moves keys and values between cp ranks, " +
                                 "and cp is 1 here: no effect");
  }
}

void check_transformer(Checker& check, const TransformerDims& t, const Plan& plan, std::int64_t seq_len) {
  const std::int64_t tp = plan.mesh.size(Axis::tp);
  const std::int64_t cp = plan.mesh.size(Axis::cp);
  const std::int64_t ep = plan.mesh.size(Axis::ep);
  if (t.heads % tp != 0) check.error("mesh.tp", "tp (" + str(tp) + ") must divide the attention heads (" + str(t.heads) + ")");
  if (t.heads % tp == 0 && t.kv_tp_split(tp) != tp) {
    check.warning("mesh.tp", "tp (" + str(tp) + ") does not divide the " + str(t.key_value_heads()) +
                                 " key/value heads: every tp rank holds all of them (replicated, gradients summed over tp)");
  }
  for (const WidthFault& w : mlp_width_faults(t, plan)) {
    check.error("mesh.tp", "tp (" + str(w.tp) + ") must divide " + w.what + " (" + str(w.width) + ")");
  }
  if (t.vocab % tp != 0) {
    check.warning("mesh.tp", "vocabulary " + str(t.vocab) + " is not a multiple of tp " + str(tp) +
                                 "; Megatron pads it to a multiple of tp (the padding, under tp rows, is not counted here)");
  }
  if (seq_len < 1) check.error("seq_len", "must be at least 1, got " + str(seq_len));
  if (t.positions == Positions::learned && seq_len > t.seq_len) {
    check.error("seq_len", "sequence " + str(seq_len) + " exceeds the model's " + str(t.seq_len) +
                               " learned positions (a position table of " + str(seq_len) +
                               " rows is another model: a copy of its YAML with seq_len: " + str(seq_len) + ")");
  }
  if (cp > 1 && seq_len % cp != 0) {
    check.error("mesh.cp", "cp (" + str(cp) + ") must divide the sequence length (" + str(seq_len) + ")");
  } else if (plan.sequence_parallel && tp > 1 && seq_len >= 1 && !plan.mesh.sequence_parallel_divides(seq_len)) {
    // Megatron-LM splits the sequence dimension over tp (and asserts it divides); so do the executor and the memory model.
    check.error("sequence_parallel", "sequence parallelism splits each " + std::string(cp > 1 ? "cp rank's " : "") +
                                         "sequence of " + str(seq_len / cp) + " tokens over tp (" + str(tp) +
                                         "), which must divide it; use a sequence length that is a multiple of " +
                                         str(cp * tp) + ", or turn sequence parallelism off");
  }
  if (cp > 1 && plan.cp_comm == CpComm::all_to_all && t.heads % tp == 0 && (t.heads / tp) % cp != 0) {
    check.error("cp_comm", "all-to-all context parallelism gives each cp rank a group of heads: cp (" + str(cp) +
                               ") must divide the " + str(t.heads / tp) + " attention heads per tp rank (use ring or all-gather)");
  }
  if (ep > 1 && t.experts == 0) check.error("mesh.ep", "ep (" + str(ep) + ") needs a mixture-of-experts model; this one is dense");
  const ExpertTpFaults etp = expert_tp_faults(plan, t.experts);
  if (etp.dense_model) check.error("expert_tensor_parallel", "needs a mixture-of-experts model; this one is dense");
  if (etp.value) {
    check.error("expert_tensor_parallel", "must be 1 (experts whole, their tp ranks join ep) or tp (" + str(tp) +
                                              ", the default), got " + str(plan.expert_tensor_parallel));
  }
  if (etp.no_sequence_parallel) {
    check.error("expert_tensor_parallel", "experts out of tp route each tp rank's own tokens, which sequence "
                                          "parallelism gives it: turn it on (Megatron-Core requires it for MoE with tp)");
  }
  if (etp.ep_not_outside_tp) {
    Mesh moved;  // the same axes with ep moved to just outside tp
    for (const MeshAxis& a : plan.mesh.axes) {
      if (a.axis == Axis::ep) continue;
      if (a.axis == Axis::tp) moved.axes.push_back({Axis::ep, ep});
      moved.axes.push_back(a);
    }
    check.error("expert_tensor_parallel", "experts out of tp form one group of ep x tp ranks: ep must sit directly "
                                          "outside tp in the mesh order (e.g. " + moved.to_string() + "), got " +
                                          plan.mesh.to_string());
  }
  const ExpertSplit experts = expert_split(plan);
  if (plan.ep_dispatch != EpDispatch::all_to_all && experts.ep == 1) {
    check.warning("ep_dispatch", "the " + to_string(plan.ep_dispatch) + " dispatch moves routed tokens between expert-"
                                 "parallel ranks, and there are none here: no effect");
  }
  if (experts.ep > 1 && t.experts > 0 && t.experts % experts.ep != 0) {
    check.error("mesh.ep", (experts.tokens > 1 ? "ep x tp (" : "ep (") + str(experts.ep) + ") must divide the experts (" +
                               str(t.experts) + ")");
  }
}

void check_mlp(Checker& check, const MlpDims& m, const Plan& plan) {
  const std::int64_t tp = plan.mesh.size(Axis::tp);
  if (tp == 1) return;
  const std::vector<std::int64_t> widths = mlp_tp_split_widths(m);
  for (std::size_t i = 0; i < widths.size(); ++i) {
    const bool column = i % 2 == 0;
    const std::int64_t split = widths[i];
    if (split % tp != 0) {
      check.error("mesh.tp", "tp (" + str(tp) + ") must divide " + (column ? "the output" : "the input") +
                                 " size (" + str(split) + ") of " + (column ? "column" : "row") + "-parallel linear" +
                                 str(static_cast<std::int64_t>(i)));
    }
  }
}

void check_schedule(Checker& check, const Plan& plan) {
  const std::int64_t pp = plan.mesh.size(Axis::pp);
  const std::int64_t m = plan.micro_batches();
  if (plan.schedule.kind == ScheduleKind::interleaved) {
    if (pp == 1) check.error("schedule", "interleaving needs pipeline stages; pp is 1 here (use 1f1b)");
    if (pp > 1 && m > 0 && m % pp != 0) {
      check.error("schedule", "the interleaved schedule needs the micro-batches (" + str(m) +
                                  ") to be a multiple of pp (" + str(pp) + ") (Narayanan et al. 2021, Sec. 2.2)");
    }
  }
  if (pp > 1 && m > 0 && m < pp) {
    check.warning("schedule", str(m) + " micro-batches for " + str(pp) +
                                  " pipeline stages: most of the step is bubble (efficiency m / (m + p - 1) = " +
                                  std::to_string(100 * m / (m + pp - 1)) + "%)");
  }
}

void check_expert_overlap(Checker& check, const ModelSpec& model, const Plan& plan) {
  if (!plan.overlap_expert_parallel) return;
  const bool experts = model.has_experts();
  if (!experts) {
    check.error("overlap_expert_parallel", "hides the experts' all-to-alls; this " + to_string(model.kind) +
                                               " model has no experts");
    return;
  }
  if (const std::string problem = expert_overlap_problem(plan); !problem.empty()) {
    check.error("overlap_expert_parallel", problem);
  } else if (expert_split(plan).ep == 1) {
    check.warning("overlap_expert_parallel", "hides the expert-parallel all-to-alls, and there are none here (ep 1): no effect");
  } else if (plan.micro_batches() == 1) {
    check.warning("overlap_expert_parallel", "pairs a micro-batch's forward with another's backward; with one "
                                             "micro-batch there is none to pair: no effect");
  }
}

// Megatron-LM refuses --tp-comm-overlap without sequence parallelism
// (arguments.py: "Tensor parallel communication/GEMM overlap can happen only
// when sequence parallelism is enabled").
void check_tp_comm_overlap(Checker& check, const ModelSpec& model, const Plan& plan) {
  if (!plan.tp_comm_overlap) return;
  if (model.kind != ModelKind::transformer) {
    check.error("tp_comm_overlap", "overlaps the sequence-parallel collectives of transformer layers; this " +
                                       to_string(model.kind) + " model has none");
  } else if (plan.mesh.size(Axis::tp) == 1) {
    check.warning("tp_comm_overlap", "overlaps tensor-parallel collectives, and there are none here (tp 1): no effect");
  } else if (!plan.sequence_parallel) {
    check.error("tp_comm_overlap", "overlaps the all-gathers and reduce-scatters of sequence parallelism; it needs "
                                   "sequence parallelism on (Megatron-LM refuses --tp-comm-overlap without it)");
  }
}

// NeMo's "Communication Overlap" guide: "NeMo supports PP communication
// overlap only with virtual pipelining".
void check_p2p_overlap(Checker& check, const Plan& plan) {
  if (!plan.overlap_p2p_comm) return;
  if (plan.mesh.size(Axis::pp) == 1) {
    check.warning("overlap_p2p_comm", "overlaps pipeline transfers, and there are none here (pp 1): no effect");
  } else if (plan.schedule.kind != ScheduleKind::interleaved) {
    check.error("overlap_p2p_comm", "overlaps pipeline transfers under the interleaved schedule only (as Megatron-Core "
                                    "and NeMo run it); this plan's schedule is " + to_string(plan.schedule));
  }
}

// Megatron-LM: "--overlap-param-gather only supported with distributed
// optimizer", "--overlap-grad-reduce should be turned on when using
// --overlap-param-gather" (arguments.py).
void check_zero_gather_overlap(Checker& check, const Plan& plan) {
  if (!plan.overlap_zero_gather) return;
  if (plan.zero_stage != 1 && plan.zero_stage != 2) {
    check.warning("overlap_zero_gather", "overlaps ZeRO-1/2's gather of the updated weights, and this plan has ZeRO " +
                                             std::to_string(plan.zero_stage) +
                                             (plan.zero_stage == 3 ? " (its gathers before each block are fsdp's prefetch)" : "") +
                                             ": no effect");
  } else if (plan.mesh.zero_group_size() == 1) {
    check.warning("overlap_zero_gather", "overlaps ZeRO's gather of the updated weights, and there is one data-parallel "
                                         "rank (dp x ep 1): no effect");
  } else if (!plan.overlap_gradient_reduction) {
    check.error("overlap_zero_gather", "gathers the updated weights bucket by bucket, which needs the gradients' "
                                       "reduction overlapped too (overlap_gradient_reduction; Megatron-LM refuses "
                                       "--overlap-param-gather without --overlap-grad-reduce)");
  }
}

void check_precision(Checker& check, const ClusterSpec& cluster, const Plan& plan) {
  const Dtype dtype = gemm_dtype(plan.precision);
  if (!cluster.device.peak_for(dtype)) check.error("precision", missing_peak_message(cluster.device, dtype));
  // An fp8 plan keeps the LM head, the embedding and the attention core in bf16 (gemm_in_fp8).
  const Dtype unquantized_dtype = gemm_dtype(unquantized(plan.precision));
  if (unquantized_dtype != dtype && !cluster.device.peak_for(unquantized_dtype)) {
    check.error("precision", "fp8 runs the LM head and the attention core in bf16: " +
                                 missing_peak_message(cluster.device, unquantized_dtype));
  }
  if (plan.fp32_gradients && plan.precision == Precision::fp32) {
    check.warning("fp32_gradients", "fp32 training keeps fp32 gradients already: no effect");
  }
}

}  // namespace

std::vector<std::int64_t> mlp_tp_split_widths(const MlpDims& mlp) {
  std::vector<std::int64_t> widths;
  for (std::size_t i = 0; i + 1 < mlp.layer_sizes.size(); ++i)
    widths.push_back(i % 2 == 0 ? mlp.layer_sizes[i + 1] : mlp.layer_sizes[i]);
  return widths;
}

Problems validate_plan(const ModelSpec& model, const LayerGraph& graph, const ClusterSpec& cluster,
                       const Deployment& deployment, const Plan& plan) {
  Problems problems;
  Checker check(problems);
  check_world(check, cluster, deployment, plan);
  check_batch(check, plan);
  check_unsupported_axes(check, model, plan);
  const std::int64_t seq_len = plan_seq_len(model, plan);
  if (model.kind == ModelKind::transformer) check_transformer(check, model.transformer, plan, seq_len);
  if (model.kind == ModelKind::mlp) check_mlp(check, model.mlp, plan);
  check_schedule(check, plan);
  check_expert_overlap(check, model, plan);
  check_tp_comm_overlap(check, model, plan);
  check_p2p_overlap(check, plan);
  check_zero_gather_overlap(check, plan);
  check_precision(check, cluster, plan);
  if (model.kind != ModelKind::cnn || plan.mesh.size(Axis::pp) == 1) {
    auto partition = partition_stages(graph, plan.mesh.size(Axis::pp), plan.schedule.virtual_stages, plan.stage_layers);
    problems.insert(problems.end(), partition.problems.begin(), partition.problems.end());
  }
  return problems;
}

Problems job_problems(const ModelSpec& model, const LayerGraph& graph, const ClusterSpec& cluster,
                      std::int64_t world_size, std::int64_t seq_len, Precision precision,
                      RecomputeModules recompute_modules) {
  Plan probe;
  if (recompute_modules != kDefaultRecomputeModules) {
    probe.recompute = Recompute::selective;
    probe.recompute_modules = recompute_modules;
  }
  probe.mesh.axes = {{Axis::dp, world_size}};
  probe.global_batch = world_size;
  probe.seq_len = seq_len;
  probe.precision = precision;
  Problems problems;
  for (Problem& p : validate_plan(model, graph, cluster, Deployment{world_size, 0}, probe))
    if (p.severity == Severity::error &&
        (p.where == "world_size" || p.where == "seq_len" || p.where == "precision" || p.where == "recompute_modules"))
      problems.push_back(std::move(p));
  return problems;
}

}  // namespace meshplan
