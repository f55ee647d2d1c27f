// What each tensor-parallel rank holds of each GPT tensor (shard_layout.hpp),
// checked without MPI: the slices of all tp ranks put back together give
// every full tensor exactly; q, k and v rows of one head stay on one rank;
// the vocabulary pads the last shard with zero rows; every rank's unit has
// the same layout; and on random meshes every rank's shard shapes, stages and
// sharding groups are what the ShardingSpec (model/sharding_spec.hpp) says.
// The numerical equivalence of whole plans is the MPI matrix's job
// (tests/parallel/parallel_matrix.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "executor/model/parameters.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "model/evaluate.hpp"
#include "model/cluster_spec.hpp"
#include "model/sharding_spec.hpp"
#include "model/stage_partition.hpp"
#include "tests/tiny_gpt.hpp"
#include "model/topology.hpp"

namespace {

using namespace meshplan;
using namespace meshplan::exec::parallel;

TransformerDims dims() {
  TransformerDims t;
  t.layers = 1;
  t.hidden = 8;
  t.heads = 4;
  t.ffn = 12;
  t.vocab = 11;  // odd: tp 2 holds 6 + 5 rows and one padding row
  t.seq_len = 3;
  return t;
}

// A Llama-style model: 8 query heads sharing 4 key/value heads (head_dim 2),
// SwiGLU, RMSNorm, rotary positions, untied output layer, no biases.
TransformerDims llama_dims() {
  TransformerDims t = dims();
  t.hidden = 16;
  t.heads = 8;
  t.head_dim = 2;
  testing_support::set_llama_layers(t, 4);
  return t;
}

// The Llama-style model with 2 key/value heads: tp 4 does not divide them, so
// every tp rank holds both (replicated).
TransformerDims llama_kv2_dims() {
  TransformerDims t = llama_dims();
  t.kv_heads = 2;
  return t;
}

// The models the parameterised tests run: 0 GPT-2 style, 1 Llama style, 2 Llama with 2 kv heads.
TransformerDims model_dims(int which) {
  if (which == 1) return llama_dims();
  if (which == 2) return llama_kv2_dims();
  TransformerDims t = dims();
  t.positions = Positions::learned;
  t.tied_embeddings = true;
  return t;
}

// The units of a one-stage model, as ParallelGpt::create lists them.
std::vector<UnitLayout> units(const TpShape& s) {
  std::vector<UnitLayout> out = {wte_unit(s)};
  if (s.learned_positions()) out.push_back(wpe_unit(s));
  out.push_back(layer_unit(s, 0));
  out.push_back(lnf_unit(s));
  if (!s.tied()) out.push_back(head_unit(s));
  return out;
}

class ParallelLayoutModels : public ::testing::TestWithParam<int> {};

TEST_P(ParallelLayoutModels, SlicesOfAllTpRanksRebuildEveryTensor) {
  ModelSpec spec;
  spec.kind = ModelKind::transformer;
  spec.transformer = model_dims(GetParam());
  const auto layout = exec::parameter_layout(spec);
  ASSERT_TRUE(layout.ok());
  std::vector<float> full(static_cast<std::size_t>(layout.value.total_elements));
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i + 1);  // every element distinct, non-zero

  for (const std::int64_t tp : {1, 2, 4}) {
    std::vector<float> rebuilt(full.size(), 0.0f);
    std::int64_t covered = 0;
    for (std::int64_t r = 0; r < tp; ++r) {
      const TpShape s = tp_shape(spec.transformer, tp, r);
      for (const UnitLayout& unit : units(s)) {
        std::vector<float> local(static_cast<std::size_t>(unit.elements), -1.0f);
        for (const LocalTensor& t : unit.tensors) {
          const std::int64_t at = layout.value.at(t.name).offset;
          extract_shard(t, s, full.data() + at, local.data() + t.offset);
          insert_shard(t, s, local.data() + t.offset, rebuilt.data() + at);
          if (t.split != TpSplit::none || r == 0) covered += t.elements();
          if (r != 0)  // whole parts (replicated key/value heads) once, from rank 0
            for (const auto& [begin, end] : t.whole_part_ranges()) covered -= end - begin;
        }
        for (const float v : local) EXPECT_NE(v, -1.0f) << unit.name << " has an unwritten element";
      }
    }
    EXPECT_EQ(rebuilt, full) << "tp " << tp;
    // Each element once, plus the vocabulary padding rows (of wte, and of lm_head when untied).
    const TpShape s0 = tp_shape(spec.transformer, tp, 0);
    EXPECT_EQ(s0.kv_replicated(), GetParam() == 2 && tp == 4) << "tp " << tp;
    const std::int64_t padded_rows = tp_shape(spec.transformer, tp, 0).vocab_local * tp - spec.transformer.vocab;
    const std::int64_t padding = padded_rows * spec.transformer.hidden * (spec.transformer.tied_embeddings ? 1 : 2);
    EXPECT_EQ(covered, layout.value.total_elements + padding) << "tp " << tp;
  }
}

// Under tp, grouped-query attention's rows are the rank's query heads, then its
// key heads, then its value heads; SwiGLU's fc rows its gate block, then its up block.
TEST(ParallelLayout, GroupedHeadsAndGatedRowsArePackedByPart) {
  const TransformerDims t = llama_dims();  // Q = 16, K = 8 (4 kv heads x 2), F = 12
  const TpShape s1 = tp_shape(t, 2, 1);
  const UnitLayout layer = layer_unit(s1, 0);
  ASSERT_EQ(layer.tensors.size(), 6u);  // ln1.w, qkv.w, attn_out.w, ln2.w, fc.w, fc_out.w: no biases
  const LocalTensor& qkv = layer.tensors[1];
  ASSERT_EQ(qkv.name, "layer0.qkv.w");
  ASSERT_EQ(qkv.rows, 16);  // (8 + 2 x 4) / 2
  EXPECT_EQ(global_row(qkv, s1, 0), 8);    // q: heads 4..7 are rows 8..15
  EXPECT_EQ(global_row(qkv, s1, 7), 15);
  EXPECT_EQ(global_row(qkv, s1, 8), 20);   // k starts at 16; rank 1 holds kv heads 2, 3: rows 20..23
  EXPECT_EQ(global_row(qkv, s1, 12), 28);  // v starts at 24: rows 28..31
  EXPECT_EQ(global_row(qkv, s1, 15), 31);
  const LocalTensor& fc = layer.tensors[4];
  ASSERT_EQ(fc.name, "layer0.fc.w");
  ASSERT_EQ(fc.rows, 12);  // 2F / 2
  EXPECT_EQ(global_row(fc, s1, 0), 6);     // gate rows 6..11
  EXPECT_EQ(global_row(fc, s1, 6), 18);    // up rows start at F = 12: 18..23
  EXPECT_EQ(head_unit(s1).tensors[0].name, "lm_head.w");

  // tp 4 does not divide 2 kv heads: rank 3 holds its query heads 6, 7 and both key and value heads.
  const TpShape s3 = tp_shape(llama_kv2_dims(), 4, 3);  // Q = 16, K = 4
  EXPECT_TRUE(s3.kv_replicated());
  EXPECT_EQ(s3.kv_heads_local(), 2);
  const LocalTensor qkv3 = layer_unit(s3, 0).tensors[1];
  ASSERT_EQ(qkv3.rows, 12);              // 16 / 4 + 2 x 4
  EXPECT_EQ(global_row(qkv3, s3, 0), 12);  // q rows 12..15
  EXPECT_EQ(global_row(qkv3, s3, 4), 16);  // every k row: 16..19
  EXPECT_EQ(global_row(qkv3, s3, 8), 20);  // every v row: 20..23
  EXPECT_EQ(global_row(qkv3, s3, 11), 23);
  const auto whole = qkv3.whole_part_ranges();
  ASSERT_EQ(whole.size(), 2u);
  EXPECT_EQ(whole[0], std::make_pair(qkv3.offset + 4 * qkv3.cols, qkv3.offset + 8 * qkv3.cols));
  EXPECT_EQ(whole[1], std::make_pair(qkv3.offset + 8 * qkv3.cols, qkv3.offset + 12 * qkv3.cols));
}

// The planner and the executor agree on what a tp rank holds of a layer:
// its parameters, and the width of its QKV GEMM, with key/value heads split
// (tp 2 for 2 kv heads, tp 2 and 4 for 4) and replicated (tp 4 for 2 kv heads).
TEST(ParallelLayout, ThePlannerCountsWhatEachTpRankHoldsOfALayer) {
  const Loaded<ClusterSpec> cluster = load_cluster("local-cpu");
  ASSERT_TRUE(cluster.ok());
  for (const int which : {0, 1, 2}) {
    ModelSpec model;
    model.kind = ModelKind::transformer;
    model.transformer = model_dims(which);
    model.transformer.layers = 2;
    if (model.transformer.kv_heads == 0) model.transformer.kv_heads = model.transformer.heads;
    model.transformer.head_dim = model.transformer.head_size();
    for (const std::int64_t tp : {1, 2, 4}) {
      const Evaluator evaluator(model, cluster.value, tp, model.transformer.seq_len);
      Plan plan;
      plan.mesh.axes = {{Axis::tp, tp}};
      plan.micro_batch = 1;
      const auto costs = evaluator.block_costs(plan, place_axes(evaluator.topology(), plan.mesh));
      const BlockCost& layer = costs[static_cast<std::size_t>(evaluator.profile().uniform_layer_kind)];
      const TpShape s = tp_shape(model.transformer, tp, tp - 1);
      const std::string where = "model " + std::to_string(which) + " tp " + std::to_string(tp);
      EXPECT_DOUBLE_EQ(layer.dense_parameters, static_cast<double>(layer_unit(s, 0).elements)) << where;
      EXPECT_DOUBLE_EQ(layer.gemms.front().shape.n, static_cast<double>(s.qkv_local())) << where << ": QKV width";
      EXPECT_EQ(s.kv_replicated(), which == 2 && tp == 4) << where;
    }
  }
}

TEST(ParallelLayout, HeadsStayTogetherAndTheVocabularyIsPadded) {
  const TransformerDims t = dims();
  const TpShape s1 = tp_shape(t, 2, 1);
  const UnitLayout layer = layer_unit(s1, 0);
  const LocalTensor& qkv = layer.tensors[2];
  ASSERT_EQ(qkv.name, "layer0.qkv.w");
  ASSERT_EQ(qkv.rows, 12);  // 3 x C / tp
  // Rank 1 holds heads 2 and 3 (channels 4..7) of q, then of k, then of v.
  EXPECT_EQ(global_row(qkv, s1, 0), 4);
  EXPECT_EQ(global_row(qkv, s1, 3), 7);
  EXPECT_EQ(global_row(qkv, s1, 4), 12);
  EXPECT_EQ(global_row(qkv, s1, 8), 20);
  EXPECT_EQ(global_row(qkv, s1, 11), 23);
  const LocalTensor& attn_out = layer.tensors[4];
  EXPECT_EQ(attn_out.cols, 4);
  EXPECT_EQ(global_col(attn_out, s1, 0), 4);  // the same heads' input columns

  EXPECT_EQ(s1.vocab_local, 6);
  EXPECT_EQ(s1.vocab_real(), 5);
  const LocalTensor wte = wte_unit(s1).tensors[0];
  EXPECT_EQ(global_row(wte, s1, 4), 10);
  EXPECT_EQ(global_row(wte, s1, 5), -1);  // padding
  std::vector<float> full(static_cast<std::size_t>(11 * 8), 1.0f), local(static_cast<std::size_t>(6 * 8), -1.0f);
  extract_shard(wte, s1, full.data(), local.data());
  for (std::int64_t c = 0; c < 8; ++c) EXPECT_EQ(local[static_cast<std::size_t>(5 * 8 + c)], 0.0f);

  // Same layout on every tp rank: what FSDP shards and tp reductions rely on.
  const UnitLayout layer0 = layer_unit(tp_shape(t, 2, 0), 0);
  ASSERT_EQ(layer0.elements, layer.elements);
  for (std::size_t i = 0; i < layer.tensors.size(); ++i) EXPECT_EQ(layer0.tensors[i].offset, layer.tensors[i].offset);
}

// ---- every rank's layout against the ShardingSpec

// model_dims(which) with 4 layers.
ModelSpec small_model(int which) {
  ModelSpec spec;
  spec.kind = ModelKind::transformer;
  spec.transformer = model_dims(which);
  spec.transformer.layers = 4;
  if (spec.transformer.kv_heads == 0) spec.transformer.kv_heads = spec.transformer.heads;
  return spec;
}

// The units a rank of `stage` holds, as ParallelGpt::create lists them: wte
// and wpe with chunk 0, the layers of its chunks, the tied output layer's wte
// copy and ln_f with the last chunk.
std::vector<UnitLayout> stage_units(const TpShape& s, const StagePartition& partition, const std::vector<int>& layer_blocks,
                                    std::int64_t stage) {
  std::vector<UnitLayout> out;
  const std::int64_t pp = partition.stages;
  if (stage == 0) {
    out.push_back(wte_unit(s));
    if (s.learned_positions()) out.push_back(wpe_unit(s));
  }
  for (std::int64_t c = stage; c < partition.chunk_count(); c += pp) {
    for (const int block : partition.chunk_blocks[static_cast<std::size_t>(c)]) {
      out.push_back(layer_unit(s, std::find(layer_blocks.begin(), layer_blocks.end(), block) - layer_blocks.begin()));
    }
  }
  if (stage == pp - 1) {
    if (stage != 0 && s.tied()) out.push_back(wte_unit(s));
    out.push_back(lnf_unit(s));
    if (!s.tied()) out.push_back(head_unit(s));
  }
  return out;
}

// A random mesh of dp, fsdp, tp and pp (axes in random order, sizes 1, 2 or
// 4, at most 16 devices), ZeRO stage and pipeline partition that the executor
// runs for small_gpt (4 layers, 4 heads, ffn 12).
Plan random_plan(std::mt19937_64& rng) {
  auto size = [&] { return std::int64_t{1} << std::uniform_int_distribution<int>(0, 2)(rng); };
  for (;;) {
    Plan plan;
    std::vector<MeshAxis> axes = {{Axis::dp, size()}, {Axis::fsdp, size()}, {Axis::tp, size()}, {Axis::pp, size()}};
    std::shuffle(axes.begin(), axes.end(), rng);
    plan.mesh.axes = axes;
    plan.zero_stage = std::uniform_int_distribution<int>(0, 3)(rng);
    const std::int64_t dp = plan.mesh.size(Axis::dp), fsdp = plan.mesh.size(Axis::fsdp), pp = plan.mesh.size(Axis::pp);
    if (plan.mesh.world_size() > 16) continue;
    if (plan.zero_stage > 0 && fsdp > 1 && dp > 1) continue;  // refused by ParallelGpt::create
    const std::int64_t v = pp == 2 ? std::uniform_int_distribution<std::int64_t>(1, 2)(rng) : 1;
    if (v > 1) plan.schedule = {ScheduleKind::interleaved, v};
    if (pp == 2 && v == 1 && std::uniform_int_distribution<int>(0, 1)(rng) == 1) plan.stage_layers = {1, 3};
    plan.micro_batch = 1;
    return plan;
  }
}

// One tensor on one rank against the spec of one role: the local extent along
// each stored dimension is the spec's block extent where tp splits that
// dimension (the real rows, padding left out), and whole where it does not.
void expect_matches_spec(const LocalTensor& t, const TpShape& s, const ShardingSpec& pass, const Mesh& mesh,
                         std::int64_t rank, const std::string& where) {
  const auto shape = block_shape(pass, mesh, rank);
  ASSERT_TRUE(shape.has_value()) << where << ": the spec puts " << t.spec_tensor << " on other stages";
  const auto block = *block_of_device(pass, mesh, rank);
  const std::vector<std::int64_t> local = {t.packing == TpPacking::vocab_padded ? s.vocab_real() : t.rows, t.cols};
  for (std::size_t i = 0; i < t.global_shape.size(); ++i) {
    const auto d = static_cast<std::size_t>(t.spec_dims[i]);
    const bool spec_splits = std::find(pass.dims[d].axes.begin(), pass.dims[d].axes.end(), Axis::tp) != pass.dims[d].axes.end();
    const bool executor_splits = s.tp > 1 && ((t.split == TpSplit::columns && i == 0) || (t.split == TpSplit::rows && i == 1));
    EXPECT_EQ(executor_splits, spec_splits) << where << " dimension " << i;
    EXPECT_EQ(pass.dims[d].axes.size(), spec_splits ? 1u : 0u) << where << ": only tp splits a gathered weight";
    if (spec_splits) {
      EXPECT_EQ(local[i], (*shape)[d]) << where << " dimension " << i;
      if (t.packing != TpPacking::parts && local[i] > 0) {  // which block: the first element's global index
        const std::int64_t first = i == 0 ? global_row(t, s, 0) : global_col(t, s, 0);
        EXPECT_EQ(first, block[d] * split_extents(pass.dims[d].size, mesh.size(Axis::tp)).front()) << where;
      }
    } else {
      EXPECT_EQ(local[i], t.global_shape[i]) << where << " dimension " << i;
      EXPECT_EQ((*shape)[d], pass.dims[d].size) << where << " dimension " << i;
    }
  }
}

// A tensor packed in parts (qkv: attn.q, attn.kv, attn.kv; gated fc:
// mlp.w_in twice) on one rank: its rows are, spec tensor by spec tensor, the
// spec's block extents (parts of one spec tensor share its block), a part is
// whole exactly when the spec's tp does not split its tensor, and the columns
// are whole. Each spec tensor is held by this rank's stage.
void expect_parts_match_spec(const ModelSpec& model, const Plan& plan, const LocalTensor& t, const TpShape& s,
                             std::int64_t rank) {
  const std::string where = plan.mesh.to_string() + " rank " + std::to_string(rank) + " " + t.name;
  const auto d = static_cast<std::size_t>(t.spec_dims[0]);
  std::int64_t rows = 0;
  std::vector<std::string> seen;
  for (const TpPart& part : t.parts) {
    const auto spec = sharding_spec(model, plan, part.spec_tensor, TensorRole::parameters);
    ASSERT_TRUE(spec.ok()) << where;
    const ShardingSpec pass = gathered(spec.value, plan.mesh);
    const auto shape = block_shape(pass, plan.mesh, rank);
    ASSERT_TRUE(shape.has_value()) << where << ": the spec puts " << part.spec_tensor << " on other stages";
    const bool spec_splits = std::find(pass.dims[d].axes.begin(), pass.dims[d].axes.end(), Axis::tp) != pass.dims[d].axes.end();
    EXPECT_EQ(part.whole, s.tp > 1 && !spec_splits) << where << " " << part.spec_tensor;
    if (std::find(seen.begin(), seen.end(), part.spec_tensor) == seen.end()) rows += (*shape)[d];
    seen.push_back(part.spec_tensor);
    if (t.global_shape.size() == 2) {
      EXPECT_EQ(t.cols, (*shape)[static_cast<std::size_t>(t.spec_dims[1])]) << where;
      EXPECT_EQ(t.cols, t.global_shape[1]) << where;
    }
  }
  EXPECT_EQ(t.rows, rows) << where;
}

TEST_P(ParallelLayoutModels, EveryRanksShardsAreTheShardingSpecsBlocks) {
  const ModelSpec model = small_model(GetParam());
  const LayerGraph graph = build_layer_graph(model, model.transformer.seq_len);
  const std::vector<int> layer_blocks = graph.layer_blocks();
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 60; ++trial) {
    const Plan plan = random_plan(rng);
    const Mesh& mesh = plan.mesh;
    const auto partition = partition_stages(graph, mesh.size(Axis::pp), plan.schedule.virtual_stages, plan.stage_layers);
    ASSERT_TRUE(partition.ok());
    const DataSharding data = data_sharding(plan);
    for (std::int64_t rank = 0; rank < mesh.world_size(); ++rank) {
      const TpShape s = tp_shape(model.transformer, mesh.size(Axis::tp), mesh.coordinate(rank, Axis::tp));
      const std::int64_t stage = mesh.coordinate(rank, Axis::pp);
      std::vector<std::string> held;
      for (const UnitLayout& unit : stage_units(s, partition.value, layer_blocks, stage)) {
        for (const LocalTensor& t : unit.tensors) {
          held.push_back(t.spec_tensor);
          if (t.packing == TpPacking::parts) {  // qkv, gated fc: the parts against their spec tensors
            expect_parts_match_spec(model, plan, t, s, rank);
            for (const TpPart& part : t.parts) held.push_back(part.spec_tensor);
            continue;
          }
          for (const TensorRole role : {TensorRole::parameters, TensorRole::gradients, TensorRole::optimizer_moment}) {
            const std::string where = mesh.to_string() + " zero " + std::to_string(plan.zero_stage) + " rank " +
                                      std::to_string(rank) + " " + t.name + " " + to_string(role);
            const Loaded<ShardingSpec> spec = sharding_spec(model, plan, t.spec_tensor, role);
            ASSERT_TRUE(spec.ok()) << where;
            expect_matches_spec(t, s, gathered(spec.value, mesh), mesh, rank, where);
            // The flat unit is sharded over the group the spec's data axes make up.
            std::int64_t spec_group = 1;
            for (const Axis a : spec.value.data_axes) spec_group *= mesh.size(a);
            const bool sharded = role == TensorRole::parameters ? data.parameters
                                 : role == TensorRole::gradients ? data.gradients
                                                                 : data.optimizer;
            EXPECT_EQ(spec_group, sharded ? mesh.size(data.axis) : 1) << where;
          }
        }
      }
      // Conversely, every layer tensor the spec puts on this stage is held here.
      for (std::int64_t layer = 0; layer < model.transformer.layers; ++layer) {
        for (const TensorChoice& choice : sharding_tensors(model, layer)) {
          if (choice.activation || choice.name.rfind("layer", 0) != 0) continue;
          const auto spec = sharding_spec(model, plan, choice.name, TensorRole::parameters);
          EXPECT_EQ(block_shape(spec.value, mesh, rank).has_value(),
                    std::find(held.begin(), held.end(), choice.name) != held.end())
              << mesh.to_string() << " rank " << rank << " " << choice.name;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GptAndLlama, ParallelLayoutModels, ::testing::Values(0, 1, 2),
                         [](const ::testing::TestParamInfo<int>& model) {
                           return std::string(model.param == 0 ? "gpt2" : model.param == 1 ? "llama" : "llama_kv2");
                         });

}  // namespace
