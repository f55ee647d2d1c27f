// The layer graph against closed forms: Korthikanti et al. 2022 Table 2
// (activation bytes per layer), their Appendix's model FLOPs, and structural
// invariants (topological order, stage boundary tensors).
#include <gtest/gtest.h>

#include <boost/graph/topological_sort.hpp>
#include <map>

#include "model/layer_graph.hpp"
#include "model/memory_model.hpp"
#include "model/profile.hpp"
#include "model/stage_cost.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {

// A Megatron GPT layer as in the paper: ffn = 4h, dropout, kv_heads = heads.
TransformerDims gpt_dims(std::int64_t layers, std::int64_t hidden, std::int64_t heads, std::int64_t seq) {
  TransformerDims t;
  t.layers = layers;
  t.hidden = hidden;
  t.heads = heads;
  t.kv_heads = heads;
  t.head_dim = hidden / heads;
  t.ffn = 4 * hidden;
  t.vocab = 51200;
  t.seq_len = seq;
  t.feed_forward = FeedForward::gelu;
  t.positions = Positions::learned;
  t.tied_embeddings = true;
  t.dropout = 0.1;
  return t;
}

double layer_bytes(const LayerGraph& g, const ActivationSharding& sharding) {
  const int block = g.layer_blocks().front();
  double bytes = 0;
  for (OpId id : g.blocks[static_cast<std::size_t>(block)].ops) bytes += saved_bytes_per_sample(g.op(id), sharding);
  return bytes;
}

struct Table2Case {
  std::int64_t hidden, heads, seq, tp;
};

class KorthikantiTable2 : public ::testing::TestWithParam<Table2Case> {};

TEST_P(KorthikantiTable2, ActivationBytesPerLayerMatchClosedForms) {
  const auto c = GetParam();
  const LayerGraph g = build_transformer_graph(gpt_dims(2, c.hidden, c.heads, c.seq), c.seq);
  const double s = static_cast<double>(c.seq), h = static_cast<double>(c.hidden), a = static_cast<double>(c.heads);
  const double t = static_cast<double>(c.tp);
  const double sbh = s * h;  // b = 1: bytes are per sample
  auto at = [&](bool sp, Recompute r) { return layer_bytes(g, {c.tp, 1, sp, r, 2.0}); };

  EXPECT_NEAR(layer_bytes(g, {1, 1, false, Recompute::none, 2.0}), sbh * (34 + 5 * a * s / h), 1e-6 * sbh);
  EXPECT_NEAR(at(false, Recompute::none), sbh * (10 + 24 / t + 5 * a * s / (h * t)), 1e-6 * sbh);
  EXPECT_NEAR(at(true, Recompute::none), sbh / t * (34 + 5 * a * s / h), 1e-6 * sbh);
  EXPECT_NEAR(at(false, Recompute::selective), sbh * (10 + 24 / t), 1e-6 * sbh);
  EXPECT_NEAR(at(true, Recompute::selective), 34 * sbh / t, 1e-6 * sbh);
}

INSTANTIATE_TEST_SUITE_P(Configurations, KorthikantiTable2,
                         ::testing::Values(Table2Case{6144, 64, 2048, 8}, Table2Case{12288, 96, 2048, 8},
                                           Table2Case{20480, 128, 2048, 8}, Table2Case{25600, 160, 2048, 8},
                                           Table2Case{1024, 16, 512, 2}, Table2Case{768, 12, 1024, 4}));

TEST(LayerGraph, ModelFlopsMatchKorthikantiAppendix) {
  // Forward + backward matmul FLOPs per sequence: 72 L s h^2 (1 + s/(6h) + V/(12 h L)).
  const auto dims = gpt_dims(24, 2048, 16, 2048);
  const LayerGraph g = build_transformer_graph(dims, 2048);
  double forward = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(g.graph))) {
    const auto kind = g.op(v).kind;
    if (kind == OpKind::gemm || kind == OpKind::attention_scores || kind == OpKind::attention_values) {
      forward += g.op(v).forward_flops_per_sample;
    }
  }
  const double L = 24, s = 2048, h = 2048, V = 51200;
  EXPECT_NEAR(3 * forward, 72 * L * s * h * h * (1 + s / (6 * h) + V / (12 * h * L)), 1e-9 * forward);
}

TEST(LayerGraph, VerticesAreInTopologicalOrderAndBlocksPartitionOps) {
  const LayerGraph g = build_transformer_graph(gpt_dims(3, 256, 8, 128), 128);
  for (auto e : boost::make_iterator_range(boost::edges(g.graph))) {
    EXPECT_LT(boost::source(e, g.graph), boost::target(e, g.graph));
    EXPECT_LE(g.op(boost::source(e, g.graph)).block, g.op(boost::target(e, g.graph)).block);
  }
  std::size_t ops_in_blocks = 0;
  for (const auto& b : g.blocks) ops_in_blocks += b.ops.size();
  EXPECT_EQ(ops_in_blocks, g.op_count());
  EXPECT_EQ(g.layer_blocks().size(), 3u);
  EXPECT_EQ(g.blocks.front().kind, BlockKind::embedding);
  EXPECT_EQ(g.blocks.back().kind, BlockKind::head);
}

TEST(LayerGraph, StageBoundaryCarriesTheResidualStreamOnce) {
  // Between two layers only the residual stream (s x h) crosses, even though
  // two ops of the next layer read it; so too with shared experts, whose
  // branch reads the layer's norm beside the router.
  auto shared = gpt_dims(3, 256, 8, 128);
  shared.experts = 8;
  shared.top_k = 2;
  shared.shared_expert_ffn = 384;
  for (const LayerGraph& g : {build_transformer_graph(gpt_dims(3, 256, 8, 128), 128), build_transformer_graph(shared, 128)}) {
    const int first_layer = g.layer_blocks().front();
    EXPECT_DOUBLE_EQ(g.boundary_elements_per_sample(first_layer), 128.0 * 256);
    for (auto e : boost::make_iterator_range(boost::edges(g.graph))) EXPECT_LT(boost::source(e, g.graph), boost::target(e, g.graph));
  }
}

// Shared experts (TransformerDims::shared_expert_ffn): a dense MLP of that
// width beside the routed experts, on every token. Its weights are dense
// (split over tp, not ep), its FLOPs are model FLOPs of every token, and its
// output joins the experts' before the residual add.
TEST(LayerGraph, SharedExpertsAreADenseMlpBesideTheExperts) {
  auto dims = gpt_dims(2, 512, 8, 128);
  dims.feed_forward = FeedForward::swiglu;
  dims.bias = false;
  dims.experts = 8;
  dims.top_k = 2;
  const LayerGraph routed_only = build_transformer_graph(dims, 128);
  dims.shared_expert_ffn = 768;
  const LayerGraph with_shared = build_transformer_graph(dims, 128);
  const double h = 512, fs = 768, s = 128, layers = 2;
  EXPECT_DOUBLE_EQ(with_shared.parameter_count() - routed_only.parameter_count(), layers * 3 * h * fs);
  double flops[2] = {}, expert_parameters[2] = {}, dense_tp_parameters[2] = {};
  int i = 0;
  for (const LayerGraph* g : {&routed_only, &with_shared}) {
    for (auto v : boost::make_iterator_range(boost::vertices(g->graph))) {
      const Op& op = g->op(v);
      if (op.kind == OpKind::gemm) flops[i] += op.forward_flops_per_sample;
      (op.expert ? expert_parameters[i] : dense_tp_parameters[i]) += op.tp_split_parameters;
    }
    ++i;
  }
  EXPECT_DOUBLE_EQ(flops[1] - flops[0], layers * (2 * s * h * 2 * fs + 2 * s * fs * h));
  EXPECT_DOUBLE_EQ(expert_parameters[1], expert_parameters[0]);
  EXPECT_DOUBLE_EQ(dense_tp_parameters[1] - dense_tp_parameters[0], layers * 3 * h * fs);
  // The branch: the layer's second norm feeds the router and the shared w_in; the add joins both
  // MLPs' outputs and feeds the residual.
  auto id_of = [&](const std::string& name) {
    for (auto v : boost::make_iterator_range(boost::vertices(with_shared.graph)))
      if (with_shared.op(v).name == name) return static_cast<long>(v);
    return -1L;
  };
  auto edge = [&](const std::string& from, const std::string& to) {
    return boost::edge(id_of(from), id_of(to), with_shared.graph).second;
  };
  EXPECT_TRUE(edge("layer0.ln2", "layer0.mlp.router"));
  EXPECT_TRUE(edge("layer0.ln2", "layer0.mlp.shared.w_in"));
  EXPECT_TRUE(edge("layer0.mlp.w_out", "layer0.mlp.shared.add"));
  EXPECT_TRUE(edge("layer0.mlp.shared.w_out", "layer0.mlp.shared.add"));
  EXPECT_TRUE(edge("layer0.mlp.shared.add", "layer0.mlp.residual"));
  EXPECT_FALSE(edge("layer0.mlp.w_out", "layer0.mlp.residual"));
  // Saved for the backward: the router keeps its input (the second norm's output, which its weight
  // gradient reads) once; the shared experts read the same tensor and add only their hidden tensors.
  double saved[2] = {}, router_inputs[2] = {};
  i = 0;
  for (const LayerGraph* g : {&routed_only, &with_shared}) {
    for (auto v : boost::make_iterator_range(boost::vertices(g->graph))) {
      const Op& op = g->op(v);
      if (op.block != g->layer_blocks().front()) continue;
      for (const SavedTensor& t : op.saved) {
        saved[i] += t.elements_per_sample;
        if (t.what == "router input") router_inputs[i] += t.elements_per_sample;
        EXPECT_NE(t.what, "shared expert input");
      }
    }
    ++i;
  }
  EXPECT_DOUBLE_EQ(router_inputs[0], s * h);
  EXPECT_DOUBLE_EQ(router_inputs[1], s * h);
  EXPECT_DOUBLE_EQ(saved[1] - saved[0], 3 * s * fs);  // gate, up and the projection's input
}

// The index the builders leave (index_boundaries) answers as the walk over
// the whole graph does, for every block of every kind of model, and a graph
// changed after indexing answers from the walk again.
TEST(LayerGraph, IndexedBoundariesEqualTheWalk) {
  auto moe = gpt_dims(4, 256, 8, 128);
  moe.experts = 8;
  moe.top_k = 2;
  auto shared = moe;
  shared.shared_expert_ffn = 512;
  MlpDims mlp;
  mlp.layer_sizes = {784, 512, 256, 10};
  CnnDims cnn;
  cnn.stage_blocks = {2, 2};
  cnn.stage_channels = {64, 128};
  const std::vector<LayerGraph> graphs = {build_transformer_graph(gpt_dims(5, 256, 8, 128), 128),
                                          build_transformer_graph(moe, 128), build_transformer_graph(shared, 128),
                                          build_mlp_graph(mlp), build_cnn_graph(cnn)};
  for (const LayerGraph& indexed : graphs) {
    ASSERT_EQ(indexed.boundary_index.size(), indexed.blocks.size());
    LayerGraph walked = indexed;
    walked.boundary_index.clear();
    bool some_boundary = false;
    for (int b = -1; b <= static_cast<int>(indexed.blocks.size()); ++b) {
      EXPECT_EQ(indexed.boundary_elements_per_sample(b), walked.boundary_elements_per_sample(b)) << "block " << b;
      some_boundary = some_boundary || walked.boundary_elements_per_sample(b) > 0;
    }
    EXPECT_TRUE(some_boundary);
    EXPECT_GT(walked.largest_stage_boundary_elements_per_sample(), 0);
    EXPECT_EQ(indexed.largest_stage_boundary_elements_per_sample(), walked.largest_stage_boundary_elements_per_sample());
  }
  LayerGraph changed = graphs.front();
  const int first_layer = changed.layer_blocks().front();
  const double before = changed.boundary_elements_per_sample(first_layer);
  Op extra = make_op("extra", OpKind::elementwise, first_layer);
  extra.output_elements_per_sample = 7;
  const OpId id = changed.add_op(extra);
  changed.connect(id, changed.blocks.back().ops.front());
  EXPECT_EQ(changed.boundary_elements_per_sample(first_layer), before + 7);
}

TEST(LayerGraph, GroupedQueryAttentionShrinksKeyValue) {
  auto dims = gpt_dims(1, 4096, 32, 1024);
  const double full = build_transformer_graph(dims, 1024).parameter_count();
  dims.kv_heads = 8;
  const double gqa = build_transformer_graph(dims, 1024).parameter_count();
  // K and V projections shrink from h x h to h x h/4 each, with their biases.
  EXPECT_DOUBLE_EQ(full - gqa, 2 * (4096.0 * 4096 - 4096.0 * 1024) + 2 * (4096.0 - 1024));
}

// Rotary positions add one elementwise pass over the queries and keys
// between the QKV projection and the scores (read once, written once), in
// the tensor-parallel region; learned positions add none. The ops before
// and after stay as they were: only the scores read through the rotation.
TEST(LayerGraph, RotaryPositionsRotateQueriesAndKeysOnce) {
  auto dims = gpt_dims(2, 2048, 32, 1024);
  dims.kv_heads = 8;
  const LayerGraph learned = build_transformer_graph(dims, 1024);
  dims.positions = Positions::rotary;
  const LayerGraph rotary = build_transformer_graph(dims, 1024);
  EXPECT_EQ(rotary.op_count(), learned.op_count() + 2 - 1);  // a rotation per layer; no position table
  int rotations = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(rotary.graph))) {
    const Op& op = rotary.op(v);
    if (op.name.find("rotary") == std::string::npos) continue;
    ++rotations;
    const double q = 32 * 64, kv = 8 * 64;
    EXPECT_EQ(op.kind, OpKind::elementwise);
    EXPECT_TRUE(op.tensor_parallel_region);
    EXPECT_DOUBLE_EQ(op.memory_elements_per_sample, 2 * 1024 * (q + kv));
    EXPECT_TRUE(op.saved.empty());  // cos and sin are constants, not activations
    ASSERT_EQ(boost::in_degree(v, rotary.graph), 1u);
    EXPECT_NE(rotary.op(boost::source(*boost::in_edges(v, rotary.graph).first, rotary.graph)).name.find("attn.qkv"),
              std::string::npos);
    for (auto e : boost::make_iterator_range(boost::out_edges(v, rotary.graph))) {
      EXPECT_EQ(rotary.op(boost::target(e, rotary.graph)).kind, OpKind::attention_scores);
    }
  }
  EXPECT_EQ(rotations, 2);
  for (auto v : boost::make_iterator_range(boost::vertices(learned.graph))) {
    EXPECT_EQ(learned.op(v).name.find("rotary"), std::string::npos);
  }
}

// Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1),
// small: hidden 512, 8 heads, query latent 96, key/value latent 64, query/key
// heads of 32 + 16 rotary, value heads of 40.
constexpr const char* kLatentModel = R"(name: mla-small
kind: transformer
source: test
layers: 2
hidden: 512
heads: 8
q_lora_rank: 96
kv_lora_rank: 64
qk_nope_head_dim: 32
qk_rope_head_dim: 16
v_head_dim: 40
ffn: 1024
vocab: 1000
seq_len: 128
mlp: swiglu
norm: rmsnorm
positions: rotary
bias: false
tied_embeddings: false
)";

// Its weights as the paper's matrices give them (W^DQ h x d_c', W^UQ d_c' x
// n_h (d_h + d_h^R), W^DKV with W^KR h x (d_c + d_h^R), W^UK and W^UV d_c x
// n_h (d_h + d_v), W^O n_h d_v x h, the two latent norms); each weight GEMM's
// forward is 2 FLOPs per weight per token; the core attention's QK^T runs
// over the 48-wide query/key heads and PV over the 40-wide value heads.
TEST(LayerGraph, LatentAttentionAsDeepSeekV2WritesIt) {
  using testing_support::must;
  const ModelSpec model = must(load_model_text(kLatentModel, "mla-small"));
  const TransformerDims& t = model.transformer;
  ASSERT_TRUE(t.latent_attention());
  EXPECT_EQ(t.head_size(), 48);
  EXPECT_EQ(t.key_value_heads(), 8);
  const double s = 128;
  const LayerGraph g = build_transformer_graph(t, 128);
  double weights = 0, norms = 0, weight_flops = 0, core_flops = 0;
  const Op *scores = nullptr, *values = nullptr, *out = nullptr, *q_down = nullptr;
  for (OpId id : g.blocks[static_cast<std::size_t>(g.layer_blocks().front())].ops) {
    const Op& op = g.op(id);
    if (op.name.find(".attn.") == std::string::npos) continue;
    const double held = op.tp_split_parameters + op.kv_parameters + op.replicated_parameters;
    if (op.kind == OpKind::gemm) {
      weights += held;
      weight_flops += op.forward_flops_per_sample;
    } else if (op.kind == OpKind::norm) {
      norms += held;
    }
    if (op.core_attention && op.kind != OpKind::softmax) core_flops += op.forward_flops_per_sample;
    if (op.kind == OpKind::attention_scores) scores = &op;
    if (op.kind == OpKind::attention_values) values = &op;
    if (op.name.ends_with("attn.out")) out = &op;
    if (op.name.ends_with("attn.q_down")) q_down = &op;
  }
  const double expected = 512.0 * 96 + 96.0 * 8 * 48 + 512.0 * (64 + 16) + 64.0 * 8 * (32 + 40) + 8.0 * 40 * 512;
  EXPECT_DOUBLE_EQ(weights, expected);
  EXPECT_DOUBLE_EQ(norms, 96 + 64);
  EXPECT_DOUBLE_EQ(weight_flops, 2 * s * expected);
  EXPECT_DOUBLE_EQ(core_flops, 2 * s * s * 8 * (48 + 40));
  ASSERT_TRUE(scores && values && out && q_down);
  EXPECT_EQ(scores->gemm.k, 48);
  EXPECT_EQ(values->gemm.n, 40);
  EXPECT_EQ(out->gemm.k, 8 * 40);
  EXPECT_EQ(q_down->tp_split, TpSplit::sequence);
  double key = 0, value = 0;
  for (const SavedTensor& saved : scores->saved) key += saved.what == "key" ? saved.elements_per_sample : 0;
  for (const SavedTensor& saved : values->saved) value += saved.what == "value" ? saved.elements_per_sample : 0;
  EXPECT_DOUBLE_EQ(key, s * 8 * 48);   // each head's key: its own 32 and the shared rotary 16
  EXPECT_DOUBLE_EQ(value, s * 8 * 40);

  // The profile: fused attention's causal FLOPs, and the tp collectives. Under tp the latents are
  // gathered (q 96, kv 64) and so is the shared rotary key (16), not hidden; the MLP's input is.
  const ModelProfile profile = build_profile(model, g);
  const BlockProfile& layer = profile.kinds[static_cast<std::size_t>(profile.block_kind[static_cast<std::size_t>(g.layer_blocks().front())])];
  EXPECT_DOUBLE_EQ(layer.fused_attention_flops_per_sample, s * s * 8 * (48 + 40));
  EXPECT_DOUBLE_EQ(layer.tp_backward_reduce_elements, s * (96 + 64 + 16 + 512));
  EXPECT_EQ(layer.tp_backward_collectives, 4);
  EXPECT_DOUBLE_EQ(layer.tp_forward_reduce_elements, 2 * s * 512);
  EXPECT_DOUBLE_EQ(profile.kv_width, (8.0 * 48 + 8.0 * 40) / 2);
  EXPECT_NEAR(g.parameter_count(), 2 * (expected + 160 + 2 * 512 + 3 * 512.0 * 1024) + 2 * 1000.0 * 512 + 512, 0.5);

  // The down-projections are whole on every tp rank: each runs its own 1/tp of the rows under
  // sequence parallelism, all of them without it.
  Plan plan = testing_support::plan_with("tp=4", 2, 2);
  plan.sequence_parallel = true;
  EXPECT_DOUBLE_EQ(local_gemm(*q_down, plan, 8).rows, 2 * s / 4);
  EXPECT_DOUBLE_EQ(local_gemm(*q_down, plan, 8).n, 96);
  plan.sequence_parallel = false;
  EXPECT_DOUBLE_EQ(local_gemm(*q_down, plan, 8).rows, 2 * s);
}

// Without a query latent (DeepSeek-V2-Lite) the queries come from hidden in
// one column-parallel GEMM; the fields of latent attention are refused on a
// model without it, and head_dim with it.
TEST(LayerGraph, LatentAttentionWithoutQueryLatentAndItsFieldErrors) {
  using testing_support::must;
  std::string text = kLatentModel;
  text.replace(text.find("q_lora_rank: 96\n"), 16, "");
  const ModelSpec lite = must(load_model_text(text, "lite"));
  const LayerGraph g = build_transformer_graph(lite.transformer, 128);
  const ModelSpec full = must(load_model_text(kLatentModel, "full"));
  const LayerGraph f = build_transformer_graph(full.transformer, 128);
  // W^Q (h x n_h 48) instead of W^DQ, its norm and W^UQ, in each of the 2 layers.
  EXPECT_DOUBLE_EQ(g.parameter_count() - f.parameter_count(), 2 * (512.0 * 384 - (512.0 * 96 + 96 + 96.0 * 384)));
  const Loaded<ModelSpec> bad_rope = load_model_text(std::string(kLatentModel).replace(std::string(kLatentModel).find("qk_rope_head_dim: 16"), 20, "qk_rope_head_dim: 15"), "x");
  EXPECT_FALSE(bad_rope.ok());
  std::string with_head_dim = kLatentModel;
  with_head_dim += "head_dim: 48\n";
  const Loaded<ModelSpec> stated = load_model_text(with_head_dim, "x");
  ASSERT_FALSE(stated.ok());
  EXPECT_NE(testing_support::messages(stated.problems).find("qk_nope_head_dim + qk_rope_head_dim"), std::string::npos);
  std::string dense = kLatentModel;
  dense.replace(dense.find("kv_lora_rank: 64\n"), 17, "");
  const Loaded<ModelSpec> orphan = load_model_text(dense, "x");
  ASSERT_FALSE(orphan.ok());
  EXPECT_NE(testing_support::messages(orphan.problems).find("kv_lora_rank turns on"), std::string::npos);
  std::string grouped = kLatentModel;
  grouped += "kv_heads: 2\n";
  EXPECT_FALSE(load_model_text(grouped, "x").ok());
}

TEST(LayerGraph, MixtureOfExpertsMultipliesMlpWeights) {
  auto dims = gpt_dims(1, 512, 8, 128);
  dims.dropout = 0;
  const double dense = build_transformer_graph(dims, 128).parameter_count();
  dims.experts = 8;
  dims.top_k = 2;
  const double moe = build_transformer_graph(dims, 128).parameter_count();
  const double mlp = 512.0 * 2048 + 2048 + 2048.0 * 512 + 512;
  EXPECT_DOUBLE_EQ(moe - dense, 7 * mlp + 512.0 * 8);  // seven more experts + the router
}

// A hand-built TransformerDims without head_dim (0: hidden / heads, as
// head_size() says) builds the same graph as one that states it: the builder
// reads head_size() for the queries, the keys and values, the scores and the
// attention output alike.
TEST(LayerGraph, HeadDimZeroMeansHiddenOverHeads) {
  TransformerDims stated = gpt_dims(2, 512, 8, 128);
  TransformerDims unstated = stated;
  unstated.head_dim = 0;
  const LayerGraph a = build_transformer_graph(stated, 128), b = build_transformer_graph(unstated, 128);
  EXPECT_DOUBLE_EQ(b.parameter_count(), a.parameter_count());
  double flops[2] = {}, elements[2] = {};
  int i = 0;
  for (const LayerGraph* g : {&a, &b}) {
    for (auto v : boost::make_iterator_range(boost::vertices(g->graph))) {
      flops[i] += g->op(v).forward_flops_per_sample;
      elements[i] += g->op(v).gemm.rows_per_sample * static_cast<double>(g->op(v).gemm.n * g->op(v).gemm.k * g->op(v).gemm.batch);
    }
    ++i;
  }
  EXPECT_GT(flops[0], 0);
  EXPECT_DOUBLE_EQ(flops[1], flops[0]);
  EXPECT_DOUBLE_EQ(elements[1], elements[0]);
}

// Drop-and-pad capacity (TransformerDims::capacity_factor): the experts run
// and keep capacity_factor x top_k copies of each token, and the dispatch
// moves that many; the parameters and the model FLOPs (top_k copies, the
// useful work, as MFU counts it) do not change.
TEST(LayerGraph, ExpertCapacityPadsWhatTheExpertsRunAndKeep) {
  auto dims = gpt_dims(2, 512, 8, 128);
  dims.experts = 8;
  dims.top_k = 2;
  const LayerGraph dropless = build_transformer_graph(dims, 128);
  dims.capacity_factor = 1.5;
  const LayerGraph padded = build_transformer_graph(dims, 128);
  EXPECT_DOUBLE_EQ(padded.parameter_count(), dropless.parameter_count());
  double flops[2] = {}, expert_rows[2] = {}, dispatched[2] = {}, saved[2] = {};
  int i = 0;
  for (const LayerGraph* g : {&dropless, &padded}) {
    for (auto v : boost::make_iterator_range(boost::vertices(g->graph))) {
      const Op& op = g->op(v);
      flops[i] += op.forward_flops_per_sample * (op.kind == OpKind::gemm ? 1 : 0);
      if (op.name == "layer0.mlp.w_in") {  // one GEMM an expert, over its share of the routed rows
        EXPECT_EQ(op.gemm.batch, 8);
        expert_rows[i] = op.gemm.rows_per_sample * static_cast<double>(op.gemm.batch);
      }
      if (op.name == "layer0.mlp.router") dispatched[i] = op.output_elements_per_sample;
      if (op.name == "layer0.mlp.act") for (const auto& t : op.saved) saved[i] += t.elements_per_sample;
    }
    ++i;
  }
  EXPECT_DOUBLE_EQ(flops[1], flops[0]);
  EXPECT_DOUBLE_EQ(expert_rows[0], 2.0 * 128);
  EXPECT_DOUBLE_EQ(expert_rows[1], 1.5 * 2 * 128);
  EXPECT_DOUBLE_EQ(dispatched[1], 1.5 * dispatched[0]);
  EXPECT_GT(saved[0], 0);
  EXPECT_DOUBLE_EQ(saved[1], 1.5 * saved[0]);
  EXPECT_DOUBLE_EQ(dims.expert_slots_per_token(), 3.0);
}

// Dense layers among the experts' (TransformerDims::dense_layers): a plain
// MLP of dense_ffn, no router, no shared experts, no expert weights; the
// other layers as before.
TEST(LayerGraph, DenseLayersAmongExpertsHaveTheirOwnMlp) {
  auto dims = gpt_dims(3, 512, 8, 128);
  dims.feed_forward = FeedForward::swiglu;
  dims.bias = false;
  dims.experts = 8;
  dims.top_k = 2;
  dims.shared_expert_ffn = 256;
  const LayerGraph all_moe = build_transformer_graph(dims, 128);
  dims.dense_layers = {0};
  dims.dense_ffn = 1536;
  const LayerGraph first_dense = build_transformer_graph(dims, 128);
  const double h = 512, f = 2048, fd = 1536, fs = 256, e = 8;
  // Layer 0 trades 8 experts, the router and the shared experts for one MLP of width 1536.
  EXPECT_DOUBLE_EQ(all_moe.parameter_count() - first_dense.parameter_count(),
                   e * 3 * h * f + h * e + 3 * h * fs - 3 * h * fd);
  std::map<std::string, const Op*> ops;
  for (auto v : boost::make_iterator_range(boost::vertices(first_dense.graph))) ops[first_dense.op(v).name] = &first_dense.op(v);
  for (const char* name : {"layer0.mlp.router", "layer0.mlp.shared.w_in", "layer0.mlp.shared.add"}) EXPECT_EQ(ops.count(name), 0u) << name;
  for (const char* name : {"layer1.mlp.router", "layer1.mlp.shared.w_in", "layer2.mlp.router"}) EXPECT_EQ(ops.count(name), 1u) << name;
  ASSERT_EQ(ops.count("layer0.mlp.w_in"), 1u);
  EXPECT_FALSE(ops["layer0.mlp.w_in"]->expert);
  EXPECT_EQ(ops["layer0.mlp.w_in"]->gemm.n, 2 * 1536);
  EXPECT_DOUBLE_EQ(ops["layer0.mlp.w_in"]->gemm.rows_per_sample, 128);
  EXPECT_TRUE(ops["layer1.mlp.w_in"]->expert);
  EXPECT_EQ(ops["layer1.mlp.w_in"]->gemm.n, 2 * 2048);
  // A dense layer and an expert layer are two block kinds.
  ModelSpec spec;
  spec.transformer = dims;
  const ModelProfile profile = build_profile(spec, first_dense);
  EXPECT_EQ(profile.uniform_layer_kind, -1);
}

TEST(LayerGraph, ResNet50ForwardFlopsMatchPublished) {
  CnnDims cnn;
  cnn.stage_blocks = {3, 4, 6, 3};
  cnn.stage_channels = {64, 128, 256, 512};
  const LayerGraph g = build_cnn_graph(cnn);
  double macs = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(g.graph))) {
    if (g.op(v).kind == OpKind::conv || g.op(v).kind == OpKind::gemm) macs += g.op(v).forward_flops_per_sample / 2;
  }
  // He et al. 2016, Table 1: 3.8e9 FLOPs (multiply-adds) for ResNet-50; torchvision v1.5
  // (stride on the 3x3 convolution) reports 4.09 GMACs.
  EXPECT_NEAR(macs, 4.09e9, 0.01 * 4.09e9);
  EXPECT_DOUBLE_EQ(g.parameter_count(), 25'557'032);
}

}  // namespace
}  // namespace meshplan
