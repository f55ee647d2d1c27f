// Builds StepWork from the cost record (model/stage_cost.hpp): compute
// seconds, activation bytes and every in-layer collective (axis, kind, bytes,
// count) are the Evaluator's BlockCost record, summed over the blocks of each
// chunk (stage_partition.hpp); the pipeline transfer, the gradient collective
// and the optimizer's traffic are stage_cost.hpp's too. Nothing is re-derived
// here: each collective is priced by collective_time() for its algorithm
// choice, then split into its latency (steps x alpha) and its bus bytes
// (S x F_bus / efficiency), so the engine can slow the bandwidth part down
// when links are shared.
#include "simulator/step_work.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "model/compute_model.hpp"
#include "model/model_states.hpp"
#include "model/schedule.hpp"
#include "model/stage_partition.hpp"

namespace meshplan::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Ranks that communicate together over one or more mesh axes, combined as
// evaluate.cpp's combine() does: sizes multiply, the slowest axis sets the
// bandwidth, the largest latency counts.
struct Group {
  Axis axis = Axis::tp;  // the label the trace and the summary use
  std::int64_t size = 1;
  double bandwidth_bytes_per_s = kInf;
  double all_to_all_bandwidth_bytes_per_s = kInf;  // AxisPlacement's (the slowest axis)
  double latency_s = 0;
  std::int64_t members_per_node = 1;
  bool intra = false;    // some ring hops stay inside a node: the device links
  bool crosses = false;  // some hops cross nodes: the node's NICs
  double all_to_all_nic_share = 1;  // of an all-to-all's cross-node bytes, what crosses (ExpertDispatchRate::nic_share)
};

Group group_of(const std::vector<AxisPlacement>& placements, std::initializer_list<Axis> axes, Axis label) {
  Group g;
  g.axis = label;
  for (Axis axis : axes) {
    for (const AxisPlacement& p : placements) {
      if (p.axis != axis || p.size <= 1) continue;
      g.size *= p.size;
      g.bandwidth_bytes_per_s = std::min(g.bandwidth_bytes_per_s, p.bandwidth_bytes_per_s);
      g.all_to_all_bandwidth_bytes_per_s = std::min(g.all_to_all_bandwidth_bytes_per_s, p.all_to_all_bandwidth_bytes_per_s);
      g.latency_s = std::max(g.latency_s, p.latency_s);
      g.members_per_node *= p.members_per_node;
      g.intra = g.intra || std::isfinite(p.intra_bandwidth_bytes_per_s);
      g.crosses = g.crosses || p.crosses_nodes;
    }
  }
  return g;
}

void add_link(CommWork& work, std::int32_t link, double weight) {
  work.links[static_cast<std::size_t>(work.link_count++)] = {link, weight};
}

// Adds `count` copies of `one` (same group, run back to back) to `into`.
void accumulate(CommWork& into, const CommWork& one, double count) {
  if (one.empty()) return;
  if (into.empty()) {
    into.axis = one.axis;
    into.bandwidth_bytes_per_s = one.bandwidth_bytes_per_s;
    into.links = one.links;
    into.link_count = one.link_count;
  }
  into.bytes += count * one.bytes;
  into.bus_bytes += count * one.bus_bytes;
  into.latency_s += count * one.latency_s;
}

class Builder {
 public:
  Builder(const Evaluator& evaluator, const Plan& plan, const SimulationOptions& options, std::int64_t stages)
      : evaluator_(evaluator), options_(options) {
    const Mesh& mesh = plan.mesh;
    std::int64_t stride = 1;
    for (std::size_t i = mesh.axes.size(); i-- > 0;) {
      if (mesh.axes[i].axis == Axis::pp) pp_stride_ = stride;
      stride *= mesh.axes[i].size;
    }
    const Topology& topology = evaluator.topology();
    for (std::int64_t r = 0; r < stages; ++r) {
      const std::int64_t rank = r * pp_stride_;
      const std::int64_t node = topology.node_of(rank);
      representative_.push_back(rank);
      node_.push_back(node);
      // Devices of this stage on the representative's node: they all move the same bytes at once.
      std::int64_t count = 0;
      const std::int64_t first = node * topology.devices_per_node;
      const std::int64_t last = std::min(first + topology.devices_per_node, topology.world_size);
      for (std::int64_t other = first; other < last; ++other) count += mesh.coordinate(other, Axis::pp) == r ? 1 : 0;
      replicas_on_node_.push_back(std::max<std::int64_t>(count, 1));
      const auto [edge, found] = boost::edge(topology.device(rank), topology.node_switch(node), topology.graph);
      const double device_bandwidth = found ? topology.graph[edge].bandwidth_bytes_per_s : kInf;
      links_.push_back({"stage " + std::to_string(r) + " device out", device_bandwidth});
      links_.push_back({"stage " + std::to_string(r) + " device in", device_bandwidth});
    }
  }

  std::int64_t representative(std::int64_t r) const { return representative_[static_cast<std::size_t>(r)]; }
  std::int64_t node(std::int64_t r) const { return node_[static_cast<std::size_t>(r)]; }
  std::vector<SimLink> take_links() { return std::move(links_); }

  // A collective over `group` as the representative of stage r runs it.
  CommWork collective(Collective collective, double bytes, const Group& group, std::int64_t r) {
    CommWork work;
    work.axis = group.axis;
    if (options_.zero_communication || group.size <= 1 || !(bytes > 0)) return work;
    const bool all_to_all = collective == Collective::all_to_all;
    const double bandwidth = all_to_all ? group.all_to_all_bandwidth_bytes_per_s : group.bandwidth_bytes_per_s;
    const CollectiveCost cost = collective_time(collective, bytes, group.size, bandwidth, group.latency_s);
    const double efficiency = cost.algorithm == CollectiveAlgorithm::tree ? kTreeBandwidthEfficiency : 1.0;
    work.bytes = bytes;
    work.bus_bytes = bytes * bus_bandwidth_factor(collective, group.size) / efficiency;
    work.latency_s = static_cast<double>(latency_steps(collective, group.size, cost.algorithm)) * group.latency_s;
    work.bandwidth_bytes_per_s = bandwidth;
    if (group.intra) {
      add_link(work, device_out(r), 1);
      add_link(work, device_in(r), 1);
    }
    if (group.crosses) {
      // A ring leaves and enters the node once per group: the node's
      // replicas of this stage form replicas / m groups (topology.hpp, G).
      // An all-to-all sends each member's bytes for other nodes through the NICs.
      const double groups = std::max(1.0, static_cast<double>(replicas_on_node_[static_cast<std::size_t>(r)]) /
                                              static_cast<double>(group.members_per_node));
      const double weight =
          all_to_all ? all_to_all_nic_weight(group.size, group.members_per_node, groups) * group.all_to_all_nic_share : groups;
      add_link(work, nic_out(node(r)), weight);
      add_link(work, nic_in(node(r)), weight);
    }
    return work;
  }

  // A bandwidth-only flow that takes `seconds` at the group's bandwidth alone
  // (for terms the cost model gives only as an exposed time: ring attention).
  CommWork exposed_time(double seconds, const Group& group, std::int64_t r) {
    if (!(seconds > 0)) {
      CommWork none;
      none.axis = group.axis;
      return none;
    }
    CommWork work = collective(Collective::send_recv, 1.0, group, r);  // for the group's links
    if (work.empty()) return work;
    work.bytes = seconds * group.bandwidth_bytes_per_s;
    work.bus_bytes = work.bytes;
    work.latency_s = 0;
    return work;
  }

  // A pipeline transfer of `bytes` from stage `from` to stage `to` (evaluate.cpp:
  // send_recv over the pp link): each replica of the stage sends its own.
  CommWork transfer(double bytes, const Group& pp, std::int64_t from, std::int64_t to) {
    CommWork work;
    work.axis = Axis::pp;
    if (options_.zero_communication || pp.size <= 1 || !(bytes > 0)) return work;
    work.bytes = bytes;
    work.bus_bytes = bytes;  // F_bus = 1, ring
    work.latency_s = pp.latency_s;
    work.bandwidth_bytes_per_s = pp.bandwidth_bytes_per_s;
    if (node(from) == node(to)) {
      add_link(work, device_out(from), 1);
      add_link(work, device_in(to), 1);
    } else {
      add_link(work, nic_out(node(from)), static_cast<double>(replicas_on_node_[static_cast<std::size_t>(from)]));
      add_link(work, nic_in(node(to)), static_cast<double>(replicas_on_node_[static_cast<std::size_t>(to)]));
    }
    return work;
  }

 private:
  std::int32_t device_out(std::int64_t r) const { return static_cast<std::int32_t>(2 * r); }
  std::int32_t device_in(std::int64_t r) const { return static_cast<std::int32_t>(2 * r + 1); }
  std::int32_t nic_out(std::int64_t node) { return nic_pool(node); }
  std::int32_t nic_in(std::int64_t node) { return nic_pool(node) + 1; }
  std::int32_t nic_pool(std::int64_t node) {
    auto it = nic_links_.find(node);
    if (it != nic_links_.end()) return it->second;
    const auto index = static_cast<std::int32_t>(links_.size());
    const double bandwidth = node_nic_bandwidth_bytes_per_s(evaluator_.topology(), node);
    links_.push_back({"node " + std::to_string(node) + " NICs out", bandwidth});
    links_.push_back({"node " + std::to_string(node) + " NICs in", bandwidth});
    nic_links_.emplace(node, index);
    return index;
  }

  const Evaluator& evaluator_;
  const SimulationOptions& options_;
  std::int64_t pp_stride_ = 1;
  std::vector<std::int64_t> representative_, node_, replicas_on_node_;
  std::vector<SimLink> links_;
  std::map<std::int64_t, std::int32_t> nic_links_;
};

// The groups a representative device communicates in, per purpose.
struct Groups {
  Group tp, cp, ep, pp, dp, fsdp;
  // `expert_placements`: stage_cost.hpp's, whose ep is the routed experts' group.
  Groups(const std::vector<AxisPlacement>& placements, const std::vector<AxisPlacement>& expert_placements,
         const Plan& plan, const ModelProfile& prof)
      : tp(group_of(placements, {Axis::tp}, Axis::tp)),
        cp(group_of(placements, {Axis::cp}, Axis::cp)),
        ep(group_of(expert_placements, {Axis::ep}, Axis::ep)),
        pp(group_of(placements, {Axis::pp}, Axis::pp)),
        dp(group_of(placements, {Axis::dp, Axis::ep}, Axis::dp)),
        // ZeRO-3 on dp shards over dp x ep too (the evaluator's fsdp group).
        fsdp(zero_shards(plan.zero_stage, ModelState::parameters)
                 ? group_of(placements, {Axis::fsdp, Axis::dp, Axis::ep},
                            plan.mesh.size(Axis::fsdp) == 1 ? Axis::dp : Axis::fsdp)
                 : group_of(placements, {Axis::fsdp}, Axis::fsdp)) {
    // The routed tokens' dispatch at the rate the evaluator prices (stage_cost.hpp, expert_dispatch_rate).
    for (const AxisPlacement& p : expert_placements) {
      if (p.axis != Axis::ep || p.size <= 1) continue;
      const ExpertDispatchRate rate = expert_dispatch_rate(p, plan, prof.routing());
      ep.all_to_all_bandwidth_bytes_per_s = rate.bandwidth_bytes_per_s;
      ep.all_to_all_nic_share = rate.nic_share;
    }
  }
  const Group& of(Axis axis) const { return axis == Axis::cp ? cp : axis == Axis::ep ? ep : tp; }
};

// Everything the chunk and stage builders read.
struct Context {
  const ModelProfile& prof;
  const Plan& plan;
  const SimulationOptions& options;
  const std::vector<BlockCost>& costs;
  const StagePartition& partition;
  const Groups& groups;
  PrecisionBytes bytes;
  std::int64_t pp, v;
  bool sharded, reduce_over_dp;
  // overlap_zero_gather on links that can move data beside compute: the
  // updated weights' gather replays as the part the evaluator finds exposed.
  bool zero_gather_overlapped;
};

// The blocks of a global chunk in forward order: the embedding leads the
// first chunk, the head closes the last.
std::vector<int> chunk_blocks(const Context& cx, std::int64_t chunk) {
  std::vector<int> blocks;
  if (chunk == 0 && cx.prof.embedding_block >= 0) blocks.push_back(cx.prof.embedding_block);
  const auto& layers = cx.partition.chunk_blocks[static_cast<std::size_t>(chunk)];
  blocks.insert(blocks.end(), layers.begin(), layers.end());
  if (chunk == cx.pp * cx.v - 1 && cx.prof.head_block >= 0) blocks.push_back(cx.prof.head_block);
  return blocks;
}

// The in-layer communication of one segment, one CommWork per axis and pass
// (index: 0 tp, 1 cp, 2 ep), in the order the record lists it.
struct SegmentComm {
  std::array<CommWork, 3> forward, backward;
  CommWork forward_paired_ep, backward_paired_ep;  // SegmentWork's
  static std::size_t slot(Axis axis) { return axis == Axis::tp ? 0 : axis == Axis::cp ? 1 : 2; }
};

// Adds one block's record to the segment being built.
void add_block_comm(SegmentComm& comm, const BlockCost& c, const Context& cx, Builder& build, std::int64_t r) {
  for (const BlockCollective& e : c.collectives) {
    CommWork& into = (e.pass == Pass::forward ? comm.forward : comm.backward)[SegmentComm::slot(e.axis)];
    // ZB-H1's B pass has no W GEMMs beside it: its tp collectives run whole (evaluate.cpp, tp_backward_exposed_s).
    const bool zb_backward = e.pass == Pass::backward && cx.plan.schedule.kind == ScheduleKind::zb_h1;
    if (e.hidden_under == HiddenUnder::attention || (e.hidden_under == HiddenUnder::gemm && !zb_backward)) {
      // Ring attention (Liu et al. 2023) and tp collectives chunked beside their GEMMs
      // (tp_comm_overlap): only the part the cost model finds exposed.
      accumulate(into, build.exposed_time(e.exposed_s, cx.groups.of(e.axis), r), 1);
    } else if (e.hidden_under == HiddenUnder::paired_pass) {
      // Combined 1F1B: the whole all-to-alls where the pass has no partner,
      // the part its partner's compute leaves exposed where it has one.
      accumulate(into, build.collective(e.kind, e.bytes, cx.groups.of(e.axis), r), e.count);
      accumulate(e.pass == Pass::forward ? comm.forward_paired_ep : comm.backward_paired_ep,
                 build.exposed_time(e.exposed_s, cx.groups.ep, r), 1);
    } else {
      accumulate(into, build.collective(e.kind, e.bytes, cx.groups.of(e.axis), r), e.count);
    }
  }
}

// Data-parallel buckets of a chunk (the record's gradients, all-reduced
// without ZeRO, reduce-scattered with ZeRO-1/2, after the fsdp reduce-scatter).
// Bucket thresholds count the bytes the gradient passes produce (before the
// fsdp reduce-scatter); a bucket holds 1/fsdp of them.
void add_buckets(ChunkWork& chunk, const Context& cx, Builder& build, std::int64_t r) {
  double produced_total = 0;
  for (const SegmentWork& s : chunk.segments) produced_total += s.gradient_bytes;
  const double fsdp = static_cast<double>(cx.plan.mesh.size(Axis::fsdp));
  const double reduced_total = produced_total / fsdp;
  if (!cx.reduce_over_dp || !(reduced_total > 0) || cx.options.zero_communication) return;
  const GradientBuckets buckets = gradient_buckets(reduced_total, cx.plan.gradient_bucket_bytes);
  const Collective collective = gradient_reduction(cx.plan.zero_stage);
  for (std::int64_t k = 0; k < buckets.count; ++k) {
    const bool last = k + 1 == buckets.count;
    chunk.buckets.push_back({last ? produced_total : buckets.through(k) * fsdp,
                             build.collective(collective, last ? buckets.last : buckets.size, cx.groups.dp, r)});
  }
}

// One chunk of stage r: its blocks' compute and communication from the cost
// record, grouped into segments (one per block when weights are sharded).
// Returns the parameters it holds.
double build_chunk(ChunkWork& chunk, const Context& cx, Builder& build, std::int64_t r) {
  const ModelProfile& prof = cx.prof;
  const Plan& plan = cx.plan;
  const bool full_recompute = plan.recompute == Recompute::full;
  SegmentWork segment;
  SegmentComm comm;
  double segment_parameters = 0, chunk_parameters = 0;
  auto close_segment = [&]() {
    for (const CommWork& c : comm.forward) {
      if (!c.empty()) segment.forward_comm.push_back(c);
    }
    for (const CommWork& c : comm.backward) {
      if (!c.empty()) segment.backward_comm.push_back(c);
    }
    segment.forward_paired_ep = comm.forward_paired_ep;
    segment.backward_paired_ep = comm.backward_paired_ep;
    segment.gradient_bytes = segment_parameters * cx.bytes.gradient_bytes_per_parameter;
    if (cx.sharded) {
      segment.parameter_gather = build.collective(
          Collective::all_gather, segment_parameters * cx.bytes.gathered_bytes_per_parameter, cx.groups.fsdp, r);
      segment.gradient_reduce_scatter =
          build.collective(Collective::reduce_scatter, segment.gradient_bytes, cx.groups.fsdp, r);
    }
    chunk.segments.push_back(std::move(segment));
    segment = SegmentWork{};
    comm = SegmentComm{};
    segment_parameters = 0;
  };
  for (const int block : chunk_blocks(cx, chunk.chunk)) {
    const BlockCost& c = cx.costs[static_cast<std::size_t>(prof.block_kind[static_cast<std::size_t>(block)])];
    segment.forward_s += c.forward_compute_s;
    segment.backward_s += c.backward_compute_s;
    segment.weight_gradient_s += c.weight_gradient_s;
    segment.tp_hidden_s += c.tp_backward_total_s - c.tp_backward_s;
    double parameters = c.dense_parameters + c.expert_parameters;
    // The last stage keeps a copy of a tied embedding for the output layer (Megatron).
    if (block == prof.head_block && cx.pp > 1) parameters += c.tied_parameters;
    segment_parameters += parameters;
    chunk_parameters += parameters;
    if (prof.block_role[static_cast<std::size_t>(block)] == BlockKind::layer) {
      chunk.activation_bytes += full_recompute ? c.input_bytes : c.activation_bytes;
      if (recomputes_layer_forward(plan.recompute)) chunk.recompute_bytes = std::max(chunk.recompute_bytes, c.full_activation_bytes);
    } else {
      chunk.activation_bytes += c.activation_bytes;  // embedding and head are never recomputed
    }
    add_block_comm(comm, c, cx, build, r);
    if (cx.sharded) close_segment();
  }
  if (!cx.sharded) close_segment();
  add_buckets(chunk, cx, build, r);
  return chunk_parameters;
}

// Stage r: its chunks, the pipeline transfers, the optimizer and ZeRO-1/2's
// gather of the updated weights. `memory` is the evaluator's for this stage.
StageWork build_stage(const Context& cx, Builder& build, std::int64_t r, const StageMemory& memory,
                      const PipelineTransfer& transfer, const ComputeRates& rates) {
  StageWork stage;
  stage.stage = r;
  stage.representative_rank = build.representative(r);
  stage.node = build.node(r);
  double stage_parameters = 0;
  for (std::int64_t j = 0; j < cx.v; ++j) {
    ChunkWork chunk;
    chunk.chunk = j * cx.pp + r;
    stage_parameters += build_chunk(chunk, cx, build, r);
    stage.chunks.push_back(std::move(chunk));
  }
  if (cx.pp > 1) {
    stage.send_activation = build.transfer(transfer.send_bytes, cx.groups.pp, r, (r + 1) % cx.pp);
    stage.send_gradient = build.transfer(transfer.send_bytes, cx.groups.pp, r, (r - 1 + cx.pp) % cx.pp);
    if (transfer.gather_after_receive) {
      stage.receive_gather = build.collective(Collective::all_gather, transfer.boundary_bytes, cx.groups.tp, r);
    }
    stage.receive_gather.axis = Axis::pp;  // the evaluator counts it with the pipeline transfer
  }
  const double optimizer_parameters = memory.memory.optimizer_bytes / cx.bytes.optimizer_bytes_per_parameter;
  stage.optimizer_s = stream_time_s(optimizer_traffic_bytes(optimizer_parameters, cx.bytes), rates, StreamOp::optimizer);
  if (cx.reduce_over_dp && zero_shards(cx.plan.zero_stage, ModelState::optimizer)) {
    stage.parameter_gather_after_step =
        cx.zero_gather_overlapped
            ? build.exposed_time(memory.gather_after_step_exposed_s, cx.groups.dp, r)
            : build.collective(Collective::all_gather,
                               stage_parameters * cx.bytes.gathered_bytes_per_parameter /
                                   static_cast<double>(cx.plan.mesh.size(Axis::fsdp)),
                               cx.groups.dp, r);
  }
  // Everything but the activations: model state, buffers, and the peak's
  // transients and runtime reserves (memory_model.hpp, MemoryBreakdown), so
  // that model state + activations in flight is the evaluator's peak.
  stage.model_state_bytes = memory.memory.total_bytes() - memory.memory.activations_bytes;
  return stage;
}

// Nothing hides on a link that cannot move data while the devices compute
// (LinkSpec::overlaps_compute, e.g. MPI over shared memory).
bool overlaps(const std::vector<AxisPlacement>& placements, std::initializer_list<Axis> axes) {
  for (const AxisPlacement& p : placements) {
    if (p.size > 1 && !p.overlaps_compute && std::find(axes.begin(), axes.end(), p.axis) != axes.end()) return false;
  }
  return true;
}

}  // namespace

Loaded<StepWork> build_step_work(const Evaluator& evaluator, const Plan& plan, const SimulationOptions& options) {
  Loaded<StepWork> result;
  const ModelProfile& prof = evaluator.profile();
  const Mesh& mesh = plan.mesh;
  if (mesh.world_size() != evaluator.topology().world_size) {
    result.problems.push_back({Severity::error, "world_size",
                               "the mesh has " + std::to_string(mesh.world_size()) + " ranks but the cluster was built for " +
                                   std::to_string(evaluator.topology().world_size)});
    return result;
  }
  const std::int64_t pp = prof.kind == ModelKind::cnn ? 1 : mesh.size(Axis::pp);
  const std::int64_t v = plan.schedule.virtual_stages;
  const std::int64_t m = plan.micro_batches();
  result.problems = schedule_problems(plan.schedule, pp, m);
  auto partition = partition_stages(evaluator.graph(), pp, v, plan.stage_layers);
  result.problems.insert(result.problems.end(), partition.problems.begin(), partition.problems.end());
  if (!result.ok()) return result;

  const std::vector<AxisPlacement> placements = place_axes(evaluator.topology(), mesh);
  const std::vector<BlockCost> costs = evaluator.block_costs(plan, placements);
  std::vector<StageMemory> memory;
  evaluator.evaluate(plan, placements, costs, &memory);

  const Groups groups(placements,
                      expert_placements(evaluator.topology(), plan, placements), plan,
                      prof);
  const Context cx{prof, plan, options, costs, partition.value, groups, bytes_for(plan), pp, v,
                   groups.fsdp.size > 1, groups.dp.size > 1 && !zero_shards(plan.zero_stage, ModelState::parameters),
                   zero_gather_overlap_applies(plan) && overlaps(placements, {Axis::dp, Axis::ep})};
  StepWork& work = result.value;
  work.schedule = plan.schedule;
  work.stages = pp;
  work.micro_batches = m;
  // tp_comm_overlap prices its own pairs (HiddenUnder::gemm) in place of this rule.
  work.overlap_tensor_parallel = plan.overlap_tensor_parallel && !plan.tp_comm_overlap && overlaps(placements, {Axis::tp});
  // The record decides where the all-to-alls pair (and not where the ep link cannot overlap compute).
  work.overlap_expert_parallel = plan.overlap_expert_parallel && std::any_of(costs.begin(), costs.end(), [](const BlockCost& c) {
    return std::any_of(c.collectives.begin(), c.collectives.end(),
                       [](const BlockCollective& e) { return e.hidden_under == HiddenUnder::paired_pass; });
  });
  work.overlap_gradient_reduction = plan.overlap_gradient_reduction && overlaps(placements, {Axis::dp, Axis::ep});
  work.overlap_parameter_gather =
      plan.overlap_parameter_gather &&
      (zero_shards(plan.zero_stage, ModelState::parameters) ? overlaps(placements, {Axis::fsdp, Axis::dp, Axis::ep}) : overlaps(placements, {Axis::fsdp}));

  Builder build(evaluator, plan, options, pp);
  const PipelineTransfer transfer = pipeline_transfer(prof, plan);
  const ComputeRates rates = rates_for(evaluator.cluster().device, plan.precision);
  for (std::int64_t r = 0; r < pp; ++r) {
    work.stage_work.push_back(build_stage(cx, build, r, memory[static_cast<std::size_t>(r)], transfer, rates));
  }
  work.links = build.take_links();
  return result;
}

StepWork uniform_step_work(const Schedule& schedule, std::int64_t stages, std::int64_t micro_batches, double forward_s,
                           double backward_s, double weight_gradient_s) {
  StepWork work;
  work.schedule = schedule;
  work.stages = stages;
  work.micro_batches = micro_batches;
  const std::int64_t v = std::max<std::int64_t>(schedule.virtual_stages, 1);
  const double share = 1.0 / static_cast<double>(v);
  for (std::int64_t r = 0; r < stages; ++r) {
    StageWork stage;
    stage.stage = r;
    stage.representative_rank = r;
    stage.node = r;
    for (std::int64_t j = 0; j < v; ++j) {
      ChunkWork chunk;
      chunk.chunk = j * stages + r;
      SegmentWork segment;
      segment.forward_s = forward_s * share;
      segment.backward_s = backward_s * share;
      segment.weight_gradient_s = weight_gradient_s * share;
      chunk.segments.push_back(segment);
      chunk.activation_bytes = 1;  // counts chunk-micro-batch activation sets
      stage.chunks.push_back(std::move(chunk));
    }
    work.stage_work.push_back(std::move(stage));
  }
  return work;
}

}  // namespace meshplan::sim
