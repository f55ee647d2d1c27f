#include "model/search.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <iterator>
#include <limits>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <tuple>
#include <utility>

#include "model/stage_partition.hpp"
#include "model/validate.hpp"

namespace meshplan {
namespace {

// Outermost first; tp innermost so that it stays inside a node.
constexpr Axis kCanonicalOrder[] = {Axis::pp, Axis::dp, Axis::fsdp, Axis::ep, Axis::cp, Axis::tp};

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> out;
  for (std::int64_t d = 1; d * d <= n; ++d) {
    if (n % d == 0) {
      out.push_back(d);
      if (d != n / d) out.push_back(n / d);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// The block costs read the plan's sizes and the links of tp, cp and ep
// (evaluate.cpp, block_collectives), so the key holds where those axes sit:
// their strides (enumerate_meshes may order them either way).
struct CostKey {
  std::int64_t tp, cp, ep, micro_batch;
  std::int64_t tp_stride, cp_stride, ep_stride;
  std::int64_t expert_tensor_parallel;
  bool sequence_parallel;
  Recompute recompute;
  Precision precision;
  Attention attention;
  CpComm cp_comm;
  EpDispatch ep_dispatch;
  bool operator<(const CostKey& o) const {
    return std::tie(tp, cp, ep, micro_batch, tp_stride, cp_stride, ep_stride, expert_tensor_parallel, sequence_parallel,
                    recompute, precision, attention, cp_comm, ep_dispatch) <
           std::tie(o.tp, o.cp, o.ep, o.micro_batch, o.tp_stride, o.cp_stride, o.ep_stride, o.expert_tensor_parallel,
                    o.sequence_parallel, o.recompute, o.precision, o.attention, o.cp_comm, o.ep_dispatch);
  }
};

// The stride place_axes gave `axis` (1 when the mesh has no such axis).
std::int64_t stride_of(const std::vector<AxisPlacement>& placements, Axis axis) {
  for (const AxisPlacement& p : placements)
    if (p.axis == axis) return p.stride;
  return 1;
}

// Block costs shared by every plan with the same CostKey, and the balanced
// stage splits (stage_partition.hpp) under them, by (pp, v); a split equal
// to the even one is stored empty.
struct CostEntry {
  std::vector<BlockCost> costs;
  std::map<std::pair<std::int64_t, std::int64_t>, std::vector<std::int64_t>> splits;
};

// Seconds one micro-batch spends in a block on its stage: what the evaluator
// adds to a stage's forward and backward time per block (evaluate.cpp, add_block).
double block_time_s(const BlockCost& c) {
  return c.forward_compute_s + c.backward_compute_s + c.tp_forward_s + c.tp_backward_s + c.cp_forward_exposed_s +
         c.cp_backward_exposed_s + c.ep_s;
}

const std::vector<std::int64_t>& balanced_split(CostEntry& entry, const ModelProfile& profile, std::int64_t pp,
                                                std::int64_t v) {
  auto [it, inserted] = entry.splits.try_emplace({pp, v});
  if (!inserted) return it->second;
  auto time_of = [&](int block) {
    return block < 0 ? 0.0 : block_time_s(entry.costs[static_cast<std::size_t>(profile.block_kind[static_cast<std::size_t>(block)])]);
  };
  std::vector<double> layer_s;
  layer_s.reserve(profile.layer_blocks.size());
  for (int block : profile.layer_blocks) layer_s.push_back(time_of(block));
  std::vector<std::int64_t> split =
      balanced_stage_layers(layer_s, time_of(profile.embedding_block), time_of(profile.head_block), pp, v);
  const bool even = std::all_of(split.begin(), split.end(), [&](std::int64_t n) { return n == split.front(); });
  if (!even) it->second = std::move(split);
  return it->second;
}

// The better of two evaluations of one candidate: one that fits, then the faster; `a` on a tie.
bool better_or_equal(const PlanEstimate& a, const PlanEstimate& b) {
  if (a.fits != b.fits) return a.fits;
  return a.time.step_s <= b.time.step_s;
}

Rejection check_rules(const Evaluator& evaluator, const Plan& plan, bool split_chosen_later);

bool faster(const Candidate& a, const Candidate& b) {
  if (a.estimate.time.step_s != b.estimate.time.step_s) return a.estimate.time.step_s < b.estimate.time.step_s;
  const double ma = a.estimate.worst_memory.total_bytes(), mb = b.estimate.worst_memory.total_bytes();
  if (ma != mb) return ma < mb;
  return std::make_tuple(a.plan.mesh.to_string(), a.plan.micro_batch, a.plan.zero_stage, to_string(a.plan.recompute),
                         a.plan.sequence_parallel, to_string(a.plan.schedule), to_string(a.plan.attention), a.plan.stage_layers) <
         std::make_tuple(b.plan.mesh.to_string(), b.plan.micro_batch, b.plan.zero_stage, to_string(b.plan.recompute),
                         b.plan.sequence_parallel, to_string(b.plan.schedule), to_string(b.plan.attention), b.plan.stage_layers);
}

}  // namespace

std::string to_string(Rejection rejection) {
  switch (rejection) {
    case Rejection::none: return "";
    case Rejection::tp_heads: return "tp_heads";
    case Rejection::tp_width: return "tp_width";
    case Rejection::axis_unsupported: return "axis_unsupported";
    case Rejection::pp_layers: return "pp_layers";
    case Rejection::interleave_micro_batches: return "interleave_micro_batches";
    case Rejection::interleave_without_pipeline: return "interleave_without_pipeline";
    case Rejection::cp_sequence: return "cp_sequence";
    case Rejection::ep_experts: return "ep_experts";
    case Rejection::cp_heads: return "cp_heads";
    case Rejection::batch: return "batch";
    case Rejection::out_of_memory: return "out_of_memory";
  }
  return "?";
}

std::string explain_rejection(Rejection rejection, const ModelSpec& model, double usable_bytes) {
  char gib[32];
  std::snprintf(gib, sizeof gib, "%.1f", usable_bytes / (1024.0 * 1024 * 1024));
  const auto& t = model.transformer;
  switch (rejection) {
    case Rejection::none: return "feasible";
    case Rejection::tp_heads:
      return "need tp dividing the " + std::to_string(t.heads) + " attention heads";
    case Rejection::tp_width: return "need tp dividing the feed-forward / MLP widths";
    case Rejection::axis_unsupported: return "use an axis a " + to_string(model.kind) + " model cannot use";
    case Rejection::pp_layers: return "have more pipeline chunks (pp x v) than layers";
    case Rejection::interleave_micro_batches: return "interleave with micro-batches not divisible by pp";
    case Rejection::interleave_without_pipeline: return "interleave without pipeline stages";
    case Rejection::cp_sequence: return "need cp (with sequence parallelism, cp x tp) dividing the sequence length";
    case Rejection::ep_experts: return "need ep dividing the experts (or a mixture-of-experts model)";
    case Rejection::cp_heads: return "need cp dividing the attention heads per tp rank (all-to-all context parallelism)";
    case Rejection::batch: return "cannot split the global batch into micro-batches x data-parallel ranks";
    case Rejection::out_of_memory: return std::string("exceed the ") + gib + " GiB usable per device";
  }
  return "?";
}

namespace {

// `mesh` (canonical order), then, when its ep, cp and tp axes (the canonical
// order's innermost) do not all lie inside one node (their product does not
// divide the node), every other order of them: which one crosses the nodes
// is then a choice (an all-to-all across
// nodes runs at each device's NIC share, a ring's traffic at the node's, a
// tp collective on every layer), and the evaluator, not a fixed order, makes it.
void add_inner_orders(std::vector<Mesh>& meshes, Mesh mesh, std::int64_t devices_per_node) {
  auto first_inner = mesh.axes.end();
  std::int64_t inner_devices = 1;
  while (first_inner != mesh.axes.begin() && latency_sensitive(std::prev(first_inner)->axis)) {
    --first_inner;
    inner_devices *= first_inner->size;
  }
  const auto start = first_inner - mesh.axes.begin();
  const std::optional<EvenGroupLayout> block = even_group_layout(inner_devices, 1, devices_per_node);
  const bool inside_a_node = block && block->nodes == 1;
  const bool choice = mesh.axes.size() - static_cast<std::size_t>(start) >= 2 && !inside_a_node;
  if (!choice) {
    meshes.push_back(std::move(mesh));
    return;
  }
  // Every permutation of the inner axes, the canonical one first, less those
  // that place every axis as one already kept: an axis whose groups tile the
  // nodes evenly is placed by its layout (members per node, nodes;
  // even_group_layout, as place_axes's closed forms), whatever its stride, and
  // any other by its stride (ep=4,cp=4,tp=2 and ep=4,tp=2,cp=4 on 8-device
  // nodes are one placement).
  const std::size_t inner = mesh.axes.size() - static_cast<std::size_t>(start);
  std::vector<int> rank_of(inner);
  for (std::size_t i = 0; i < inner; ++i) rank_of[i] = static_cast<int>(i);
  const std::vector<MeshAxis> canonical(mesh.axes.begin() + start, mesh.axes.end());
  // Each canonical inner axis's even layout (members per node, nodes), or {0, stride}, per order kept.
  std::vector<std::vector<EvenGroupLayout>> kept;
  do {
    Mesh ordered = mesh;
    std::vector<EvenGroupLayout> placed(inner);
    std::int64_t stride = 1;
    for (std::size_t i = inner; i-- > 0;) {
      const auto c = static_cast<std::size_t>(rank_of[i]);
      ordered.axes[static_cast<std::size_t>(start) + i] = canonical[c];
      placed[c] = even_group_layout(canonical[c].size, stride, devices_per_node).value_or(EvenGroupLayout{0, stride});
      stride *= canonical[c].size;
    }
    if (std::find(kept.begin(), kept.end(), placed) != kept.end()) continue;
    kept.push_back(std::move(placed));
    meshes.push_back(std::move(ordered));
  } while (std::next_permutation(rank_of.begin(), rank_of.end()));
}

}  // namespace

std::vector<Mesh> enumerate_meshes(std::int64_t world_size, const SearchSpace& space, std::int64_t devices_per_node) {
  std::vector<Axis> axes;
  for (Axis axis : kCanonicalOrder) {
    if (std::find(space.axes.begin(), space.axes.end(), axis) != space.axes.end()) axes.push_back(axis);
  }
  auto limit = [&](Axis axis) -> std::int64_t {
    switch (axis) {
      case Axis::tp: return space.max_tp > 0 ? space.max_tp : devices_per_node;
      case Axis::pp: return space.max_pp > 0 ? space.max_pp : world_size;
      case Axis::cp: return space.max_cp > 0 ? space.max_cp : world_size;
      case Axis::ep: return space.max_ep > 0 ? space.max_ep : world_size;
      default: return world_size;
    }
  };
  std::vector<Mesh> meshes;
  std::vector<MeshAxis> current;
  auto recurse = [&](auto&& self, std::size_t index, std::int64_t remaining) -> void {
    if (index == axes.size()) {
      if (remaining == 1) {
        Mesh mesh;
        for (const auto& a : current) {
          if (a.size > 1) mesh.axes.push_back(a);
        }
        if (mesh.axes.empty()) mesh.axes.push_back({axes.empty() ? Axis::dp : axes.front(), 1});
        add_inner_orders(meshes, std::move(mesh), devices_per_node);
      }
      return;
    }
    for (std::int64_t d : divisors(remaining)) {
      if (d > limit(axes[index])) break;
      current.push_back({axes[index], d});
      self(self, index + 1, remaining / d);
      current.pop_back();
    }
  };
  if (!axes.empty()) recurse(recurse, 0, world_size);
  return meshes;
}

Rejection quick_check(const Evaluator& evaluator, const Plan& plan) {
  return check_rules(evaluator, plan, !plan.stage_layers.empty());
}

namespace {

// quick_check's rules; `split_chosen_later`: the search will give the plan
// stage_layers, so pp x v need not divide the layers.
Rejection check_rules(const Evaluator& evaluator, const Plan& plan, bool split_chosen_later) {
  const ModelSpec& model = evaluator.model();
  const Mesh& mesh = plan.mesh;
  const std::int64_t tp = mesh.size(Axis::tp), pp = mesh.size(Axis::pp), cp = mesh.size(Axis::cp);
  const std::int64_t ep = mesh.size(Axis::ep);
  const std::int64_t seq = evaluator.profile().seq_len;
  if (model.kind == ModelKind::cnn && (tp > 1 || pp > 1 || cp > 1 || ep > 1)) return Rejection::axis_unsupported;
  if (model.kind == ModelKind::mlp && (cp > 1 || ep > 1)) return Rejection::axis_unsupported;
  if (plan.sequence_parallel && model.kind != ModelKind::transformer) return Rejection::axis_unsupported;
  if (plan.recompute == Recompute::selective_op && model.kind != ModelKind::transformer) return Rejection::axis_unsupported;
  if (plan.overlap_expert_parallel && (model.kind != ModelKind::transformer || model.transformer.experts == 0 ||
                                       !expert_overlap_problem(plan).empty())) {
    return Rejection::axis_unsupported;  // validate.cpp says why
  }
  if (model.kind == ModelKind::transformer) {
    const auto& t = model.transformer;
    if (t.heads % tp != 0) return Rejection::tp_heads;  // key/value heads tp does not divide are replicated
    if (!mlp_width_faults(t, plan).empty()) return Rejection::tp_width;
    if (cp > 1 && seq % cp != 0) return Rejection::cp_sequence;
    if (plan.sequence_parallel && tp > 1 && !mesh.sequence_parallel_divides(seq)) return Rejection::cp_sequence;
    const ExpertSplit experts = expert_split(plan);
    if (ep > 1 && t.experts == 0) return Rejection::ep_experts;
    if (experts.ep > 1 && t.experts % experts.ep != 0) return Rejection::ep_experts;
    if (expert_tp_faults(plan, t.experts).any()) return Rejection::axis_unsupported;  // validate.cpp says which
    if (cp > 1 && plan.cp_comm == CpComm::all_to_all && (t.heads / tp) % cp != 0) return Rejection::cp_heads;
  }
  if (model.kind == ModelKind::mlp && tp > 1) {
    for (const std::int64_t width : mlp_tp_split_widths(model.mlp))
      if (width % tp != 0) return Rejection::tp_width;
  }
  if (plan.schedule.kind == ScheduleKind::interleaved && (pp == 1 || model.kind == ModelKind::cnn)) {
    return Rejection::interleave_without_pipeline;
  }
  const auto layers = static_cast<std::int64_t>(evaluator.profile().layer_blocks.size());
  const std::int64_t chunks = (model.kind == ModelKind::cnn ? 1 : pp) * plan.schedule.virtual_stages;
  if (chunks > layers || (!split_chosen_later && layers % chunks != 0)) return Rejection::pp_layers;
  const std::int64_t per_step = plan.micro_batch * mesh.data_parallel_size();
  if (plan.micro_batch < 1 || plan.global_batch < 1 || plan.global_batch % per_step != 0) return Rejection::batch;
  if (plan.schedule.kind == ScheduleKind::interleaved && pp > 1 && plan.micro_batches() % pp != 0) {
    return Rejection::interleave_micro_batches;
  }
  return Rejection::none;
}

}  // namespace

namespace {

// What every mesh's enumeration reads: the job, the space and the options.
struct SearchContext {
  const Evaluator& evaluator;
  std::int64_t global_batch;
  const SearchSpace& space;
  bool transformer;
  bool fsdp_enabled;
  std::int64_t layer_count;
  bool keep_all;     // on_candidate: every candidate, feasible or not
  bool keep_ranked;  // options.keep_ranked
  std::int64_t experts;  // routed experts per layer (0: dense)
};

// The candidates of one mesh, in a deterministic order, and their counts.
struct MeshResult {
  std::vector<Candidate> candidates;  // all (for on_candidate) or feasible (for ranking)
  SearchStats stats;
  bool done = false;
};

// Phase 2, per candidate that passed the rules: its block costs (cached per
// CostKey), then the evaluator on the even split, the balanced one, or both
// and the better kept (the balanced split may not fit where the even one does).
void evaluate_candidate(const SearchContext& ctx, const Mesh& mesh, const std::vector<AxisPlacement>& placements,
                        std::map<CostKey, CostEntry>& cost_cache, CostEntry*& costs, Plan& plan, Candidate& candidate,
                        SearchStats& stats) {
  const Evaluator& evaluator = ctx.evaluator;
  const std::int64_t pp = mesh.size(Axis::pp);
  const std::int64_t v = plan.schedule.virtual_stages;
  if (!costs) {
    const CostKey key{mesh.size(Axis::tp),     mesh.size(Axis::cp),     mesh.size(Axis::ep),
                      plan.micro_batch,        stride_of(placements, Axis::tp), stride_of(placements, Axis::cp),
                      stride_of(placements, Axis::ep), plan.expert_tensor_parallel, plan.sequence_parallel, plan.recompute,
                      plan.precision,          plan.attention,          plan.cp_comm,
                      plan.ep_dispatch};
    auto it = cost_cache.find(key);
    if (it == cost_cache.end()) it = cost_cache.emplace(key, CostEntry{evaluator.block_costs(plan, placements), {}}).first;
    costs = &it->second;
  }
  const bool pipelined = pp > 1 && evaluator.model().kind != ModelKind::cnn;
  const std::vector<std::int64_t>* split = nullptr;
  if (pipelined) split = &balanced_split(*costs, evaluator.profile(), pp, v);
  const bool divides = ctx.layer_count % (pp * v) == 0;
  if (divides) {
    candidate.estimate = evaluator.evaluate(plan, placements, costs->costs);
    ++stats.evaluated;
  }
  if (split && !split->empty()) {
    plan.stage_layers = *split;
    PlanEstimate balanced = evaluator.evaluate(plan, placements, costs->costs);
    ++stats.evaluated;
    if (divides && better_or_equal(candidate.estimate, balanced)) {
      plan.stage_layers.clear();
    } else {
      candidate.estimate = balanced;
    }
  }
  if (!candidate.estimate.fits) candidate.rejection = Rejection::out_of_memory;
}

// Phase 1, per mesh: every micro-batch, precision, recompute, sequence
// parallelism, attention, ZeRO stage and schedule the space allows on it,
// checked by the structural rules and, when they pass, evaluated.
MeshResult search_mesh(const SearchContext& ctx, const Mesh& mesh, std::map<CostKey, CostEntry>& cost_cache) {
  const SearchSpace& space = ctx.space;
  const Evaluator& evaluator = ctx.evaluator;
  MeshResult local;
  const std::vector<AxisPlacement> placements = place_axes(evaluator.topology(), mesh);
  const std::int64_t data = mesh.data_parallel_size();
  const std::int64_t tp = mesh.size(Axis::tp), pp = mesh.size(Axis::pp);
  const bool pipelined = pp > 1 && evaluator.model().kind != ModelKind::cnn;
  std::vector<std::int64_t> micro_batches = space.micro_batches;
  if (micro_batches.empty()) {
    for (std::int64_t b = 1; b <= 64; b *= 2) micro_batches.push_back(b);
  }
  Plan plan;
  plan.mesh = mesh;
  plan.global_batch = ctx.global_batch;
  plan.seq_len = evaluator.profile().seq_len;
  plan.memory_headroom = space.memory_headroom;
  plan.cp_comm = space.cp_comm;
  plan.ep_dispatch = space.ep_dispatch;
  plan.fp32_gradients = space.fp32_gradients;
  plan.bf16_moments = space.bf16_moments;
  plan.recompute_modules = space.recompute_modules;
  plan.loss = space.loss;
  for (std::int64_t b : micro_batches) {
    plan.micro_batch = b;
    if (b * data > ctx.global_batch) continue;  // not a candidate at all: more than the batch
    for (Precision precision : space.precisions) {
      plan.precision = precision;
      for (Recompute recompute : space.recomputes) {
        // Nothing to be selective about; op-level checkpointing is of transformer blocks.
        if (!ctx.transformer && recompute_of_transformer_layers(recompute)) continue;
        plan.recompute = recompute;
        for (bool sp : space.sequence_parallel) {
          if (sp && (tp == 1 || !ctx.transformer)) continue;
          plan.sequence_parallel = sp;
          for (std::size_t ai = 0; ai < space.attentions.size(); ++ai) {
            if (ai > 0 && !ctx.transformer) break;  // no attention: one pass
            plan.attention = space.attentions[ai];
            if (search_leaves_out(space, recompute, plan.attention)) continue;
            std::int64_t tried_etp = -1;
            for (std::int64_t etp : space.expert_tensor_parallel) {
              // Experts out of tp (1) differ from in it (0) only where tp > 1 and nothing
              // stops them (expert_tp_faults); elsewhere 1 is 0.
              plan.expert_tensor_parallel = 1;
              if (etp == 1 && (tp == 1 || expert_tp_faults(plan, ctx.experts).any())) etp = 0;
              if (etp == tried_etp) continue;  // --expert-tp tp,1 where 1 does not apply: one pass
              tried_etp = etp;
              plan.expert_tensor_parallel = etp;
              CostEntry* costs = nullptr;
              for (int zero : space.zero_stages) {
                if (zero > 0 && mesh.zero_group_size() == 1) continue;  // the same plan as ZeRO 0
                // With fsdp in the space, dp x ZeRO-3 duplicates an fsdp mesh the search also visits.
                if (zero == 3 && ctx.fsdp_enabled) continue;
                plan.zero_stage = zero;
                for (ScheduleKind kind : space.schedules) {
                  if (!pipelined && kind != ScheduleKind::one_f_one_b) continue;
                  std::vector<std::int64_t> vs = {1};
                  if (kind == ScheduleKind::interleaved) vs = space.interleave;
                  for (std::int64_t v : vs) {
                    plan.schedule = {kind, v};
                    set_overlap_switches(plan, space.overlaps, ctx.experts);
                    Candidate candidate;
                    plan.stage_layers.clear();
                    candidate.rejection = check_rules(evaluator, plan, true);
                    ++local.stats.plans;
                    if (candidate.rejection == Rejection::none) {
                      evaluate_candidate(ctx, mesh, placements, cost_cache, costs, plan, candidate, local.stats);
                    }
                    ++local.stats.rejected[static_cast<std::size_t>(candidate.rejection)];
                    if (candidate.rejection == Rejection::none) ++local.stats.feasible;
                    if (ctx.keep_all || (ctx.keep_ranked && candidate.rejection == Rejection::none)) {
                      candidate.plan = plan;
                      local.candidates.push_back(std::move(candidate));
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  return local;
}

// Phase 4: fastest first, then the Pareto front of step time against memory
// per device: walking fastest first, keep each plan that needs less memory
// than every faster one.
void rank(SearchResult& result) {
  std::sort(result.ranked.begin(), result.ranked.end(), faster);
  double best_memory = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < result.ranked.size(); ++i) {
    const double memory = result.ranked[i].estimate.worst_memory.total_bytes();
    if (memory < best_memory) {
      result.pareto.push_back(i);
      best_memory = memory;
    }
  }
}

}  // namespace

bool search_leaves_out(const SearchSpace& space, Recompute recompute, Attention attention) {
  return recompute_repeats_nothing(recompute, attention, space.recompute_modules) &&
         std::find(space.recomputes.begin(), space.recomputes.end(), Recompute::none) != space.recomputes.end();
}

// Phase 1 runs on a pool of threads, one mesh at a time each (search_mesh);
// phase 3 drains their results in mesh order on the calling thread, so the
// output is the same whatever the thread timing; phase 4 ranks.
SearchResult search(const Evaluator& evaluator, std::int64_t global_batch, const SearchSpace& space,
                    const SearchOptions& options) {
  const auto started = std::chrono::steady_clock::now();
  SearchResult result;
  const std::vector<Mesh> meshes = enumerate_meshes(evaluator.topology().world_size, space, evaluator.topology().devices_per_node);
  const SearchContext ctx{evaluator,
                          global_batch,
                          space,
                          evaluator.model().kind == ModelKind::transformer,
                          std::find(space.axes.begin(), space.axes.end(), Axis::fsdp) != space.axes.end(),
                          static_cast<std::int64_t>(evaluator.profile().layer_blocks.size()),
                          static_cast<bool>(options.on_candidate),
                          options.keep_ranked,
                          evaluator.model().kind == ModelKind::transformer ? evaluator.model().transformer.experts : 0};

  std::vector<MeshResult> slots(meshes.size());
  std::mutex mutex;
  std::condition_variable ready;
  std::atomic<std::size_t> next{0};
  std::atomic<std::int64_t> plans_so_far{0};
  auto work = [&]() {
    std::map<CostKey, CostEntry> cost_cache;
    for (;;) {
      const std::size_t index = next.fetch_add(1);
      if (index >= meshes.size()) return;
      if (options.cancel && options.cancel->load()) return;
      MeshResult local = search_mesh(ctx, meshes[index], cost_cache);
      plans_so_far.fetch_add(local.stats.plans);
      {
        std::lock_guard<std::mutex> lock(mutex);
        local.done = true;
        slots[index] = std::move(local);
      }
      ready.notify_one();
    }
  };

  int threads = options.threads > 0 ? options.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = std::max(1, std::min<int>(threads, static_cast<int>(std::max<std::size_t>(meshes.size(), 1))));
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i) pool.emplace_back(work);

  // Phase 3: drain the slots in mesh order: deterministic output whatever the thread timing.
  auto absorb = [&](MeshResult& slot) {
    result.stats.meshes += 1;
    result.stats.plans += slot.stats.plans;
    result.stats.evaluated += slot.stats.evaluated;
    result.stats.feasible += slot.stats.feasible;
    for (std::size_t r = 0; r < result.stats.rejected.size(); ++r) result.stats.rejected[r] += slot.stats.rejected[r];
    for (auto& c : slot.candidates) {
      if (options.on_candidate) options.on_candidate(c);
      if (options.keep_ranked && c.rejection == Rejection::none) result.ranked.push_back(std::move(c));
    }
  };
  std::size_t emitted = 0;
  while (emitted < meshes.size()) {
    std::unique_lock<std::mutex> lock(mutex);
    const bool got = ready.wait_for(lock, std::chrono::milliseconds(100), [&] { return slots[emitted].done; });
    if (options.on_progress) options.on_progress(plans_so_far.load(), static_cast<std::int64_t>(emitted), static_cast<std::int64_t>(meshes.size()));
    if (!got) {
      if (options.cancel && options.cancel->load()) {
        lock.unlock();
        for (auto& t : pool) t.join();
        pool.clear();
        // Emit whatever finished, in order, up to the first gap.
        while (emitted < meshes.size() && slots[emitted].done) {
          MeshResult& slot = slots[emitted++];
          absorb(slot);
        }
        break;
      }
      continue;
    }
    MeshResult slot = std::move(slots[emitted]);
    slots[emitted].candidates.clear();
    slots[emitted].done = true;
    lock.unlock();
    ++emitted;
    absorb(slot);
  }
  for (auto& t : pool) t.join();
  if (options.on_progress) options.on_progress(plans_so_far.load(), static_cast<std::int64_t>(emitted), static_cast<std::int64_t>(meshes.size()));

  rank(result);
  result.stats.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  return result;
}

}  // namespace meshplan
