// The engine behind replay() (engine.hpp). One queue of timed wake-ups; each
// stage is a small state machine over its instruction list; each stream is a
// FIFO of communication jobs; the FlowNetwork decides when a job's bytes have
// moved. Stale flow predictions (a flow re-rated since) are skipped by
// version. Ties in time are served first-in first-out, so a run is
// deterministic.
#include "simulator/engine.hpp"

#include <algorithm>
#include <deque>
#include <limits>
#include <queue>
#include <stdexcept>
#include <string>

#include "simulator/flow_network.hpp"

namespace meshplan::sim {
namespace {

using Kind = Instruction::Kind;
constexpr std::int32_t kNotArrived = std::numeric_limits<std::int32_t>::min();

enum class Wake : std::uint8_t { compute_done, flow_transmitted, job_done, bucket_ready, overlapped_comm };

struct Pending {
  double time_s;
  std::uint64_t sequence;
  Wake what;
  std::int32_t id;     // stage, flow or job
  std::uint32_t a;     // flow version; bucket index
  std::int32_t b;      // bucket: local chunk
  std::int32_t cause;  // bucket: the compute event producing it
};

struct Later {
  bool operator()(const Pending& x, const Pending& y) const {
    return x.time_s > y.time_s || (x.time_s == y.time_s && x.sequence > y.sequence);
  }
};

enum class JobTag : std::uint8_t { layer, transfer, receive_gather, parameter_gather, reduction, after_step_gather };

struct Job {
  const CommWork* work = nullptr;
  std::int32_t stage = 0;
  Track track = Track::layer_comm;
  EventKind kind = EventKind::layer_collective;
  JobTag tag = JobTag::layer;
  std::int32_t micro_batch = -1;
  std::int32_t chunk = -1;
  std::int32_t destination = -1;  // transfer: receiving stage
  std::int32_t slot = -1;         // transfer: mailbox slot there
  std::int64_t ordinal = -1;      // parameter gather: place in the stage's gather sequence
  std::int32_t cause = -1;
  std::int32_t predecessor = -1;
  double start_s = 0;
};

struct Channel {
  std::deque<std::int32_t> waiting;
  std::int32_t running = -1;
  std::int32_t last_event = -1;
};

enum class Block : std::uint8_t { none, compute, receive, gather, layer, reductions, finished };

// Which of a segment's in-layer collectives to start.
enum class Pick : std::uint8_t { all, tensor_parallel, others };

struct GatherSlot {
  bool done = false;
  std::int32_t event = -1;
};

struct StageRun {
  const std::vector<Instruction>* program = nullptr;
  std::size_t pc = 0;
  Block block = Block::none;
  std::int32_t last_event = -1;  // the event whose end last moved this stage on
  // The compute instruction in progress.
  std::int32_t step = 0;         // index into its segment order
  std::int32_t outstanding = 0;  // compute and collectives before the segment is done
  std::int32_t compute_event = -1;
  bool overlapped = false;
  double produced_bytes = 0;     // last gradient pass of a chunk: gradients produced so far
  std::size_t next_bucket = 0;
  // Weight gathers (sharded weights), issued in list order.
  std::size_t gather_pc = 0;
  std::int32_t gather_step = 0;
  std::int64_t gathers_issued = 0;
  std::int64_t gathers_consumed = 0;
  std::deque<GatherSlot> gathers;
  std::int64_t reductions_outstanding = 0;
  std::vector<std::int32_t> activation_arrived, gradient_arrived;  // [local chunk x m + micro-batch]
  std::vector<std::size_t> last_gradient_pc;                        // per local chunk
  PassPairing pairing;                                              // overlap_expert_parallel
  Channel channels[track_count];
  double activation_bytes = 0;
};

bool needs_parameters(Kind k) { return k == Kind::forward || k == Kind::backward || k == Kind::backward_input; }
bool produces_gradients(Kind k) { return k == Kind::backward || k == Kind::backward_weight; }

EventKind compute_kind(Kind k) {
  switch (k) {
    case Kind::forward: return EventKind::forward;
    case Kind::backward: return EventKind::backward;
    case Kind::backward_input: return EventKind::backward_input;
    default: return EventKind::backward_weight;
  }
}

class Engine {
 public:
  Engine(const StepWork& work, const PipelinePrograms& programs, bool contention)
      : work_(work), network_(work.links, contention), stages_(static_cast<std::size_t>(work.stages)) {
    if (static_cast<std::int64_t>(programs.size()) != work.stages ||
        static_cast<std::int64_t>(work.stage_work.size()) != work.stages) {
      throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) +
                             ": one instruction list and one StageWork per stage expected");
    }
    m_ = work.micro_batches;
    v_ = std::max<std::int64_t>(work.schedule.virtual_stages, 1);
    std::size_t instructions = 0;
    for (std::size_t r = 0; r < stages_.size(); ++r) {
      StageRun& st = stages_[r];
      st.program = &programs[r];
      instructions += programs[r].size();
      st.activation_arrived.assign(static_cast<std::size_t>(v_ * m_), kNotArrived);
      st.gradient_arrived.assign(static_cast<std::size_t>(v_ * m_), kNotArrived);
      st.last_gradient_pc.assign(static_cast<std::size_t>(v_), programs[r].size());
      st.pairing = pass_pairing(programs[r]);
      for (std::size_t pc = 0; pc < programs[r].size(); ++pc) {
        const Instruction& in = programs[r][pc];
        if (in.is_compute() && produces_gradients(in.kind)) st.last_gradient_pc[local(in.chunk)] = pc;
      }
    }
    timeline_.events.reserve(instructions * 2);
    jobs_.reserve(instructions);
  }

  Timeline run() {
    for (std::size_t r = 0; r < stages_.size(); ++r) advance(static_cast<std::int32_t>(r), 0.0);
    while (!queue_.empty()) {
      const Pending p = queue_.top();
      queue_.pop();
      ++timeline_.engine_events;
      const double now = p.time_s;
      switch (p.what) {
        case Wake::compute_done: compute_done(p.id, now); break;
        case Wake::flow_transmitted: flow_transmitted(p.id, p.a, now); break;
        case Wake::job_done: job_done(p.id, now); break;
        case Wake::bucket_ready: bucket_ready(p.id, static_cast<std::size_t>(p.b), p.a, p.cause, now); break;
        case Wake::overlapped_comm: enqueue_pass_comm(p.id, now, Pick::tensor_parallel); break;
      }
    }
    for (std::size_t r = 0; r < stages_.size(); ++r) {
      const StageRun& st = stages_[r];
      if (st.pc < st.program->size()) {
        throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": stage " + std::to_string(r) +
                               " cannot finish: stuck at instruction " + std::to_string(st.pc) + " (" +
                               to_string((*st.program)[st.pc]) + ")");
      }
    }
    return std::move(timeline_);
  }

 private:
  // ---- bookkeeping
  std::size_t local(std::int64_t chunk) const { return static_cast<std::size_t>(chunk / work_.stages); }
  std::size_t slot(std::int64_t chunk, std::int64_t micro_batch) const {
    return local(chunk) * static_cast<std::size_t>(m_) + static_cast<std::size_t>(micro_batch);
  }
  const Instruction& current(const StageRun& st) const { return (*st.program)[st.pc]; }
  const ChunkWork& chunk_of(std::int32_t s, std::int64_t chunk) const {
    return work_.stage_work[static_cast<std::size_t>(s)].chunks[local(chunk)];
  }
  // Backward passes walk the segments last to first.
  static std::size_t segment_index(Kind kind, std::int32_t step, std::size_t count) {
    return kind == Kind::forward ? static_cast<std::size_t>(step) : count - 1 - static_cast<std::size_t>(step);
  }
  // The segment stage s's current instruction is at.
  const SegmentWork& current_segment(std::int32_t s) {
    const StageRun& st = stages_[static_cast<std::size_t>(s)];
    const Instruction& in = current(st);
    const ChunkWork& chunk = chunk_of(s, in.chunk);
    return chunk.segments[segment_index(in.kind, st.step, chunk.segments.size())];
  }
  double end_of(std::int32_t event) const { return event < 0 ? 0.0 : timeline_.events[static_cast<std::size_t>(event)].end_s; }
  std::int32_t later(std::int32_t a, std::int32_t b) const { return end_of(b) > end_of(a) || a < 0 ? b : a; }

  void push(double time_s, Wake what, std::int32_t id, std::uint32_t a = 0, std::int32_t b = 0, std::int32_t cause = -1) {
    queue_.push({time_s, sequence_++, what, id, a, b, cause});
  }

  std::int32_t record(const SimEvent& event) {
    timeline_.events.push_back(event);
    return static_cast<std::int32_t>(timeline_.events.size() - 1);
  }

  void sample_memory(std::int32_t s, double now, double delta) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    if (delta == 0) return;
    st.activation_bytes += delta;
    timeline_.memory.push_back({now, s, st.activation_bytes});
  }

  // ---- communication jobs
  void enqueue(std::int32_t s, const CommWork* comm, Track track, EventKind kind, JobTag tag, std::int32_t cause,
               double now, std::int32_t micro_batch = -1, std::int32_t chunk = -1) {
    Job job;
    job.work = comm;
    job.stage = s;
    job.track = track;
    job.kind = kind;
    job.tag = tag;
    job.micro_batch = micro_batch;
    job.chunk = chunk;
    job.cause = cause;
    jobs_.push_back(job);
    stages_[static_cast<std::size_t>(s)].channels[static_cast<int>(track)].waiting.push_back(
        static_cast<std::int32_t>(jobs_.size() - 1));
    pump(s, track, now);
  }

  void pump(std::int32_t s, Track track, double now) {
    Channel& channel = stages_[static_cast<std::size_t>(s)].channels[static_cast<int>(track)];
    if (channel.running >= 0 || channel.waiting.empty()) return;
    const std::int32_t j = channel.waiting.front();
    channel.waiting.pop_front();
    channel.running = j;
    Job& job = jobs_[static_cast<std::size_t>(j)];
    job.start_s = now;
    job.predecessor = later(job.cause, channel.last_event);
    const CommWork& comm = *job.work;
    if (comm.bus_bytes > 0) {
      const std::int32_t flow = network_.start(now, comm, updates_);
      if (static_cast<std::size_t>(flow) >= flow_job_.size()) flow_job_.resize(static_cast<std::size_t>(flow) + 1);
      flow_job_[static_cast<std::size_t>(flow)] = j;
      push_updates();
    } else {
      push(now + comm.latency_s, Wake::job_done, j);
    }
  }

  void push_updates() {
    for (const auto& u : updates_) push(u.transmitted_s, Wake::flow_transmitted, u.flow, u.version);
    updates_.clear();
  }

  void flow_transmitted(std::int32_t flow, std::uint32_t version, double now) {
    if (!network_.is_current(flow, version)) return;
    const std::int32_t j = flow_job_[static_cast<std::size_t>(flow)];
    network_.finish(now, flow, updates_);
    push_updates();
    push(now + jobs_[static_cast<std::size_t>(j)].work->latency_s, Wake::job_done, j);
  }

  void job_done(std::int32_t j, double now) {
    const Job job = jobs_[static_cast<std::size_t>(j)];  // a copy: handlers below may add jobs
    std::int32_t event = job.cause;
    if (now > job.start_s) {
      SimEvent e;
      e.start_s = job.start_s;
      e.end_s = now;
      e.bytes = job.work->bytes;
      e.stage = job.stage;
      e.micro_batch = job.micro_batch;
      e.chunk = job.chunk;
      e.predecessor = job.predecessor;
      e.track = job.track;
      e.kind = job.kind;
      e.axis = job.work->axis;
      event = record(e);
    }
    StageRun& st = stages_[static_cast<std::size_t>(job.stage)];
    Channel& channel = st.channels[static_cast<int>(job.track)];
    channel.running = -1;
    if (now > job.start_s) channel.last_event = event;
    switch (job.tag) {
      case JobTag::layer:
        st.last_event = later(st.last_event, event);
        if (--st.outstanding == 0) end_segment(job.stage, now);
        break;
      case JobTag::receive_gather:
        st.last_event = later(st.last_event, event);
        ++st.pc;
        st.block = Block::none;
        advance(job.stage, now);
        break;
      case JobTag::transfer: arrive(job.destination, job.kind, static_cast<std::size_t>(job.slot), event, now); break;
      case JobTag::parameter_gather: {
        GatherSlot& gathered = st.gathers[static_cast<std::size_t>(job.ordinal - st.gathers_consumed)];
        gathered.done = true;
        gathered.event = event;
        if (st.block == Block::gather && job.ordinal == st.gathers_consumed) begin_segment(job.stage, now);
        break;
      }
      case JobTag::reduction:
        if (--st.reductions_outstanding == 0 && st.block == Block::reductions) {
          st.last_event = later(st.last_event, event);
          start_optimizer(job.stage, now);
        }
        break;
      case JobTag::after_step_gather: break;
    }
    pump(job.stage, job.track, now);
  }

  // ---- the instruction list
  void advance(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const StageWork& sw = work_.stage_work[static_cast<std::size_t>(s)];
    while (st.block == Block::none && st.pc < st.program->size()) {
      const Instruction& in = current(st);
      switch (in.kind) {
        case Kind::forward:
        case Kind::backward:
        case Kind::backward_input:
        case Kind::backward_weight: begin_pass(s, now); return;
        case Kind::send_activation:
        case Kind::send_gradient: {
          const bool forward = in.kind == Kind::send_activation;
          enqueue_transfer(s, forward ? &sw.send_activation : &sw.send_gradient, in, now);
          ++st.pc;
          break;
        }
        case Kind::receive_activation:
        case Kind::receive_gradient: {
          auto& mailbox = in.kind == Kind::receive_activation ? st.activation_arrived : st.gradient_arrived;
          const std::int32_t arrived = mailbox[slot(in.chunk, in.micro_batch)];
          if (arrived == kNotArrived) {
            st.block = Block::receive;
            return;
          }
          st.last_event = later(st.last_event, arrived);
          if (!received(s, now)) return;
          break;
        }
        case Kind::reduce_gradients:
          if (!work_.overlap_gradient_reduction) {
            for (const GradientBucket& bucket : chunk_of(s, in.chunk).buckets) {
              ++st.reductions_outstanding;
              enqueue(s, &bucket.reduce, Track::dp_comm, EventKind::gradient_bucket, JobTag::reduction,
                      st.last_event, now, -1, static_cast<std::int32_t>(in.chunk));
            }
          }
          ++st.pc;
          break;
        case Kind::optimizer_step:
          if (st.reductions_outstanding > 0) {
            st.block = Block::reductions;
            return;
          }
          start_optimizer(s, now);
          return;
      }
    }
  }

  void enqueue_transfer(std::int32_t s, const CommWork* comm, const Instruction& in, double now) {
    const bool forward = in.kind == Kind::send_activation;
    const std::int64_t consumer = forward ? in.chunk + 1 : in.chunk - 1;
    enqueue(s, comm, forward ? Track::send_next : Track::send_previous,
            forward ? EventKind::activation_transfer : EventKind::gradient_transfer, JobTag::transfer,
            stages_[static_cast<std::size_t>(s)].last_event, now, static_cast<std::int32_t>(in.micro_batch),
            static_cast<std::int32_t>(in.chunk));
    // enqueue() may already have started it: the destination is read only at completion.
    Job& job = jobs_.back();
    job.destination = static_cast<std::int32_t>(in.peer_stage);
    job.slot = static_cast<std::int32_t>(slot(consumer, in.micro_batch));
  }

  void arrive(std::int32_t s, EventKind kind, std::size_t mailbox_slot, std::int32_t event, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const bool activation = kind == EventKind::activation_transfer;
    (activation ? st.activation_arrived : st.gradient_arrived)[mailbox_slot] = event < 0 ? -1 : event;
    if (st.block != Block::receive) return;
    const Instruction& in = current(st);
    if ((in.kind == Kind::receive_activation) != activation || slot(in.chunk, in.micro_batch) != mailbox_slot) return;
    st.block = Block::none;
    st.last_event = later(st.last_event, event);
    if (received(s, now)) advance(s, now);
  }

  // The current receive's data is here. Returns false when the stage now waits
  // for the receive-side all-gather.
  bool received(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const StageWork& sw = work_.stage_work[static_cast<std::size_t>(s)];
    if (!sw.receive_gather.empty()) {
      const Instruction& in = current(st);
      st.block = Block::layer;
      enqueue(s, &sw.receive_gather, Track::layer_comm, EventKind::receive_gather, JobTag::receive_gather,
              st.last_event, now, static_cast<std::int32_t>(in.micro_batch), static_cast<std::int32_t>(in.chunk));
      return false;
    }
    ++st.pc;
    return true;
  }

  // ---- compute instructions
  void begin_pass(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const Instruction& in = current(st);
    const ChunkWork& chunk = chunk_of(s, in.chunk);
    st.block = Block::compute;
    st.step = 0;
    if (st.last_gradient_pc[local(in.chunk)] == st.pc) {
      st.produced_bytes = 0;
      st.next_bucket = 0;
    }
    if (in.kind == Kind::forward) sample_memory(s, now, chunk.activation_bytes);
    if (in.kind == Kind::backward || in.kind == Kind::backward_input) sample_memory(s, now, chunk.recompute_bytes);
    begin_segment(s, now);
  }

  void begin_segment(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const Instruction& in = current(st);
    const ChunkWork& chunk = chunk_of(s, in.chunk);
    const SegmentWork& segment = current_segment(s);
    if (needs_parameters(in.kind) && !segment.parameter_gather.empty()) {
      issue_gathers(s, now, work_.overlap_parameter_gather ? 2 : 1);  // this segment's and, prefetched, the next one's
      if (!st.gathers.front().done) {
        st.block = Block::gather;
        return;
      }
      st.last_event = later(st.last_event, st.gathers.front().event);
      st.gathers.pop_front();
      ++st.gathers_consumed;
      st.block = Block::compute;
    }
    double duration = segment.forward_s;
    if (in.kind == Kind::backward) duration = segment.backward_s;
    if (in.kind == Kind::backward_input) duration = segment.backward_s - segment.weight_gradient_s;
    if (in.kind == Kind::backward_weight) duration = segment.weight_gradient_s;
    duration = std::max(duration, 0.0);
    st.compute_event = -1;
    if (duration > 0) {
      SimEvent e;
      e.start_s = now;
      e.end_s = now + duration;
      e.stage = s;
      e.micro_batch = static_cast<std::int32_t>(in.micro_batch);
      e.chunk = static_cast<std::int32_t>(in.chunk);
      e.predecessor = st.last_event;
      e.track = Track::compute;
      e.kind = compute_kind(in.kind);
      st.compute_event = record(e);
    }
    st.outstanding = 1;
    // Only tp collectives hide under the weight-gradient GEMMs, as much as the
    // cost record hides block by block (evaluate.cpp, tp_backward_s): they
    // start segment.tp_hidden_s before the compute ends. ZB-H1's B pass has
    // no W GEMMs beside it, so nothing hides there.
    const auto tensor_parallel = std::count_if(segment.backward_comm.begin(), segment.backward_comm.end(),
                                               [](const CommWork& c) { return c.axis == Axis::tp; });
    st.overlapped = in.kind == Kind::backward && work_.overlap_tensor_parallel && tensor_parallel > 0;
    if (st.overlapped) {
      st.outstanding += static_cast<std::int32_t>(tensor_parallel);
      push(now + std::max(0.0, duration - segment.tp_hidden_s), Wake::overlapped_comm, s);
    }
    if (work_.overlap_gradient_reduction && produces_gradients(in.kind) && st.last_gradient_pc[local(in.chunk)] == st.pc) {
      schedule_buckets(s, chunk, segment.gradient_bytes, now, duration,
                       static_cast<std::size_t>(st.step) + 1 == chunk.segments.size());
    }
    push(now + duration, Wake::compute_done, s);
  }

  // Buckets whose bytes this segment completes become ready in proportion
  // to its progress (DDP's hooks fire as gradients are written); the chunk's
  // last segment completes them all, whatever the rounding of the running sum.
  void schedule_buckets(std::int32_t s, const ChunkWork& chunk, double gradient_bytes, double now, double duration,
                        bool last_segment = false) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const double from = st.produced_bytes, to = from + gradient_bytes;
    while (st.next_bucket < chunk.buckets.size() && (last_segment || chunk.buckets[st.next_bucket].produced_bytes <= to)) {
      const double fraction = gradient_bytes > 0 ? (chunk.buckets[st.next_bucket].produced_bytes - from) / gradient_bytes : 1.0;
      ++st.reductions_outstanding;
      push(now + duration * std::clamp(fraction, 0.0, 1.0), Wake::bucket_ready, s,
           static_cast<std::uint32_t>(st.next_bucket), static_cast<std::int32_t>(local(chunk.chunk)), st.compute_event);
      ++st.next_bucket;
    }
    st.produced_bytes = to;
  }

  void bucket_ready(std::int32_t s, std::size_t local_chunk, std::uint32_t bucket, std::int32_t cause, double now) {
    const ChunkWork& chunk = work_.stage_work[static_cast<std::size_t>(s)].chunks[local_chunk];
    enqueue(s, &chunk.buckets[bucket].reduce, Track::dp_comm, EventKind::gradient_bucket, JobTag::reduction,
            cause, now, -1, static_cast<std::int32_t>(chunk.chunk));
  }

  // Enqueues the current segment's in-layer collectives (those `pick` selects)
  // on the layer stream; returns how many.
  std::int32_t enqueue_pass_comm(std::int32_t s, double now, Pick pick) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const Instruction& in = current(st);
    if (in.kind == Kind::backward_weight) return 0;
    const SegmentWork& segment = current_segment(s);
    const bool forward = in.kind == Kind::forward;
    const auto& comms = forward ? segment.forward_comm : segment.backward_comm;
    // Combined 1F1B: a pass beside a partner runs only what the partner's compute leaves of its all-to-alls.
    const bool paired = work_.overlap_expert_parallel && st.pairing.paired(st.pc, in.kind);
    const CommWork& paired_ep = forward ? segment.forward_paired_ep : segment.backward_paired_ep;
    const std::int32_t cause = pick == Pick::tensor_parallel ? st.compute_event : st.last_event;
    std::int32_t count = 0;
    for (const CommWork& listed : comms) {
      const bool tensor_parallel = listed.axis == Axis::tp;
      if ((pick == Pick::tensor_parallel && !tensor_parallel) || (pick == Pick::others && tensor_parallel)) continue;
      const CommWork& comm = paired && listed.axis == Axis::ep ? paired_ep : listed;
      if (comm.empty()) continue;
      enqueue(s, &comm, Track::layer_comm, EventKind::layer_collective, JobTag::layer, cause, now,
              static_cast<std::int32_t>(in.micro_batch), static_cast<std::int32_t>(in.chunk));
      ++count;
    }
    return count;
  }

  void compute_done(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    st.last_event = later(st.last_event, st.compute_event);
    if (current(st).kind == Kind::optimizer_step) {
      optimizer_done(s, now);
      return;
    }
    --st.outstanding;
    st.outstanding += enqueue_pass_comm(s, now, st.overlapped ? Pick::others : Pick::all);
    if (st.outstanding == 0) end_segment(s, now);
  }

  void end_segment(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const Instruction& in = current(st);
    const ChunkWork& chunk = chunk_of(s, in.chunk);
    const SegmentWork& segment = current_segment(s);
    if (produces_gradients(in.kind) && !segment.gradient_reduce_scatter.empty()) {
      ++st.reductions_outstanding;
      enqueue(s, &segment.gradient_reduce_scatter, Track::fsdp_comm, EventKind::gradient_reduce_scatter,
              JobTag::reduction, st.last_event, now, static_cast<std::int32_t>(in.micro_batch),
              static_cast<std::int32_t>(in.chunk));
    }
    if (static_cast<std::size_t>(++st.step) < chunk.segments.size()) {
      begin_segment(s, now);
      return;
    }
    // The pass is over.
    if (in.kind == Kind::backward || in.kind == Kind::backward_weight) sample_memory(s, now, -chunk.activation_bytes);
    if (in.kind == Kind::backward || in.kind == Kind::backward_input) sample_memory(s, now, -chunk.recompute_bytes);
    if (work_.overlap_gradient_reduction && st.last_gradient_pc[local(in.chunk)] == st.pc) {
      schedule_buckets(s, chunk, std::numeric_limits<double>::infinity(), now, 0.0);  // rounding leftovers
    }
    ++st.pc;
    st.block = Block::none;
    advance(s, now);
  }

  void issue_gathers(std::int32_t s, double now, std::size_t wanted) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const auto& program = *st.program;
    while (st.gathers.size() < wanted) {
      while (st.gather_pc < program.size() &&
             !(program[st.gather_pc].is_compute() && needs_parameters(program[st.gather_pc].kind))) {
        ++st.gather_pc;
        st.gather_step = 0;
      }
      if (st.gather_pc >= program.size()) return;
      const Instruction& in = program[st.gather_pc];
      const ChunkWork& chunk = chunk_of(s, in.chunk);
      const SegmentWork& segment = chunk.segments[segment_index(in.kind, st.gather_step, chunk.segments.size())];
      if (!segment.parameter_gather.empty()) {  // no weights: begin_segment waits for no gather there
        st.gathers.push_back({});
        enqueue(s, &segment.parameter_gather, Track::fsdp_comm, EventKind::parameter_gather,
                JobTag::parameter_gather, st.last_event, now, static_cast<std::int32_t>(in.micro_batch),
                static_cast<std::int32_t>(in.chunk));
        // enqueue() may have started the job; its ordinal is read at completion.
        jobs_.back().ordinal = st.gathers_issued++;
      }
      if (static_cast<std::size_t>(++st.gather_step) == chunk.segments.size()) {
        ++st.gather_pc;
        st.gather_step = 0;
      }
    }
  }

  void start_optimizer(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const double duration = work_.stage_work[static_cast<std::size_t>(s)].optimizer_s;
    st.block = Block::compute;
    st.compute_event = -1;
    if (duration > 0) {
      SimEvent e;
      e.start_s = now;
      e.end_s = now + duration;
      e.stage = s;
      e.predecessor = st.last_event;
      e.track = Track::compute;
      e.kind = EventKind::optimizer;
      st.compute_event = record(e);
    }
    push(now + duration, Wake::compute_done, s);
  }

  void optimizer_done(std::int32_t s, double now) {
    StageRun& st = stages_[static_cast<std::size_t>(s)];
    const StageWork& sw = work_.stage_work[static_cast<std::size_t>(s)];
    if (!sw.parameter_gather_after_step.empty()) {
      enqueue(s, &sw.parameter_gather_after_step, Track::dp_comm, EventKind::parameter_gather_after_step,
              JobTag::after_step_gather, st.last_event, now);
    }
    ++st.pc;
    st.block = Block::finished;
  }

  const StepWork& work_;
  FlowNetwork network_;
  std::vector<StageRun> stages_;
  std::vector<Job> jobs_;
  std::vector<std::int32_t> flow_job_;
  std::vector<FlowNetwork::Update> updates_;
  std::priority_queue<Pending, std::vector<Pending>, Later> queue_;
  std::uint64_t sequence_ = 0;
  std::int64_t m_ = 1, v_ = 1;
  Timeline timeline_;
};

}  // namespace

Timeline replay(const StepWork& work, const PipelinePrograms& programs, bool contention) {
  return Engine(work, programs, contention).run();
}

}  // namespace meshplan::sim
