// Builds StepWork from the cost model. Compute seconds and activation bytes
// are the Evaluator's BlockCost fields, summed over the blocks of each chunk
// (stage_partition.hpp). Communication volumes follow evaluate.cpp term by
// term (the file and the function are named at each one); each collective is
// priced by collective_time() for its algorithm choice, then split into its
// latency (steps x alpha) and its bus bytes (S x F_bus / efficiency), so the
// engine can slow the bandwidth part down when links are shared.
#include "simulator/step_work.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "model/compute_model.hpp"
#include "model/schedule.hpp"
#include "model/stage_partition.hpp"

namespace meshplan::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
// More buckets than this per chunk are merged (a 1-byte bucket size would
// otherwise ask for billions of events).
constexpr double kMostBucketsPerChunk = 4096;

// Ranks that communicate together over one or more mesh axes, combined as
// evaluate.cpp's combine() does: sizes multiply, the slowest axis sets the
// bandwidth, the largest latency counts.
struct Group {
  Axis axis = Axis::tp;  // the label the trace and the summary use
  std::int64_t size = 1;
  double bandwidth_bytes_per_s = kInf;
  double latency_s = 0;
  std::int64_t members_per_node = 1;
  bool intra = false;    // some ring hops stay inside a node: the device links
  bool crosses = false;  // some hops cross nodes: the node's NICs
};

Group group_of(const std::vector<AxisPlacement>& placements, std::initializer_list<Axis> axes, Axis label) {
  Group g;
  g.axis = label;
  for (Axis axis : axes) {
    for (const AxisPlacement& p : placements) {
      if (p.axis != axis || p.size <= 1) continue;
      g.size *= p.size;
      g.bandwidth_bytes_per_s = std::min(g.bandwidth_bytes_per_s, p.bandwidth_bytes_per_s);
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
    const CollectiveCost cost =
        collective_time(collective, bytes, group.size, group.bandwidth_bytes_per_s, group.latency_s);
    const double efficiency = cost.algorithm == CollectiveAlgorithm::tree ? kTreeBandwidthEfficiency : 1.0;
    work.bytes = bytes;
    work.bus_bytes = bytes * bus_bandwidth_factor(collective, group.size) / efficiency;
    work.latency_s = static_cast<double>(latency_steps(collective, group.size, cost.algorithm)) * group.latency_s;
    work.bandwidth_bytes_per_s = group.bandwidth_bytes_per_s;
    if (group.intra) {
      add_link(work, device_out(r), 1);
      add_link(work, device_in(r), 1);
    }
    if (group.crosses) {
      // A ring leaves and enters the node once per group: the node's
      // replicas of this stage form replicas / m groups (topology.hpp, G).
      const double groups = std::max(1.0, static_cast<double>(replicas_on_node_[static_cast<std::size_t>(r)]) /
                                              static_cast<double>(group.members_per_node));
      add_link(work, nic_out(node(r)), groups);
      add_link(work, nic_in(node(r)), groups);
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

  Builder build(evaluator, plan, options, pp);
  const PrecisionBytes bytes = bytes_for(plan.precision);
  const ComputeRates rates = rates_for(evaluator.cluster().device, plan.precision);
  const double act = bytes.activation_bytes_per_element;
  const double tp = static_cast<double>(mesh.size(Axis::tp));
  const double cp = static_cast<double>(mesh.size(Axis::cp));
  const double fsdp = static_cast<double>(mesh.size(Axis::fsdp));
  const double b = static_cast<double>(plan.micro_batch);
  const bool sp = plan.sequence_parallel;
  const double seq = static_cast<double>(prof.seq_len);
  const Group tp_group = group_of(placements, {Axis::tp}, Axis::tp);
  const Group cp_group = group_of(placements, {Axis::cp}, Axis::cp);
  const Group ep_group = group_of(placements, {Axis::ep}, Axis::ep);
  const Group pp_group = group_of(placements, {Axis::pp}, Axis::pp);
  const Group dp_group = group_of(placements, {Axis::dp, Axis::ep}, Axis::dp);
  // evaluate.cpp, "fsdp_group": ZeRO-3 on dp shards over dp x ep too.
  const Axis sharded_axis = plan.zero_stage >= 3 && mesh.size(Axis::fsdp) == 1 ? Axis::dp : Axis::fsdp;
  const Group fsdp_group = plan.zero_stage >= 3 ? group_of(placements, {Axis::fsdp, Axis::dp, Axis::ep}, sharded_axis)
                                                : group_of(placements, {Axis::fsdp}, Axis::fsdp);
  const bool sharded = fsdp_group.size > 1;
  const bool reduce_over_dp = dp_group.size > 1 && plan.zero_stage < 3;

  // evaluate.cpp, "Pipeline sends": Megatron's scatter/gather sends 1/t of the
  // boundary activation and all-gathers it inside the receiving node.
  const double boundary_bytes = prof.residual_elements_per_sample * b * act / (cp * (sp ? tp : 1.0));
  const bool scatter_gather = prof.kind == ModelKind::transformer && tp > 1 && !sp;
  const double p2p_bytes = scatter_gather ? boundary_bytes / tp : boundary_bytes;

  StepWork& work = result.value;
  work.schedule = plan.schedule;
  work.stages = pp;
  work.micro_batches = m;
  // evaluate.cpp: nothing hides on a link that cannot move data while the
  // devices compute (LinkSpec::overlaps_compute, e.g. MPI over shared memory).
  auto overlaps = [&](std::initializer_list<Axis> axes) {
    for (const AxisPlacement& p : placements) {
      if (p.size > 1 && !p.overlaps_compute && std::find(axes.begin(), axes.end(), p.axis) != axes.end()) return false;
    }
    return true;
  };
  work.overlap_tensor_parallel = plan.overlap_tensor_parallel && overlaps({Axis::tp});
  work.overlap_gradient_reduction = plan.overlap_gradient_reduction && overlaps({Axis::dp, Axis::ep});
  work.overlap_parameter_gather =
      plan.overlap_parameter_gather &&
      (plan.zero_stage >= 3 ? overlaps({Axis::fsdp, Axis::dp, Axis::ep}) : overlaps({Axis::fsdp}));

  for (std::int64_t r = 0; r < pp; ++r) {
    StageWork stage;
    stage.stage = r;
    stage.representative_rank = build.representative(r);
    stage.node = build.node(r);
    double stage_parameters = 0;
    for (std::int64_t j = 0; j < v; ++j) {
      ChunkWork chunk;
      chunk.chunk = j * pp + r;
      std::vector<int> blocks;
      if (chunk.chunk == 0 && prof.embedding_block >= 0) blocks.push_back(prof.embedding_block);
      const auto& layers = partition.value.chunk_blocks[static_cast<std::size_t>(chunk.chunk)];
      blocks.insert(blocks.end(), layers.begin(), layers.end());
      if (chunk.chunk == pp * v - 1 && prof.head_block >= 0) blocks.push_back(prof.head_block);

      SegmentWork segment;
      CommWork tp_forward, tp_backward, cp_forward, cp_backward, ep_forward, ep_backward;
      double segment_parameters = 0;
      auto close_segment = [&]() {
        for (CommWork* c : {&tp_forward, &cp_forward, &ep_forward}) {
          if (!c->empty()) segment.forward_comm.push_back(*c);
        }
        for (CommWork* c : {&tp_backward, &cp_backward, &ep_backward}) {
          if (!c->empty()) segment.backward_comm.push_back(*c);
        }
        segment.gradient_bytes = segment_parameters * bytes.gradient_bytes_per_parameter;
        if (sharded) {
          segment.parameter_gather = build.collective(
              Collective::all_gather, segment_parameters * bytes.weight_bytes_per_parameter, fsdp_group, r);
          segment.gradient_reduce_scatter =
              build.collective(Collective::reduce_scatter, segment.gradient_bytes, fsdp_group, r);
        }
        chunk.segments.push_back(std::move(segment));
        segment = SegmentWork{};
        tp_forward = tp_backward = cp_forward = cp_backward = ep_forward = ep_backward = CommWork{};
        segment_parameters = 0;
      };
      for (std::size_t i = 0; i < blocks.size(); ++i) {
        const int block = blocks[i];
        const int kind = prof.block_kind[static_cast<std::size_t>(block)];
        const BlockCost& c = costs[static_cast<std::size_t>(kind)];
        const BlockProfile& bp = prof.kinds[static_cast<std::size_t>(kind)];
        const BlockKind role = prof.block_role[static_cast<std::size_t>(block)];
        segment.forward_s += c.forward_compute_s;
        segment.backward_s += c.backward_compute_s;
        segment.weight_gradient_s += c.weight_gradient_s;
        double parameters = c.dense_parameters + c.expert_parameters;
        // evaluate.cpp: the last stage keeps a copy of a tied embedding for the output layer.
        if (block == prof.head_block && pp > 1) parameters += c.tied_parameters;
        segment_parameters += parameters;
        stage_parameters += parameters;
        if (role == BlockKind::layer) {
          chunk.activation_bytes += plan.recompute == Recompute::full ? c.input_bytes : c.activation_bytes;
          if (plan.recompute == Recompute::full) chunk.recompute_bytes = std::max(chunk.recompute_bytes, c.full_activation_bytes);
        } else {
          chunk.activation_bytes += c.activation_bytes;  // embedding and head are never recomputed
        }
        // evaluate.cpp, block_costs(), "tp_time": each collective moves elements x b / cp x act / count.
        if (bp.tp_forward_collectives > 0) {
          const double each = bp.tp_forward_reduce_elements * b / cp * act / bp.tp_forward_collectives;
          const CommWork one = build.collective(Collective::all_reduce, each, tp_group, r);
          accumulate(tp_forward, one, bp.tp_forward_collectives);
          // Full recompute runs the layer's forward again, collectives included.
          if (plan.recompute == Recompute::full && role == BlockKind::layer) {
            accumulate(tp_backward, one, bp.tp_forward_collectives);
          }
        }
        if (bp.tp_backward_collectives > 0) {
          const double each = bp.tp_backward_reduce_elements * b / cp * act / bp.tp_backward_collectives;
          accumulate(tp_backward, build.collective(Collective::all_reduce, each, tp_group, r), bp.tp_backward_collectives);
          if (sp) {  // Korthikanti et al. 2022, Sec. 4.2.2: re-gather the sharded GEMM inputs
            accumulate(tp_backward, build.collective(Collective::all_gather, each, tp_group, r),
                       bp.tp_backward_collectives);
          }
        }
        // Ring attention: only the part the cost model finds exposed (Liu et al. 2023).
        accumulate(cp_forward, build.exposed_time(c.cp_forward_exposed_s, cp_group, r), 1);
        accumulate(cp_backward, build.exposed_time(c.cp_backward_exposed_s, cp_group, r), 1);
        // evaluate.cpp, "Expert parallelism": dispatch and combine, forward and backward.
        if (mesh.size(Axis::ep) > 1 && bp.expert_tp_split_parameters > 0) {
          const double routed = (seq * b / cp) * static_cast<double>(prof.top_k * prof.hidden) * act;
          const CommWork one = build.collective(Collective::all_to_all, routed, ep_group, r);
          accumulate(ep_forward, one, 2);
          accumulate(ep_backward, one, 2);
        }
        if (sharded) close_segment();
      }
      if (!sharded) close_segment();

      // Data-parallel buckets (evaluate.cpp: all-reduce for ZeRO 0, reduce-scatter
      // for ZeRO 1 and 2, of the gradients already reduce-scattered over fsdp).
      // Bucket thresholds count the bytes the gradient passes produce (before the
      // fsdp reduce-scatter); a bucket holds 1/fsdp of them.
      double produced_total = 0;
      for (const SegmentWork& s : chunk.segments) produced_total += s.gradient_bytes;
      const double reduced_total = produced_total / fsdp;
      if (reduce_over_dp && reduced_total > 0 && !options.zero_communication) {
        const double bucket = std::max(plan.gradient_bucket_bytes, reduced_total / kMostBucketsPerChunk);
        const Collective collective = plan.zero_stage == 0 ? Collective::all_reduce : Collective::reduce_scatter;
        for (double reduced = 0; reduced < reduced_total;) {
          const double size = std::min(bucket, reduced_total - reduced);
          reduced = size < bucket ? reduced_total : reduced + size;
          chunk.buckets.push_back({reduced >= reduced_total ? produced_total : reduced * fsdp,
                                   build.collective(collective, size, dp_group, r)});
        }
      }
      stage.chunks.push_back(std::move(chunk));
    }
    if (pp > 1) {
      stage.send_activation = build.transfer(p2p_bytes, pp_group, r, (r + 1) % pp);
      stage.send_gradient = build.transfer(p2p_bytes, pp_group, r, (r - 1 + pp) % pp);
      if (scatter_gather) stage.receive_gather = build.collective(Collective::all_gather, boundary_bytes, tp_group, r);
      stage.receive_gather.axis = Axis::pp;  // evaluate.cpp counts it with the pipeline transfer
    }
    // evaluate.cpp, "Adam": master weights and both moments read and written,
    // gradients read, working weights written, per locally owned parameter.
    const StageMemory& sm = memory[static_cast<std::size_t>(r)];
    const double optimizer_parameters = sm.memory.optimizer_bytes / bytes.optimizer_bytes_per_parameter;
    stage.optimizer_s = stream_time_s(optimizer_parameters * (2 * bytes.optimizer_bytes_per_parameter +
                                                              bytes.gradient_bytes_per_parameter +
                                                              bytes.weight_bytes_per_parameter),
                                      rates, StreamOp::optimizer);
    if (reduce_over_dp && plan.zero_stage >= 1) {
      stage.parameter_gather_after_step = build.collective(
          Collective::all_gather, stage_parameters * bytes.weight_bytes_per_parameter / fsdp, dp_group, r);
    }
    // Everything but the activations: model state, buffers, and the peak's
    // transients and runtime reserves (memory_model.hpp, MemoryBreakdown), so
    // that model state + activations in flight is evaluate.cpp's peak.
    stage.model_state_bytes = sm.memory.total_bytes() - sm.memory.activations_bytes;
    work.stage_work.push_back(std::move(stage));
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
