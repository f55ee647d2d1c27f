// The one source of "which device holds which block of which tensor"
// (model/sharding_spec.hpp) and the two rules it rests on: which stage holds
// each layer (stage_of_layer, model/stage_partition.hpp) and when ZeRO shards
// each state (model/model_states.hpp). The studio's pictures of the same
// specs are tested in gui/tests/test_studio_core.cpp; the executor's layout
// against the spec in test_parallel_layout.cpp.
#include <gtest/gtest.h>

#include <random>

#include "model/layer_graph.hpp"
#include "model/model_states.hpp"
#include "model/sharding_spec.hpp"
#include "model/stage_partition.hpp"

namespace meshplan {
namespace {

ModelSpec small_gpt(std::int64_t layers) {
  ModelSpec model;
  model.kind = ModelKind::transformer;
  TransformerDims& t = model.transformer;
  t.layers = layers;
  t.hidden = 8;
  t.heads = 4;
  t.kv_heads = 4;
  t.ffn = 12;
  t.vocab = 11;
  t.seq_len = 3;
  t.positions = Positions::learned;
  t.tied_embeddings = true;
  return model;
}

Plan plan_on(const std::string& mesh, int zero_stage) {
  Plan plan;
  plan.mesh = parse_mesh(mesh, "mesh").value;
  plan.zero_stage = zero_stage;
  plan.micro_batch = 1;
  return plan;
}

TEST(StageOfLayer, IsTheStageWhosePartitionChunkHoldsTheLayer) {
  // Random partitions (even and stated, v = 1..3) of a 12-layer model: every
  // layer's stage is the stage of the chunk partition_stages puts it in.
  const ModelSpec model = small_gpt(12);
  const LayerGraph graph = build_layer_graph(model, 3);
  const std::vector<int> layer_blocks = graph.layer_blocks();
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 200; ++trial) {
    const std::int64_t pp = std::uniform_int_distribution<std::int64_t>(1, 4)(rng);
    const std::int64_t v = std::uniform_int_distribution<std::int64_t>(1, 3)(rng);
    std::vector<std::int64_t> counts;
    if (pp * v > 12) continue;
    if (trial % 2 == 1) {  // a stated partition: every chunk at least one layer
      counts.assign(static_cast<std::size_t>(pp * v), 1);
      for (std::int64_t left = 12 - pp * v; left > 0; --left)
        ++counts[std::uniform_int_distribution<std::size_t>(0, counts.size() - 1)(rng)];
    } else if (12 % (pp * v) != 0) {
      continue;
    }
    const Loaded<StagePartition> partition = partition_stages(graph, pp, v, counts);
    ASSERT_TRUE(partition.ok());
    for (std::int64_t c = 0; c < partition.value.chunk_count(); ++c) {
      for (const int block : partition.value.chunk_blocks[static_cast<std::size_t>(c)]) {
        const auto layer = std::find(layer_blocks.begin(), layer_blocks.end(), block) - layer_blocks.begin();
        EXPECT_EQ(stage_of_layer(12, pp, v, counts, layer), partition.value.stage_of_chunk(c))
            << "pp " << pp << " v " << v << " layer " << layer;
      }
    }
  }
}

TEST(StageOfLayer, AnUndividedEvenSplitStillPlacesEveryLayer) {
  // 10 layers over 4 chunks (a plan validation refuses): chunks of 2, 3, 2, 3.
  EXPECT_EQ(chunk_layers(10, 4, {}, 0), 2);
  EXPECT_EQ(chunk_layers(10, 4, {}, 1), 3);
  EXPECT_EQ(stage_of_layer(10, 4, 1, {}, 9), 3);
  EXPECT_EQ(stage_of_layer(10, 4, 1, {}, 2), 1);
}

TEST(ModelStates, ZeroShardsOptimizerAtOneGradientsAtTwoParametersAtThree) {
  for (int z = 0; z <= 3; ++z) {
    EXPECT_EQ(zero_shards(z, ModelState::optimizer), z >= 1);
    EXPECT_EQ(zero_shards(z, ModelState::gradients), z >= 2);
    EXPECT_EQ(zero_shards(z, ModelState::parameters), z >= 3);
  }
  // G(j) of docs/cost-model.md with F = 2, N_d = 4, e = 3.
  EXPECT_EQ(sharding_group(2, 4, 3, 1, ModelState::optimizer, false), 24);
  EXPECT_EQ(sharding_group(2, 4, 3, 1, ModelState::optimizer, true), 8);
  EXPECT_EQ(sharding_group(2, 4, 3, 1, ModelState::gradients, false), 2);
  EXPECT_EQ(data_sharding_axes(0, ModelState::parameters, false), (std::vector<Axis>{Axis::fsdp}));
  EXPECT_EQ(data_sharding_axes(3, ModelState::parameters, true), (std::vector<Axis>{Axis::fsdp, Axis::dp}));
}

TEST(ShardingSpec, BlockShapesAndTheGatheredSpec) {
  const ModelSpec model = small_gpt(2);
  const Plan plan = plan_on("fsdp=4,tp=2", 0);
  // mlp.w_in [hidden 8, ffn 12]: P('fsdp', 'tp').
  const Loaded<ShardingSpec> w_in = sharding_spec(model, plan, "layer1.mlp.w_in", TensorRole::parameters);
  ASSERT_TRUE(w_in.ok());
  EXPECT_EQ(w_in.value.partition_text(), "P('fsdp', 'tp')");
  EXPECT_EQ(w_in.value.data_axes, (std::vector<Axis>{Axis::fsdp}));
  EXPECT_EQ(*block_shape(w_in.value, plan.mesh, 3), (std::vector<std::int64_t>{2, 6}));
  // Gathered for a pass: the hidden dimension whole, fsdp now a replica axis.
  const ShardingSpec pass = gathered(w_in.value, plan.mesh);
  EXPECT_EQ(pass.partition_text(), "P(None, 'tp')");
  EXPECT_EQ(pass.replicated_over, (std::vector<Axis>{Axis::fsdp}));
  EXPECT_EQ(*block_shape(pass, plan.mesh, 3), (std::vector<std::int64_t>{8, 6}));

  // The vocabulary, 11 rows over tp = 4: blocks of 3, 3, 3, 2 (JAX's ceil rule).
  const Plan tp4 = plan_on("tp=4", 0);
  const Loaded<ShardingSpec> wte = sharding_spec(model, tp4, "embedding.tokens", TensorRole::parameters);
  EXPECT_EQ((*block_shape(wte.value, tp4.mesh, 3))[0], 2);
  EXPECT_EQ((*block_shape(wte.value, tp4.mesh, 0))[0], 3);
  EXPECT_TRUE(wte.value.data_axes.empty());

  // A stage that does not hold the tensor has no block.
  const Plan pp2 = plan_on("pp=2", 0);
  const Loaded<ShardingSpec> first = sharding_spec(model, pp2, "layer0.attn.kv", TensorRole::parameters);
  EXPECT_EQ(first.value.dims[1].size, 16);  // 2 kv = 2 x 8
  EXPECT_TRUE(block_shape(first.value, pp2.mesh, 0).has_value());
  EXPECT_FALSE(block_shape(first.value, pp2.mesh, 1).has_value());
}

// Grouped-query attention: tp splits the key/value heads when it divides
// them, and otherwise every tp rank holds them all; the query heads always split.
TEST(ShardingSpec, KeyValueHeadsSplitOverTpOnlyWhenTpDividesThem) {
  ModelSpec model = small_gpt(2);
  model.transformer.heads = 8;
  model.transformer.kv_heads = 2;
  model.transformer.head_dim = 1;
  for (const std::int64_t tp : {2, 4, 8}) {
    const Plan plan = plan_on("tp=" + std::to_string(tp), 0);
    const auto q = sharding_spec(model, plan, "layer1.attn.q", TensorRole::parameters);
    const auto kv = sharding_spec(model, plan, "layer1.attn.kv", TensorRole::parameters);
    ASSERT_TRUE(q.ok() && kv.ok()) << tp;
    EXPECT_EQ(q.value.partition_text(), "P(None, 'tp')") << tp;
    EXPECT_EQ((*block_shape(q.value, plan.mesh, tp - 1))[1], 8 / tp) << tp;
    const bool split = tp == 2;
    EXPECT_EQ(kv.value.partition_text(), split ? "P(None, 'tp')" : "P(None, None)") << tp;
    EXPECT_EQ((*block_shape(kv.value, plan.mesh, tp - 1))[1], split ? 2 : 4) << tp;  // k and v, 2 heads each
    EXPECT_EQ(kv.value.replicated_over, split ? std::vector<Axis>{} : std::vector<Axis>{Axis::tp}) << tp;
    EXPECT_NE(kv.value.rule.find(split ? "split over tp" : "whole on every tp rank"), std::string::npos) << kv.value.rule;
  }
}

// small_gpt(2) as a Llama-style mixture of experts: 4 experts, top 2, and
// shared experts of width 6.
ModelSpec small_moe() {
  ModelSpec model = small_gpt(2);
  TransformerDims& t = model.transformer;
  t.bias = false;
  t.feed_forward = FeedForward::swiglu;
  t.norm = Norm::rmsnorm;
  t.experts = 4;
  t.top_k = 2;
  t.shared_expert_ffn = 6;
  t.head_dim = 2;  // as load_model states it
  return model;
}

// A mixture of experts with shared experts: the layer's weights the spec
// lists (router, experts, shared experts and the rest) hold every weight the
// cost model counts for the layer, biases aside; the router and the shared
// experts are whole on every ep rank, the experts split over it.
TEST(ShardingSpec, EveryWeightOfAnExpertLayerIsListed) {
  ModelSpec model = small_moe();
  TransformerDims& t = model.transformer;
  const Plan plan = plan_on("ep=4,tp=2", 0);
  double listed = 0;
  for (const TensorChoice& c : sharding_tensors(model, 1)) {
    if (c.activation || c.name.rfind("layer1.", 0) != 0) continue;
    const Loaded<ShardingSpec> spec = sharding_spec(model, plan, c.name, TensorRole::parameters);
    ASSERT_TRUE(spec.ok()) << c.name;
    double elements = 1;
    for (const ShardedDim& d : spec.value.dims) elements *= static_cast<double>(d.size);
    listed += elements;
  }
  const LayerGraph g = build_layer_graph(model, t.seq_len);
  double layer1 = 0;
  for (OpId id : g.blocks[static_cast<std::size_t>(g.layer_blocks()[1])].ops) {
    const Op& op = g.op(id);
    layer1 += op.tp_split_parameters + op.kv_parameters + op.replicated_parameters + op.tied_parameters;
  }
  EXPECT_DOUBLE_EQ(listed, layer1);
  const auto router = sharding_spec(model, plan, "layer1.mlp.router", TensorRole::parameters);
  const auto shared = sharding_spec(model, plan, "layer1.mlp.shared.w_in", TensorRole::parameters);
  const auto experts = sharding_spec(model, plan, "layer1.mlp.w_in", TensorRole::parameters);
  ASSERT_TRUE(router.ok() && shared.ok() && experts.ok());
  EXPECT_EQ(router.value.partition_text(), "P(None, None)");
  EXPECT_EQ(shared.value.partition_text(), "P(None, 'tp')");
  EXPECT_EQ(*block_shape(shared.value, plan.mesh, 7), (std::vector<std::int64_t>{8, 6}));  // gate and up, 12 over tp=2
  EXPECT_EQ(experts.value.partition_text(), "P('ep', None, 'tp')");
  // A dense layer among them: its own MLP, no router, no shared experts.
  t.dense_layers = {0};
  t.dense_ffn = 10;
  for (const TensorChoice& c : sharding_tensors(model, 0)) {
    EXPECT_EQ(c.name.find("router"), std::string::npos) << c.name;
    EXPECT_EQ(c.name.find("shared"), std::string::npos) << c.name;
  }
  const auto dense = sharding_spec(model, plan, "layer0.mlp.w_in", TensorRole::parameters);
  ASSERT_TRUE(dense.ok());
  EXPECT_EQ(dense.value.partition_text(), "P(None, 'tp')");
  EXPECT_EQ(dense.value.dims[1].size, 20);  // gate and up of width 10
  EXPECT_FALSE(sharding_spec(model, plan, "layer0.mlp.router", TensorRole::parameters).ok());
  t.dense_layers.clear();
  t.dense_ffn = 0;
  // Without shared experts they are not listed, and asking for them is an error.
  t.shared_expert_ffn = 0;
  for (const TensorChoice& c : sharding_tensors(model, 1)) EXPECT_EQ(c.name.find("shared"), std::string::npos) << c.name;
  EXPECT_FALSE(sharding_spec(model, plan, "layer1.mlp.shared.w_in", TensorRole::parameters).ok());
}

// Experts out of tp (expert_tensor_parallel 1): each rank of ep x tp holds
// whole experts; the shared experts and the attention still split over tp.
TEST(ShardingSpec, ExpertsOutOfTensorParallelismSplitOverEpAndTp) {
  const ModelSpec model = small_moe();
  Plan plan = plan_on("ep=2,tp=2", 0);
  plan.sequence_parallel = true;
  plan.expert_tensor_parallel = 1;
  const auto experts = sharding_spec(model, plan, "layer1.mlp.w_in", TensorRole::parameters);
  const auto out = sharding_spec(model, plan, "layer1.mlp.w_out", TensorRole::parameters);
  const auto shared = sharding_spec(model, plan, "layer1.mlp.shared.w_in", TensorRole::parameters);
  ASSERT_TRUE(experts.ok() && out.ok() && shared.ok());
  EXPECT_EQ(experts.value.partition_text(), "P(('ep', 'tp'), None, None)");
  EXPECT_EQ(out.value.partition_text(), "P(('ep', 'tp'), None, None)");
  EXPECT_EQ(shared.value.partition_text(), "P(None, 'tp')");
  // 4 experts over 4 ranks: one whole expert on each (gate and up of the model's ffn side by side).
  const auto shape = block_shape(experts.value, plan.mesh, 3);
  ASSERT_TRUE(shape);
  EXPECT_EQ((*shape)[0], 1);
  EXPECT_EQ((*shape)[2], experts.value.dims[2].size);
  EXPECT_TRUE(experts.value.replicated_over.empty());
}

}  // namespace
}  // namespace meshplan
