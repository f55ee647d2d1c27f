// The planner's search: the same answer whatever the thread count, a Pareto
// front that really is one, counts that add up, and rejection reasons that
// agree with the validator's.
#include <gtest/gtest.h>

#include <algorithm>

#include "model/search.hpp"
#include "model/topology.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

struct Fixture {
  ModelSpec model = must(load_model("llama2-13b"));
  ClusterSpec cluster = must(load_cluster("dgx-a100"));
  Evaluator evaluator{model, cluster, 64, 4096};
};

std::string key(const Candidate& c) {
  return c.plan.mesh.to_string() + " b" + std::to_string(c.plan.micro_batch) + " z" + std::to_string(c.plan.zero_stage) +
         " " + to_string(c.plan.recompute) + (c.plan.sequence_parallel ? " sp " : " ") + to_string(c.plan.schedule);
}

TEST(Search, DeterministicAcrossThreadCounts) {
  Fixture f;
  SearchOptions one, two;
  one.threads = 1;
  two.threads = 2;
  std::vector<std::string> streamed_one, streamed_two;
  one.on_candidate = [&](const Candidate& c) { streamed_one.push_back(key(c) + to_string(c.rejection)); };
  two.on_candidate = [&](const Candidate& c) { streamed_two.push_back(key(c) + to_string(c.rejection)); };
  const SearchResult a = search(f.evaluator, 256, SearchSpace{}, one);
  const SearchResult b = search(f.evaluator, 256, SearchSpace{}, two);
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  ASSERT_GT(a.ranked.size(), 10u);
  for (std::size_t i = 0; i < a.ranked.size(); ++i) {
    EXPECT_EQ(key(a.ranked[i]), key(b.ranked[i])) << i;
    EXPECT_EQ(a.ranked[i].estimate.time.step_s, b.ranked[i].estimate.time.step_s) << i;
  }
  EXPECT_EQ(streamed_one, streamed_two);
  EXPECT_EQ(a.pareto, b.pareto);
}

TEST(Search, RankingParetoAndCounts) {
  Fixture f;
  const SearchResult r = search(f.evaluator, 256, SearchSpace{});
  // Fastest first.
  for (std::size_t i = 1; i < r.ranked.size(); ++i) {
    EXPECT_LE(r.ranked[i - 1].estimate.time.step_s, r.ranked[i].estimate.time.step_s);
  }
  // No ranked plan is both at least as fast and strictly smaller than a Pareto plan, and
  // every non-Pareto plan is dominated by some Pareto plan.
  std::vector<bool> on_front(r.ranked.size(), false);
  for (std::size_t i : r.pareto) on_front[i] = true;
  for (std::size_t i : r.pareto) {
    for (const auto& other : r.ranked) {
      const bool faster_or_equal = other.estimate.time.step_s <= r.ranked[i].estimate.time.step_s;
      const bool smaller = other.estimate.worst_memory.total_bytes() < r.ranked[i].estimate.worst_memory.total_bytes();
      EXPECT_FALSE(faster_or_equal && smaller && other.estimate.time.step_s < r.ranked[i].estimate.time.step_s);
    }
  }
  for (std::size_t i = 0; i < r.ranked.size(); ++i) {
    if (on_front[i]) continue;
    bool dominated = false;
    for (std::size_t j : r.pareto) {
      dominated = dominated || (r.ranked[j].estimate.time.step_s <= r.ranked[i].estimate.time.step_s &&
                                r.ranked[j].estimate.worst_memory.total_bytes() <= r.ranked[i].estimate.worst_memory.total_bytes());
    }
    EXPECT_TRUE(dominated) << key(r.ranked[i]);
  }
  // Counts add up: every candidate is feasible or has exactly one reason.
  std::int64_t rejected = 0;
  for (std::size_t k = 1; k < r.stats.rejected.size(); ++k) rejected += r.stats.rejected[k];
  EXPECT_EQ(r.stats.feasible, r.stats.rejected[0]);
  EXPECT_EQ(r.stats.feasible + rejected, r.stats.plans);
  EXPECT_EQ(static_cast<std::int64_t>(r.ranked.size()), r.stats.feasible);
  // Every ranked plan is valid and fits, as explain sees it.
  for (std::size_t i = 0; i < r.ranked.size(); i += std::max<std::size_t>(1, r.ranked.size() / 25)) {
    const Explanation ex = explain_plan(f.model, f.cluster, {64, 0}, r.ranked[i].plan);
    EXPECT_TRUE(ex.feasible()) << key(r.ranked[i]) << "\n" << messages(ex.problems);
    ASSERT_TRUE(ex.time);
    EXPECT_NEAR(ex.time->step_s, r.ranked[i].estimate.time.step_s, 1e-9 * ex.time->step_s);
  }
}

TEST(Search, ConstraintsAreHonoured) {
  Fixture f;
  SearchSpace space;
  space.axes = {Axis::dp, Axis::tp};
  space.max_tp = 4;
  space.recomputes = {Recompute::full};
  const SearchResult r = search(f.evaluator, 256, space);
  ASSERT_FALSE(r.ranked.empty());
  for (const auto& c : r.ranked) {
    EXPECT_LE(c.plan.mesh.size(Axis::tp), 4);
    EXPECT_EQ(c.plan.mesh.size(Axis::pp), 1);
    EXPECT_EQ(c.plan.mesh.size(Axis::fsdp), 1);
    EXPECT_EQ(c.plan.recompute, Recompute::full);
  }
}

TEST(Search, CancelKeepsWhatWasDone) {
  Fixture f;
  std::atomic<bool> cancel{true};
  SearchOptions options;
  options.cancel = &cancel;
  const SearchResult r = search(f.evaluator, 256, SearchSpace{}, options);
  EXPECT_LE(r.stats.meshes, static_cast<std::int64_t>(enumerate_meshes(64, SearchSpace{}, 8).size()));
  EXPECT_EQ(static_cast<std::int64_t>(r.ranked.size()), r.stats.feasible);
}

// Where ep, cp and tp (two or more) need more devices than a node holds,
// each of their orders is a mesh of its own after the canonical one; where
// they fit in a node, or only one of them is used, the canonical order alone.
TEST(Search, InnerAxesCrossingNodesAreTriedInEveryOrder) {
  SearchSpace space;
  space.axes = {Axis::pp, Axis::dp, Axis::ep, Axis::cp, Axis::tp};
  const std::vector<Mesh> meshes = enumerate_meshes(64, space, 8);
  std::vector<std::string> texts;
  for (const Mesh& m : meshes) texts.push_back(m.to_string());
  auto count = [&](const std::string& text) { return std::count(texts.begin(), texts.end(), text); };
  // ep x tp = 16 > 8: both orders, canonical first.
  const auto canonical = std::find(texts.begin(), texts.end(), "dp=4,ep=8,tp=2");
  const auto swapped = std::find(texts.begin(), texts.end(), "dp=4,tp=2,ep=8");
  ASSERT_NE(canonical, texts.end());
  ASSERT_NE(swapped, texts.end());
  EXPECT_LT(canonical, swapped);
  // Three inner axes over 32 devices, pp and dp outside them. Where the two
  // inner ones fill a node (ep=4 outside cp=4 x tp=2, or cp=4 outside
  // ep=4 x tp=2), their order is one placement and is tried once; with tp
  // outside, cp x ep = 16 spans two nodes and which of them has all its
  // devices in a node is a choice again.
  for (const char* text : {"dp=2,ep=4,cp=4,tp=2", "dp=2,cp=4,ep=4,tp=2", "dp=2,tp=2,ep=4,cp=4", "dp=2,tp=2,cp=4,ep=4"})
    EXPECT_EQ(count(text), 1) << text;
  for (const char* text : {"dp=2,ep=4,tp=2,cp=4", "dp=2,cp=4,tp=2,ep=4"}) EXPECT_EQ(count(text), 0) << text;
  // ... and the order left out is priced as the one kept, axis by axis, on a cluster of 8-GPU nodes.
  const Topology topology = build_topology(must(load_cluster("dgx-h100")), 64);
  for (const auto& [left_out, kept] : {std::pair{"dp=2,ep=4,tp=2,cp=4", "dp=2,ep=4,cp=4,tp=2"},
                                       std::pair{"dp=2,cp=4,tp=2,ep=4", "dp=2,cp=4,ep=4,tp=2"}}) {
    const auto a = place_axes(topology, must(parse_mesh(left_out, "mesh")));
    const auto b = place_axes(topology, must(parse_mesh(kept, "mesh")));
    for (const AxisPlacement& pa : a) {
      const auto pb = std::find_if(b.begin(), b.end(), [&](const AxisPlacement& x) { return x.axis == pa.axis; });
      ASSERT_NE(pb, b.end());
      EXPECT_EQ(pa.bandwidth_bytes_per_s, pb->bandwidth_bytes_per_s) << left_out << " " << to_string(pa.axis);
      EXPECT_EQ(pa.all_to_all_bandwidth_bytes_per_s, pb->all_to_all_bandwidth_bytes_per_s) << left_out;
      EXPECT_EQ(pa.latency_s, pb->latency_s) << left_out;
    }
  }
  // cp=2,ep=8 puts all of an ep group in a node, ep=8,cp=2 four of its devices to a node.
  EXPECT_EQ(count("dp=4,ep=8,cp=2"), 1);
  EXPECT_EQ(count("dp=4,cp=2,ep=8"), 1);
  // Inside a node (ep x tp = 8), or one inner axis: the canonical order only.
  EXPECT_EQ(count("pp=2,dp=4,ep=4,tp=2"), 1);
  EXPECT_EQ(count("pp=2,dp=4,tp=2,ep=4"), 0);
  EXPECT_EQ(count("dp=4,tp=16"), 0);  // over the default tp limit (a node)
  EXPECT_EQ(count("dp=4,ep=16"), 1);
  // No mesh twice.
  std::vector<std::string> sorted = texts;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end());
  // A dense space (no ep, no cp) gains no meshes: tp alone is always innermost.
  SearchSpace dense;
  for (const Mesh& m : enumerate_meshes(64, dense, 8))
    EXPECT_TRUE(m.axes.back().axis == Axis::tp || m.size(Axis::tp) == 1) << m.to_string();
}

// Every order the enumeration leaves out is placed, axis by axis, exactly as
// an order it keeps (the same links, so the same plan to the evaluator), on
// node sizes the axes divide and on ones they do not (12 nodes of 8 with
// axes of 3 and 6), on other clusters' nodes, and on nodes of one and of
// four devices.
TEST(Search, OrdersLeftOutArePlacedAsOnesKept) {
  SearchSpace space;
  space.axes = {Axis::dp, Axis::ep, Axis::cp, Axis::tp};
  int checked = 0;
  struct Case {
    const char* cluster;
    std::int64_t world, devices_per_node;  // 0: the preset's
  };
  for (const auto& [cluster_name, world, per_node] :
       {Case{"dgx-h100", 64, 0}, Case{"dgx-h100", 96, 0}, Case{"pcie-a100", 64, 0}, Case{"ethernet-10g", 48, 0},
        Case{"dgx-h100", 64, 1}, Case{"dgx-h100", 48, 4}}) {
    ClusterSpec cluster = must(load_cluster(cluster_name));
    if (per_node > 0) cluster.devices_per_node = per_node;
    const Topology topology = build_topology(cluster, world);
    const std::vector<Mesh> meshes = enumerate_meshes(world, space, cluster.devices_per_node);
    auto same_links = [&](const Mesh& x, const Mesh& y) {
      const auto a = place_axes(topology, x), b = place_axes(topology, y);
      for (const AxisPlacement& pa : a) {
        const auto pb = std::find_if(b.begin(), b.end(), [&](const AxisPlacement& q) { return q.axis == pa.axis; });
        if (pb == b.end() || pa.bandwidth_bytes_per_s != pb->bandwidth_bytes_per_s ||
            pa.all_to_all_bandwidth_bytes_per_s != pb->all_to_all_bandwidth_bytes_per_s || pa.latency_s != pb->latency_s)
          return false;
      }
      return true;
    };
    for (const Mesh& mesh : meshes) {
      std::size_t start = mesh.axes.size();
      while (start > 0 && mesh.axes[start - 1].axis != Axis::dp) --start;
      if (mesh.axes.size() - start < 2) continue;
      Mesh other = mesh;
      std::sort(other.axes.begin() + static_cast<std::ptrdiff_t>(start), other.axes.end(),
                [](const MeshAxis& a, const MeshAxis& b) { return a.axis < b.axis; });
      do {
        const bool listed = std::any_of(meshes.begin(), meshes.end(), [&](const Mesh& m) { return m.to_string() == other.to_string(); });
        if (listed) continue;
        const bool placed_as_kept = std::any_of(meshes.begin(), meshes.end(), [&](const Mesh& m) {
          return m.size(Axis::dp) == other.size(Axis::dp) && m.size(Axis::ep) == other.size(Axis::ep) &&
                 m.size(Axis::cp) == other.size(Axis::cp) && m.size(Axis::tp) == other.size(Axis::tp) &&
                 same_links(m, other);
        });
        EXPECT_TRUE(placed_as_kept) << other.to_string() << " on " << world << " of " << cluster_name;
        ++checked;
      } while (std::next_permutation(other.axes.begin() + static_cast<std::ptrdiff_t>(start), other.axes.end(),
                                     [](const MeshAxis& a, const MeshAxis& b) { return a.axis < b.axis; }));
    }
  }
  EXPECT_GT(checked, 20);
}

// Each order of a mesh is costed with its own links: the search shares block
// costs between plans with the same sizes, and must not share them between
// two orders that put ep (or tp) on different links. Every ranked plan's
// step equals the evaluator's on that plan alone, and for the MoE below the
// order that keeps ep inside a node, with cp across, is the faster one.
TEST(Search, EachMeshOrderIsCostedOnItsOwnLinks) {
  ModelSpec model = must(load_model("llama3-8b"));
  model.transformer.experts = 16;
  model.transformer.top_k = 2;
  const ClusterSpec cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator{model, cluster, 32, 2048};
  SearchSpace space;
  space.axes = {Axis::pp, Axis::ep, Axis::cp};
  space.micro_batches = {1};
  space.zero_stages = {0};
  space.recomputes = {Recompute::full};
  space.schedules = {ScheduleKind::one_f_one_b};
  SearchOptions options;
  options.threads = 1;  // one cost cache sees every order
  double ep_inside = 0, ep_across = 0;
  int compared = 0;
  options.on_candidate = [&](const Candidate& c) {  // fitting or not: both have a step time
    if (c.rejection != Rejection::none && c.rejection != Rejection::out_of_memory) return;
    const PlanEstimate alone = evaluator.evaluate(c.plan);
    EXPECT_EQ(c.estimate.time.step_s, alone.time.step_s) << key(c);
    ++compared;
    if (c.plan.mesh.to_string() == "pp=2,cp=2,ep=8") ep_inside = c.estimate.time.step_s;
    if (c.plan.mesh.to_string() == "pp=2,ep=8,cp=2") ep_across = c.estimate.time.step_s;
  };
  search(evaluator, 64, space, options);
  EXPECT_GT(compared, 10);
  ASSERT_GT(ep_inside, 0);
  ASSERT_GT(ep_across, 0);
  EXPECT_LT(ep_inside, ep_across);
}

// Llama 3 405B's 126 layers divide by no pp of 4 or more that is a power of
// two. The search used to reject pp = 8, 16, 32, 64 outright (no plan of
// this space fitted); it now evaluates them with a balanced uneven split.
TEST(Search, UnevenLayerCountsGetABalancedSplit) {
  const ModelSpec model = must(load_model("llama3-405b"));
  const ClusterSpec cluster = must(load_cluster("dgx-h100"));
  const Evaluator evaluator{model, cluster, 1024, 8192};
  SearchSpace space;
  space.axes = {Axis::dp, Axis::tp, Axis::pp};
  space.micro_batches = {1};
  space.recomputes = {Recompute::selective};
  space.zero_stages = {1};
  const auto layers = static_cast<std::int64_t>(model.transformer.layers);
  ASSERT_EQ(layers, 126);
  std::int64_t too_many_chunks = 0, uneven = 0;
  SearchOptions options;
  options.on_candidate = [&](const Candidate& c) {
    const std::int64_t pp = c.plan.mesh.size(Axis::pp), v = c.plan.schedule.virtual_stages;
    const std::string text = key(c);
    if (pp * v > layers) {
      ++too_many_chunks;
      EXPECT_EQ(c.rejection, Rejection::pp_layers) << text;
      return;
    }
    EXPECT_NE(c.rejection, Rejection::pp_layers) << text;
    const bool evaluated = c.rejection == Rejection::none || c.rejection == Rejection::out_of_memory;
    if (!evaluated || pp == 1) return;
    if (layers % (pp * v) != 0) {
      EXPECT_FALSE(c.plan.stage_layers.empty()) << text;
    }
    if (c.plan.stage_layers.empty()) return;
    ++uneven;
    ASSERT_EQ(static_cast<std::int64_t>(c.plan.stage_layers.size()), pp * v) << text;
    std::vector<std::int64_t> stage(static_cast<std::size_t>(pp), 0);
    std::int64_t sum = 0;
    for (std::size_t chunk = 0; chunk < c.plan.stage_layers.size(); ++chunk) {
      EXPECT_GE(c.plan.stage_layers[chunk], 1) << text;
      stage[chunk % static_cast<std::size_t>(pp)] += c.plan.stage_layers[chunk];
      sum += c.plan.stage_layers[chunk];
    }
    EXPECT_EQ(sum, layers) << text;
    // Identical layers: the middle stages differ by at most one layer, and
    // the embedding and head stages carry no more than any of them.
    if (pp > 2) {
      const auto [low, high] = std::minmax_element(stage.begin() + 1, stage.end() - 1);
      EXPECT_LE(*high - *low, 1) << text;
      EXPECT_LE(stage.front(), *low) << text;
      EXPECT_LE(stage.back(), *low) << text;
    }
  };
  const SearchResult r = search(evaluator, 2048, space, options);
  EXPECT_GT(uneven, 0);
  EXPECT_EQ(r.stats.rejected[static_cast<std::size_t>(Rejection::pp_layers)], too_many_chunks);
  // Plans now fit, and explain, given the split, predicts the same step.
  ASSERT_FALSE(r.ranked.empty());
  const Candidate& best = r.ranked.front();
  EXPECT_FALSE(best.plan.stage_layers.empty()) << key(best);
  const Explanation ex = explain_plan(model, cluster, {1024, 0}, best.plan);
  EXPECT_TRUE(ex.feasible()) << messages(ex.problems);
  ASSERT_TRUE(ex.time);
  EXPECT_NEAR(ex.time->step_s, best.estimate.time.step_s, 1e-9 * ex.time->step_s);
}

// GPT-2's output layer (50257 x 768) outweighs several of its 12 layers, so
// even where pp x v divides them the balanced split differs from the even
// one. The search keeps the uneven split only when it beats the even one:
// it fits where the even one does not, or both fit and it is faster.
TEST(Search, UnevenSplitOnlyWhereItBeatsTheEvenOne) {
  const ModelSpec model = must(load_model("gpt2-124m"));
  const ClusterSpec cluster = must(load_cluster("dgx-a100"));
  const Evaluator evaluator{model, cluster, 8, 1024};
  const auto layers = static_cast<std::int64_t>(model.transformer.layers);
  std::int64_t uneven = 0;
  SearchOptions options;
  options.on_candidate = [&](const Candidate& c) {
    const std::int64_t chunks = c.plan.mesh.size(Axis::pp) * c.plan.schedule.virtual_stages;
    const bool evaluated = c.rejection == Rejection::none || c.rejection == Rejection::out_of_memory;
    if (!evaluated || c.plan.stage_layers.empty() || layers % chunks != 0) return;
    ++uneven;
    Plan even_plan = c.plan;
    even_plan.stage_layers.clear();
    const PlanEstimate even = evaluator.evaluate(even_plan);
    if (even.fits) {
      EXPECT_TRUE(c.estimate.fits) << key(c);
      EXPECT_LT(c.estimate.time.step_s, even.time.step_s) << key(c);
    }
  };
  search(evaluator, 64, SearchSpace{}, options);
  EXPECT_GT(uneven, 0);
}

}  // namespace
}  // namespace meshplan
