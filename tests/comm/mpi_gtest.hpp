// What the GoogleTest programs that run under mpirun share: rank 0 prints
// gtest's usual output, the other ranks only their failures (prefixed with
// the rank), and every rank returns 1 when a test failed on any rank.
//
// defines: FailuresOnly, run_all_tests_on_every_rank
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <span>

#include "executor/comm/communicator.hpp"

namespace meshplan::exec::comm::testing {

class FailuresOnly : public ::testing::EmptyTestEventListener {
 public:
  explicit FailuresOnly(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                 result.line_number(), result.summary());
  }

 private:
  int rank_;
};

// RUN_ALL_TESTS() on this rank (InitGoogleTest already called), then agree
// over `world`: 1 on every rank when a test failed anywhere, reported by rank 0.
inline int run_all_tests_on_every_rank(Communicator& world, const char* program) {
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new FailuresOnly(world.rank()));
  }
  std::int32_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  world.all_reduce(std::span<std::int32_t>(&failed, 1), ReduceOp::max);
  if (world.rank() == 0 && failed != 0) std::fprintf(stderr, "%s: a test failed on some rank (see above)\n", program);
  return failed;
}

}  // namespace meshplan::exec::comm::testing
