// Golden test of the time model: Korthikanti et al. 2022, Table 5, measured
// seconds per iteration on Selene (DGX A100) for four models under full
// recompute and under sequence parallelism + selective recompute. Nothing in
// the model was fitted to these eight rows; the A100's L2 bandwidth, a sourced
// figure, was added after they were found short (docs/validation.md; how the
// rows move with it: docs/cost-model.md, "Tile traffic").
//
// The targets, 8% per row and 5% on average, are the bounds. The model
// reaches 7.3% at worst and 3.8% on average (docs/validation.md lists every
// row).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "model/published_cases.hpp"

namespace meshplan {
namespace {

constexpr double kWorstRowBound = 0.08;
constexpr double kMeanBound = 0.05;

TEST(KorthikantiTable5, IterationTimes) {
  const auto results = predict(korthikanti_iteration_time_cases());
  ASSERT_EQ(results.size(), 8u);
  double sum = 0, worst = 0;
  for (const auto& r : results) {
    ASSERT_GT(r.predicted, 0) << r.c.name;
    std::printf("[ golden ] %-22s published %7.2f s  predicted %7.2f s  %+6.1f%%\n", r.c.name.c_str(), r.c.published,
                r.predicted, 100 * r.error());
    EXPECT_LE(std::abs(r.error()), kWorstRowBound) << r.c.name;
    sum += std::abs(r.error());
    worst = std::max(worst, std::abs(r.error()));
  }
  const double mean = sum / static_cast<double>(results.size());
  std::printf("[ golden ] mean |error| %.2f%%, worst %.2f%% (target 5%% / 8%%)\n", 100 * mean, 100 * worst);
  EXPECT_LE(mean, kMeanBound);
}

TEST(KorthikantiTable5, RecomputeCostsWhatThePaperMeasured) {
  // The ratio full / selective+SP per model (published 1.29 to 1.32).
  const auto results = predict(korthikanti_iteration_time_cases());
  for (std::size_t i = 0; i + 1 < results.size(); i += 2) {
    const double published = results[i].c.published / results[i + 1].c.published;
    const double predicted = results[i].predicted / results[i + 1].predicted;
    EXPECT_NEAR(predicted, published, 0.06) << results[i].c.name;
  }
}

}  // namespace
}  // namespace meshplan
