// The decoder-only transformer as ops: GPT-2/3 (LayerNorm, GELU, learned
// positions, dropout) and Llama/Gemma (RMSNorm, SwiGLU/GeGLU, rotary, grouped
// -query attention) from the same code, and optional mixture-of-experts MLPs.
//
// Parameter splits follow Megatron-LM (Shoeybi et al. 2019, Sec. 3): QKV and
// the MLP's first matmul are column-parallel, the attention output and the
// MLP's second matmul row-parallel, the embedding and output layer
// vocabulary-parallel. Saved activations per layer reproduce Korthikanti et
// al. 2022, Sec. 4.1: with 16-bit activations, dropout, ffn = 4h and
// kv_heads = heads, they add up to s b h (34 + 5 a s / h) bytes, of which
// s b h (24 + 5 a s / h) sit in tensor-parallel regions. The 5 a s / h
// terms (softmax output, dropout mask and output) are kept only by unfused
// attention; fused attention (FlashAttention-2, Dao 2023, Sec. 3.1) keeps the
// per-row log-sum-exp in fp32 instead (4 a s bytes per sample) and
// regenerates its dropout mask from the RNG state.
#include "model/layer_graph.hpp"

namespace meshplan {
namespace {

// Builds the graph block by block; the model's sizes as doubles are members
// so that every op below reads like the formula it states.
class TransformerBuilder {
 public:
  TransformerBuilder(const TransformerDims& dims, std::int64_t sequence)
      : t(dims),
        seq_len(sequence),
        s(static_cast<double>(sequence)),
        h(static_cast<double>(dims.hidden)),
        a(static_cast<double>(dims.heads)),
        q(static_cast<double>(dims.query_width())),
        kv(static_cast<double>(dims.key_width())),
        vw(static_cast<double>(dims.value_width())),
        vocab(static_cast<double>(dims.vocab)),
        gated(dims.feed_forward != FeedForward::gelu),
        dropout(dims.dropout > 0),
        experts(dims.experts > 0 ? static_cast<double>(dims.experts) : 1.0),
        routed(dims.experts > 0 ? static_cast<double>(dims.top_k) : 1.0),
        expert_slots(dims.expert_slots_per_token()),
        norm_parameters(dims.norm == Norm::layernorm ? 2 * h : h),
        norm_flops_per_element(dims.norm == Norm::layernorm ? 8 : 4) {
    g.seq_len = sequence;
    g.kv_heads = dims.key_value_heads();
  }

  LayerGraph build() {
    OpId prev = embedding();
    for (std::int64_t layer = 0; layer < t.layers; ++layer) {
      const int block = static_cast<int>(g.blocks.size());
      const std::string p = "layer" + std::to_string(layer) + ".";
      g.blocks.push_back({"layer" + std::to_string(layer), BlockKind::layer, {}});
      const OpId attn_residual_id = attention(block, p, prev);
      prev = mlp(block, p, attn_residual_id, t.expert_layer(layer));
    }
    head(prev);
    return std::move(g);
  }

 private:
  double bias(double width) const { return t.bias ? width : 0.0; }

  // ---- embedding: token rows, learned positions, dropout; returns its last op
  OpId embedding() {
    g.blocks.push_back({"embedding", BlockKind::embedding, {}});
    Op tokens = make_op("embedding.tokens", OpKind::embedding, 0);
    tokens.tp_split_parameters = vocab * h;
    tokens.output_elements_per_sample = s * h;
    tokens.memory_elements_per_sample = 2 * s * h;  // gather rows, write them
    OpId prev = g.add_op(tokens);
    if (t.positions == Positions::learned) {
      Op positions = make_op("embedding.positions", OpKind::elementwise, 0);
      positions.replicated_parameters = static_cast<double>(t.seq_len) * h;
      positions.forward_flops_per_sample = s * h;
      positions.output_elements_per_sample = s * h;
      positions.memory_elements_per_sample = 3 * s * h;
      const OpId id = g.add_op(positions);
      g.connect(prev, id);
      prev = id;
  }
  if (dropout) {
    Op drop = make_op("embedding.dropout", OpKind::elementwise, 0);
    drop.saved = {{"embedding dropout mask", s * h, 1, false, false}};
    drop.memory_elements_per_sample = 2 * s * h;
    drop.memory_fixed_bytes_per_sample = s * h;
    drop.forward_flops_per_sample = s * h;
    drop.output_elements_per_sample = s * h;
    const OpId id = g.add_op(drop);
    g.connect(prev, id);
    prev = id;
  }
    return prev;
  }

  // A layer's pre-norm (ln1 before attention, ln2 before the MLP): it keeps its input.
  Op pre_norm(const std::string& p, const std::string& name, int block) const {
    Op norm = make_op(p + name, OpKind::norm, block);
    norm.replicated_parameters = norm_parameters;
    norm.forward_flops_per_sample = norm_flops_per_element * s * h;
    norm.output_elements_per_sample = s * h;
    norm.saved = {{name + " input", s * h, 0, false, false}};
    norm.memory_elements_per_sample = 2 * s * h;
    norm.module = RecomputeModule::layernorm;  // repeated where its output is not kept
    return norm;
  }

  // The residual add after a half-layer's output projection (fused bias + dropout + add),
  // which keeps the dropout mask when the model has dropout.
  Op residual_add(const std::string& name, const std::string& mask, int block) const {
    Op add = make_op(name, OpKind::elementwise, block);
    add.forward_flops_per_sample = (dropout ? 2 : 1) * s * h;
    add.output_elements_per_sample = s * h;
    if (dropout) add.saved = {{mask, s * h, 1, false, false}};
    add.memory_elements_per_sample = 3 * s * h;
    add.memory_fixed_bytes_per_sample = dropout ? s * h : 0;
    return add;
  }

  // Rotary position embedding of the queries and keys (Su et al. 2021), an
  // elementwise pass over both after the QKV projection: each element times
  // cos plus its rotated partner times sin, read once and written once where
  // fused (counted so), more passes in eager code. It saves only the cos and
  // sin tables (constants, not activations); its gradient is the inverse
  // rotation of the incoming one, one more read and write.
  // Latent attention rotates only the queries' rotary part and the one rotary key all heads share
  // (`width`: the elements per token it rotates).
  OpId rotary(int block, const std::string& p, OpId qkv_id, double width) {
    Op rope = make_op(p + "attn.rotary", OpKind::elementwise, block);
    rope.forward_flops_per_sample = 3 * s * width;
    rope.output_elements_per_sample = s * width;
    rope.memory_elements_per_sample = 2 * s * width;
    rope.tensor_parallel_region = true;  // per head: tp splits it as it splits the heads
    const OpId id = g.add_op(rope);
    g.connect(qkv_id, id);
    return id;
  }

  // What the core attention reads: the op that produced the (rotated) queries and keys, and the
  // op that produced the values.
  struct Projected {
    OpId keys, values;
  };

  // Queries, keys and values in one column-parallel GEMM (grouped-query attention's key/value
  // heads split over tp only where it divides them), then rotary positions.
  Projected qkv_projection(int block, const std::string& p, OpId ln1_id) {
    Op qkv = make_op(p + "attn.qkv", OpKind::gemm, block);
    qkv.tp_split_parameters = h * q + bias(q);
    qkv.kv_parameters = 2 * (h * kv + bias(kv));  // whole on every tp rank when tp does not divide the kv heads
    qkv.forward_flops_per_sample = 2 * s * h * (q + 2 * kv);
    qkv.output_elements_per_sample = s * (q + 2 * kv);
    qkv.saved = {{"qkv input", s * h, 0, false, false}};
    qkv.saved[0].module = RecomputeModule::layernorm;  // the first norm's output
    const std::int64_t kv_columns = 2 * t.key_width();
    qkv.gemm = {s, t.query_width() + kv_columns, t.hidden, 1, kv_columns};
    qkv.tp_split = TpSplit::columns;
    // op-level checkpointing keeps q and v (matmuls 1 and 3) and repeats k (2).
    qkv.op_sac_kept = {{"query projection", s * q, 0, true, false}, {"value projection", s * kv, 0, true, false, KeptBy::both, true}};
    qkv.op_sac_recomputed = kv / (q + 2 * kv);
    const OpId qkv_id = g.add_op(qkv);
    g.connect(ln1_id, qkv_id);
    if (t.positions != Positions::rotary) return {qkv_id, qkv_id};
    return {rotary(block, p, qkv_id, q + kv), qkv_id};
  }

  // A latent's norm (RMSNorm or LayerNorm as the model's), on the sequence-parallel region's rows.
  Op latent_norm(const std::string& name, int block, double width) const {
    Op norm = make_op(name, OpKind::norm, block);
    norm.replicated_parameters = t.norm == Norm::layernorm ? 2 * width : width;
    norm.forward_flops_per_sample = norm_flops_per_element * s * width;
    norm.output_elements_per_sample = s * width;
    norm.saved = {{"latent norm input", s * width, 0, false, false}};
    norm.memory_elements_per_sample = 2 * s * width;
    return norm;
  }

  // A latent's up-projection to every head: column-parallel, its input the normed latent.
  Op up_projection(const std::string& name, int block, double latent, std::int64_t latent_width, double out,
                   std::int64_t out_width) const {
    Op up = make_op(name, OpKind::gemm, block);
    up.tp_split_parameters = latent * out;
    up.forward_flops_per_sample = 2 * s * latent * out;
    up.output_elements_per_sample = s * out;
    up.saved = {{"up-projection input (normed latent)", s * latent, 0, false, false}};
    up.gemm = {s, out_width, latent_width, 1};
    up.tp_split = TpSplit::columns;
    up.op_sac_recomputed = 1;
    up.module = RecomputeModule::mla_up_proj;
    return up;
  }

  // Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1; Megatron-Core's
  // MLASelfAttention): hidden is projected down to a query latent (q_lora_rank) and a key/value
  // latent (kv_lora_rank) plus one rotary key of qk_rope_head_dim shared by all heads, each latent
  // normed and projected up per head, column-parallel. The down-projections are whole on every tp
  // rank (Megatron-Core's duplicated linears): under sequence parallelism each rank projects its own
  // rows and the up-projections gather the latents, not hidden. The keys are each head's
  // up-projected part and the shared rotary key; the rotation covers the queries' rotary parts and
  // that key. Training runs this unabsorbed form (the absorbed one is for decoding).
  Projected latent_projections(int block, const std::string& p, OpId ln1_id) {
    const double rope = static_cast<double>(t.qk_rope_head_dim);
    const double kv_latent = static_cast<double>(t.kv_lora_rank), q_latent = static_cast<double>(t.q_lora_rank);
    // Op-level checkpointing: of the matmuls (q down, q up, kv down, kv up, out) every second is repeated.
    OpId queries_id;
    if (t.q_lora_rank > 0) {
      Op down = make_op(p + "attn.q_down", OpKind::gemm, block);
      down.replicated_parameters = h * q_latent;
      down.forward_flops_per_sample = 2 * s * h * q_latent;
      down.output_elements_per_sample = s * q_latent;
      down.saved = {{"qkv input", s * h, 0, false, false}};  // read by both down-projections, kept once
      down.saved[0].module = RecomputeModule::layernorm;
      down.gemm = {s, t.q_lora_rank, t.hidden, 1};
      down.tp_split = TpSplit::sequence;
      down.op_sac_kept = {{"query latent", s * q_latent, 0, false, false}};
      down.op_sac_recomputed = 0;
      const OpId down_id = g.add_op(down);
      g.connect(ln1_id, down_id);
      const OpId norm_id = g.add_op(latent_norm(p + "attn.q_norm", block, q_latent));
      g.connect(down_id, norm_id);
      queries_id = g.add_op(up_projection(p + "attn.q_up", block, q_latent, t.q_lora_rank, q, t.query_width()));
      g.connect(norm_id, queries_id);
    } else {  // queries straight from hidden (DeepSeek-V2-Lite)
      Op query = make_op(p + "attn.q", OpKind::gemm, block);
      query.tp_split_parameters = h * q;
      query.forward_flops_per_sample = 2 * s * h * q;
      query.output_elements_per_sample = s * q;
      query.saved = {{"qkv input", s * h, 0, false, false}};
      query.saved[0].module = RecomputeModule::layernorm;
      query.gemm = {s, t.query_width(), t.hidden, 1};
      query.tp_split = TpSplit::columns;
      query.op_sac_kept = {{"query projection", s * q, 0, true, false}};
      query.op_sac_recomputed = 0;
      queries_id = g.add_op(query);
      g.connect(ln1_id, queries_id);
    }
    Op down = make_op(p + "attn.kv_down", OpKind::gemm, block);
    const double kv_down = static_cast<double>(t.kv_down_width());
    down.replicated_parameters = h * kv_down;
    down.forward_flops_per_sample = 2 * s * h * kv_down;
    down.output_elements_per_sample = s * kv_down;
    down.gemm = {s, t.kv_down_width(), t.hidden, 1};
    down.tp_split = TpSplit::sequence;
    down.op_sac_kept = {{"key/value latent and rotary key", s * kv_down, 0, false, false}};
    down.op_sac_recomputed = 0;
    const OpId down_id = g.add_op(down);
    g.connect(ln1_id, down_id);
    const OpId norm_id = g.add_op(latent_norm(p + "attn.kv_norm", block, kv_latent));
    g.connect(down_id, norm_id);
    const OpId up_id = g.add_op(up_projection(p + "attn.kv_up", block, kv_latent, t.kv_lora_rank,
                                              static_cast<double>(t.kv_up_width()), t.kv_up_width()));
    g.connect(norm_id, up_id);

    // The queries' rotary parts (a x rope) and the shared rotary key, which every tp rank needs whole.
    Op rope_op = make_op(p + "attn.rotary", OpKind::elementwise, block);
    rope_op.forward_flops_per_sample = 3 * s * (a + 1) * rope;
    rope_op.output_elements_per_sample = s * (a + 1) * rope;
    rope_op.memory_elements_per_sample = 2 * s * (a + 1) * rope;
    rope_op.tensor_parallel_region = true;
    rope_op.tp_gathered_input_elements_per_sample = s * rope;
    rope_op.module = RecomputeModule::mla_up_proj;
    const OpId rope_id = g.add_op(rope_op);
    g.connect(queries_id, rope_id);
    g.connect(down_id, rope_id);
    g.connect(up_id, rope_id);
    return {rope_id, up_id};
  }

  // ---- a layer's attention half, through the residual add; returns that add
  OpId attention(int block, const std::string& p, OpId prev) {
    const OpId ln1_id = g.add_op(pre_norm(p, "ln1", block));
    g.connect(prev, ln1_id);
    const Projected projected = t.latent_attention() ? latent_projections(block, p, ln1_id) : qkv_projection(block, p, ln1_id);
    const OpId keys_id = projected.keys;

    Op scores = make_op(p + "attn.scores", OpKind::attention_scores, block);
    scores.forward_flops_per_sample = 2 * s * s * q;  // q: heads x the query/key head size
    scores.output_elements_per_sample = a * s * s;
    scores.saved = {{"query", s * q, 0, true, false},
                    {"key", s * kv, 0, true, false, KeptBy::both, true},
                    {"softmax statistics (fp32 log-sum-exp)", a * s, 4, true, false, KeptBy::fused_attention}};
    if (t.latent_attention()) {  // the up-projections' outputs, which mla_up_proj recomputes
      scores.saved[0].module = scores.saved[1].module = RecomputeModule::mla_up_proj;
    }
    scores.attention_heads = t.heads;
    scores.head_dim = t.head_size();
    scores.gemm = {s, seq_len, t.head_size(), t.heads};
    scores.tp_split = TpSplit::heads;
    scores.core_attention = true;
    const OpId scores_id = g.add_op(scores);
    g.connect(keys_id, scores_id);

    Op softmax = make_op(p + "attn.softmax", OpKind::softmax, block);
    softmax.forward_flops_per_sample = 5 * a * s * s;
    softmax.output_elements_per_sample = a * s * s;
    softmax.saved = {{"softmax output", a * s * s, 0, true, true, KeptBy::unfused_attention}};
    softmax.memory_elements_per_sample = 2 * a * s * s;  // fused scale + mask + softmax
    softmax.tensor_parallel_region = true;
    softmax.core_attention = true;
    OpId probs_id = g.add_op(softmax);
    g.connect(scores_id, probs_id);

    if (dropout) {
      Op drop = make_op(p + "attn.dropout", OpKind::elementwise, block);
      drop.forward_flops_per_sample = a * s * s;
      drop.output_elements_per_sample = a * s * s;
      drop.saved = {{"attention dropout mask", a * s * s, 1, true, true, KeptBy::unfused_attention}};
      drop.memory_elements_per_sample = 2 * a * s * s;
      drop.memory_fixed_bytes_per_sample = a * s * s;
      drop.tensor_parallel_region = true;
      drop.core_attention = true;
      const OpId id = g.add_op(drop);
      g.connect(probs_id, id);
      probs_id = id;
    }

    Op values = make_op(p + "attn.values", OpKind::attention_values, block);
    const double out_width = a * static_cast<double>(t.value_head_size());  // the heads' outputs
    values.forward_flops_per_sample = 2 * s * s * out_width;
    values.output_elements_per_sample = s * out_width;
    values.saved = {{"value", s * vw, 0, true, false, KeptBy::both, true}};
    if (t.latent_attention()) values.saved[0].module = RecomputeModule::mla_up_proj;
    // Without dropout the probabilities P V reads are the softmax output already saved.
    if (dropout) values.saved.push_back({"attention dropout output", a * s * s, 0, true, true, KeptBy::unfused_attention});
    values.gemm = {s, t.value_head_size(), seq_len, t.heads};
    values.tp_split = TpSplit::heads;
    values.core_attention = true;
    values.op_sac_kept = {{"attention output", s * out_width, 0, true, false, KeptBy::fused_attention},
                          {"softmax statistics (fp32 log-sum-exp)", a * s, 4, true, false, KeptBy::fused_attention}};
    const OpId values_id = g.add_op(values);
    g.connect(probs_id, values_id);
    g.connect(projected.values, values_id);

    Op out = make_op(p + "attn.out", OpKind::gemm, block);
    out.tp_split_parameters = out_width * h;
    out.replicated_parameters = bias(h);
    out.forward_flops_per_sample = 2 * s * out_width * h;
    out.output_elements_per_sample = s * h;
    out.saved = {{"attention projection input", s * out_width, 0, true, false}};
    out.gemm = {s, t.hidden, t.heads * t.value_head_size(), 1};
    out.tp_split = TpSplit::rows;
    // Matmul 4 is repeated, but its reduce-scatter's output (sequence parallelism) is on the save list.
    out.op_sac_kept = {{"attention projection after its reduce-scatter", s * h, 0, false, false, KeptBy::both, false, true}};
    const OpId out_id = g.add_op(out);
    g.connect(values_id, out_id);

    const OpId attn_residual_id = g.add_op(residual_add(p + "attn.residual", "attention output dropout mask", block));
    g.connect(out_id, attn_residual_id);
    g.connect(prev, attn_residual_id);

    return attn_residual_id;
  }

  // ---- a layer's MLP half (with the router of a mixture of experts, and its
  // shared experts), through the residual add
  OpId mlp(int block, const std::string& p, OpId attn_residual_id, bool moe) {
    const OpId norm_id = g.add_op(pre_norm(p, "ln2", block));
    g.connect(attn_residual_id, norm_id);

    OpId mlp_input_id = norm_id;
    if (moe) {
      Op router = make_op(p + "mlp.router", OpKind::gemm, block);
      router.replicated_parameters = h * experts;
      router.forward_flops_per_sample = 2 * s * h * experts;
      router.output_elements_per_sample = s * h * expert_slots;  // tokens dispatched to their experts, padded to capacity
      // Its weight gradient reads its input, the second norm's output (the experts save their
      // dispatched copies of it, not it; shared experts read the same tensor).
      router.saved = {{"router probabilities", s * experts, 4, false, false}, {"router input", s * h, 0, false, false}};
      router.saved[1].module = RecomputeModule::layernorm;  // the second norm's output
      router.gemm = {s, t.experts, t.hidden, 1};
      router.tp_split = TpSplit::sequence;  // each tp rank routes its own tokens under sequence parallelism (Megatron-Core)
      router.keeps_precision = true;
      router.memory_fixed_bytes_per_sample = 2 * s * experts * 4;  // fp32 softmax over experts
      router.op_sac_kept = {{"router logits", s * experts, 0, false, false}};  // matmul 5 (the experts' grouped matmuls are repeated)
      router.op_sac_recomputed = 0;
      const OpId id = g.add_op(router);
      g.connect(norm_id, id);
      mlp_input_id = id;
    }
    const MlpBranch main = moe ? MlpBranch{"mlp.", "mlp ", "", t.ffn, experts, routed, expert_slots, true, true, RecomputeModule::none}
                               : MlpBranch{"mlp.", "mlp ", "", t.dense_width(), 1, 1, 1, false};
    OpId mlp_output_id = mlp_branch(block, p, mlp_input_id, main);
    if (moe && t.shared_expert_ffn > 0) {
      // Shared experts (Qwen2-MoE's shared_expert_intermediate_size, DeepSeekMoE's
      // always-on experts, Megatron-Core's --moe-shared-expert-intermediate-size):
      // a dense MLP beside the routed experts on every token, split over tp
      // like any dense MLP, its output added to theirs.
      const OpId shared_id = mlp_branch(block, p, norm_id, {"mlp.shared.", "shared expert ", "shared expert ", t.shared_expert_ffn, 1, 1, 1, false, false, RecomputeModule::shared_experts});
      Op add = make_op(p + "mlp.shared.add", OpKind::elementwise, block);
      add.forward_flops_per_sample = s * h;
      add.output_elements_per_sample = s * h;
      add.memory_elements_per_sample = 3 * s * h;
      const OpId add_id = g.add_op(add);
      g.connect(mlp_output_id, add_id);
      g.connect(shared_id, add_id);
      mlp_output_id = add_id;
    }

    const OpId mlp_residual_id = g.add_op(residual_add(p + "mlp.residual", "mlp output dropout mask", block));
    g.connect(mlp_output_id, mlp_residual_id);
    g.connect(attn_residual_id, mlp_residual_id);
    return mlp_residual_id;
  }

  // One MLP's in-projection, activation and out-projection: the dense MLP,
  // the routed experts (`expert`: `experts` copies of the weights, each token
  // through `routed` of them, `slots` copies run with the capacity's padding)
  // or the shared experts.
  struct MlpBranch {
    const char* op_prefix;    // after the layer's: "mlp." or "mlp.shared."
    const char* tensor_name;  // its saved tensors' names start so ("mlp input")
    const char* hidden_name;  // and those of the hidden width ("gate projection"), so
    std::int64_t width;       // the hidden width (ffn)
    double experts, routed, slots;
    bool expert;
    bool saves_input = true;  // false where another op saves the same input (the router, for shared experts)
    // Megatron-Core's whole-module checkpoint of this MLP (`mlp`, `shared_experts`; none for the routed experts):
    // its input stays (the checkpoint's, or the norm output's own module's); what is inside goes.
    RecomputeModule whole = RecomputeModule::mlp;
  };
  OpId mlp_branch(int block, const std::string& p, OpId input_id, const MlpBranch& b) {
    const double width = static_cast<double>(b.width), in_width = static_cast<double>(t.in_projection_width(b.width));
    const std::string name = p + b.op_prefix, tensor = b.tensor_name, hidden = b.hidden_name;
    const RecomputeModule whole = b.whole;
    Op w_in = make_op(name + "w_in", OpKind::gemm, block, b.expert);
    w_in.module = whole;
    w_in.tp_split_parameters = b.experts * (h * in_width + bias(in_width));
    w_in.forward_flops_per_sample = b.routed * 2 * s * h * in_width;
    w_in.output_elements_per_sample = b.slots * s * in_width;
    if (b.saves_input) w_in.saved = {{tensor + "input", b.slots * s * h, 0, false, false}};
    if (b.saves_input && !b.expert) w_in.saved[0].module = RecomputeModule::layernorm;  // the second norm's output
    // Padded rows run; model FLOPs count routed. Routed experts are one GEMM each (a grouped GEMM:
    // Megatron-Core's --moe-grouped-gemm), over the rows routed to it: batch E, rows k' s / E per expert.
    const auto expert_count = static_cast<std::int64_t>(b.experts);
    w_in.gemm = {b.slots * s / b.experts, t.in_projection_width(b.width), t.hidden, expert_count};
    w_in.tp_split = TpSplit::columns;
    if (!b.expert) {  // matmul 5 (gate or in) kept; 6 (up) repeated
      w_in.op_sac_kept = {{gated ? hidden + "gate projection" : tensor + "hidden", s * width, 0, true, false}};
      w_in.op_sac_recomputed = gated ? 0.5 : 0.0;
    }
    const OpId w_in_id = g.add_op(w_in);
    g.connect(input_id, w_in_id);

    Op act = make_op(name + "act", OpKind::activation, block);
    act.forward_flops_per_sample = b.slots * (gated ? 10 : 8) * s * width;
    act.output_elements_per_sample = b.slots * s * width;
    if (gated) {
      act.saved = {{hidden + "gate projection", b.slots * s * width, 0, true, false},
                   {hidden + "up projection", b.slots * s * width, 0, true, false}};
    } else {
      act.saved = {{hidden + "gelu input", b.slots * s * width, 0, true, false}};
    }
    act.memory_elements_per_sample = b.slots * (gated ? 3 : 2) * s * width;  // fused bias + activation (x gate)
    act.tensor_parallel_region = true;
    act.module = b.expert ? RecomputeModule::moe_act : whole;
    for (SavedTensor& saved : act.saved) saved.module = whole;
    const OpId act_id = g.add_op(act);
    g.connect(w_in_id, act_id);

    Op w_out = make_op(name + "w_out", OpKind::gemm, block, b.expert);
    w_out.tp_split_parameters = b.experts * width * h;
    w_out.replicated_parameters = b.experts * bias(h);
    w_out.forward_flops_per_sample = b.routed * 2 * s * width * h;
    w_out.output_elements_per_sample = s * h;
    w_out.saved = {{tensor + "projection input", b.slots * s * width, 0, true, false}};
    w_out.saved[0].module = b.expert ? RecomputeModule::moe_act : whole;  // the activation's output
    w_out.module = whole;
    w_out.gemm = {b.slots * s / b.experts, t.hidden, b.width, expert_count};
    w_out.tp_split = TpSplit::rows;
    if (!b.expert && gated) {  // matmul 7 kept; 6 of a plain MLP repeated
      // Without sequence parallelism the matmul's output (partial sums over
      // tp, all-reduced after); with it, the partial sums and the reduce-
      // scatter's output, both on the save list.
      w_out.op_sac_kept = {{tensor + "output", s * h, 0, false, false},
                           {tensor + "partial sums before the reduce-scatter", s * h, 0, false, false, KeptBy::both, false, true, true}};
      w_out.op_sac_recomputed = 0;
    } else if (!b.expert) {  // the reduce-scatter's output is on the save list whether the matmul is kept or not
      w_out.op_sac_kept = {{tensor + "output after its reduce-scatter", s * h, 0, false, false, KeptBy::both, false, true}};
    }
    const OpId w_out_id = g.add_op(w_out);
    g.connect(act_id, w_out_id);
    return w_out_id;
  }

  // ---- head: final norm, output layer, loss
  void head(OpId prev) {
    const int block = static_cast<int>(g.blocks.size());
    g.blocks.push_back({"head", BlockKind::head, {}});
    Op final_norm = make_op("head.norm", OpKind::norm, block);
    final_norm.replicated_parameters = norm_parameters;
    final_norm.forward_flops_per_sample = norm_flops_per_element * s * h;
    final_norm.output_elements_per_sample = s * h;
    final_norm.saved = {{"final norm input", s * h, 0, false, false}};
    final_norm.memory_elements_per_sample = 2 * s * h;
    const OpId final_norm_id = g.add_op(final_norm);
    g.connect(prev, final_norm_id);

    Op lm_head = make_op("head.output", OpKind::gemm, block);
    (t.tied_embeddings ? lm_head.tied_parameters : lm_head.tp_split_parameters) = vocab * h;
    lm_head.forward_flops_per_sample = 2 * s * h * vocab;
    lm_head.output_elements_per_sample = s * vocab;
    lm_head.saved = {{"output layer input", s * h, 0, false, false}};
    lm_head.gemm = {s, t.vocab, t.hidden, 1};
    lm_head.tp_split = TpSplit::columns;  // vocabulary-parallel
    const OpId lm_head_id = g.add_op(lm_head);
    g.connect(final_norm_id, lm_head_id);

    // Cross-entropy over the logits. Memory: by the plan's loss (plan.hpp,
    // Loss): the eager loss keeps fp32 log-probabilities, 4 bytes, the fused
    // one the logits in the activation dtype. Time: the fused loss
    // (layer_graph.hpp, kLossLogitPasses).
    Op loss = make_op("head.loss", OpKind::cross_entropy, block);
    loss.forward_flops_per_sample = 5 * s * vocab;
    loss.output_elements_per_sample = 1;
    SavedTensor logits{"logits (fp32)", s * vocab, 4, true, false};
    logits.loss_logits = true;
    loss.saved = {logits};
    loss.memory_elements_per_sample = kLossLogitPasses * s * vocab;
    loss.tensor_parallel_region = true;
    const OpId loss_id = g.add_op(loss);
    g.connect(lm_head_id, loss_id);
  }

  const TransformerDims& t;
  std::int64_t seq_len;
  double s, h, a, q, kv, vw, vocab;  // widths per token: q queries', kv keys', vw values' (kv but under latent attention)
  bool gated, dropout;
  double experts, routed;  // routed: copies of each token through the MLP
  double expert_slots;            // routed, with the capacity's padding (expert_slots_per_token): what the experts compute and hold
  double norm_parameters, norm_flops_per_element;
  LayerGraph g;
};

}  // namespace

LayerGraph build_transformer_graph(const TransformerDims& t, std::int64_t seq_len) {
  LayerGraph g = TransformerBuilder(t, seq_len).build();
  g.index_boundaries();
  return g;
}

}  // namespace meshplan
