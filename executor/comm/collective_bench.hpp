// Timing one collective at one size on a group, the way nccl-tests does, as a
// library function: `meshplan commbench` prints tables of it, and
// `meshplan calibrate` fits the cost model's latency and bus bandwidth to it.
//
// Definitions (nccl-tests, doc/PERFORMANCE.md; model/collectives.hpp has F_bus):
//   size S (bytes): all_reduce the buffer; all_gather the gathered output;
//     reduce_scatter the full input; all_to_all all bytes one rank sends;
//     broadcast and send_recv the message.
//   time t: per iteration, from a barrier to the operation's completion on
//     this rank; the median over iterations on each rank, then the maximum
//     over ranks (the slowest rank is what a training step waits for).
//   algbw = S / t;  busbw = algbw x F_bus(collective, n), with F_bus =
//     2(n-1)/n for all_reduce, (n-1)/n for all_gather, reduce_scatter and
//     all_to_all, 1 for broadcast and send_recv.
//   send_recv is a ping-pong between group ranks 0 and 1 (the others wait):
//     t is half the round trip.
// Inputs are integers small enough to be exact in every type, refilled
// before each iteration; every iteration's result is checked on every rank,
// and `correct` is true only when all of them were right.
//
// Buffers: by default in host memory, what the MPI communicator works on. A
// communicator on device memory (NCCL) passes BenchBuffers: the inputs are
// still made on the host, uploaded before the barrier, and every iteration's
// result is downloaded after the timed call and checked on the host, as for
// host buffers. The copies are outside the timed region, so the timing is
// unchanged: it stops when the blocking call returns, which for NCCL is when
// its stream has finished the operation (nccl_communicator.hpp).
//
// defines: CollectiveTiming, BenchBuffers, measure_collective, collective_size_bytes
#pragma once

#include <cstddef>
#include <cstdint>

#include "executor/comm/communicator.hpp"
#include "model/collectives.hpp"

namespace meshplan::exec::comm {

struct CollectiveTiming {
  Collective collective = Collective::all_reduce;
  DataType type = DataType::f32;
  int ranks = 1;
  std::int64_t bytes = 0;  // S above, after rounding to whole elements per rank
  std::int64_t count = 0;  // S / element size (nccl-tests' "count")
  int iterations = 0;
  double time_s = 0;       // median over iterations, max over ranks
  double min_time_s = 0;   // fastest iteration, max over ranks (robust on a busy machine)
  double algbw_bytes_per_s = 0;
  double busbw_bytes_per_s = 0;
  bool correct = false;
  std::int64_t wrong_elements = 0;  // summed over ranks and iterations
};

// Memory the communicator's operations take (device memory for NCCL). Every
// call is complete when it returns (the device implementation synchronises),
// so the communicator may use the data at once.
class BenchBuffers {
 public:
  virtual ~BenchBuffers() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* buffer, std::size_t bytes) noexcept = 0;
  virtual void upload(void* buffer, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* buffer, std::size_t bytes) = 0;
};

// S rounded down so that every rank's block holds whole elements (all_gather,
// reduce_scatter and all_to_all split S into n blocks); at least one element
// per block.
std::int64_t collective_size_bytes(Collective collective, std::int64_t bytes, int ranks, DataType type);

// Collective over `group` (every rank calls it with the same arguments).
// send_recv needs at least 2 ranks (std::logic_error otherwise). `buffers`
// null: host memory; otherwise the communicator's buffers come from it, and
// so do the few elements of the summary reductions (time, wrong elements).
CollectiveTiming measure_collective(Communicator& group, Collective collective, std::int64_t bytes, int iterations,
                                    int warmup, DataType type = DataType::f32, BenchBuffers* buffers = nullptr);

}  // namespace meshplan::exec::comm
