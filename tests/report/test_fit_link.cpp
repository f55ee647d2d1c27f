// fit_link (model/calibration.hpp): the link figures `meshplan calibrate`
// fits to collective timings, on timings made from known figures.
#include <gtest/gtest.h>

#include <cmath>

#include "model/calibration.hpp"

namespace meshplan {
namespace {

std::vector<CollectiveSample> samples_from(double latency_s, double bandwidth, std::int64_t ranks) {
  std::vector<CollectiveSample> samples;
  for (const Collective c : {Collective::all_reduce, Collective::all_gather, Collective::reduce_scatter, Collective::send_recv}) {
    for (double bytes = 1024; bytes <= 64.0 * 1024 * 1024; bytes *= 4) {
      const double t = static_cast<double>(latency_steps(c, ranks, CollectiveAlgorithm::ring)) * latency_s +
                       bytes * bus_bandwidth_factor(c, ranks) / bandwidth;
      samples.push_back({c, ranks, bytes, t});
    }
  }
  return samples;
}

TEST(FitLink, RecoversTheFiguresTheTimingsWereMadeFrom) {
  for (const std::int64_t ranks : {2, 4}) {
    const LinkFit fit = fit_link(samples_from(2.5e-6, 6.0e9, ranks));
    ASSERT_TRUE(fit.ok);
    EXPECT_NEAR(fit.latency_s, 2.5e-6, 1e-12);
    EXPECT_NEAR(fit.bandwidth_bytes_per_s, 6.0e9, 1.0);
    EXPECT_LT(fit.worst_relative_error, 1e-9);
  }
}

TEST(FitLink, NoisyTimingsGiveCloseFiguresAndTheirError) {
  auto samples = samples_from(4e-6, 3e9, 2);
  for (std::size_t i = 0; i < samples.size(); ++i) samples[i].time_s *= (i % 2 == 0 ? 1.1 : 0.9);
  const LinkFit fit = fit_link(samples);
  ASSERT_TRUE(fit.ok);
  EXPECT_NEAR(fit.latency_s, 4e-6, 0.15 * 4e-6);
  EXPECT_NEAR(fit.bandwidth_bytes_per_s, 3e9, 0.15 * 3e9);
  EXPECT_GT(fit.worst_relative_error, 0.05);
  EXPECT_LT(fit.worst_relative_error, 0.25);
}

TEST(FitLink, LatencyIsNeverNegative) {
  // Pure bandwidth timings, the small sizes a little fast: unconstrained least
  // squares would give a negative latency; the fit keeps it at zero.
  auto samples = samples_from(0, 5e9, 2);
  for (auto& s : samples)
    if (s.bytes < 10000) s.time_s *= 0.7;
  const LinkFit fit = fit_link(samples);
  ASSERT_TRUE(fit.ok);
  EXPECT_EQ(fit.latency_s, 0.0);
  EXPECT_GT(fit.bandwidth_bytes_per_s, 4e9);
}

TEST(FitLink, TooFewSamplesIsNoFit) {
  EXPECT_FALSE(fit_link({}).ok);
  EXPECT_FALSE(fit_link({{Collective::all_reduce, 2, 1024, 1e-5}}).ok);
  EXPECT_FALSE(fit_link({{Collective::all_reduce, 1, 1024, 1e-5}, {Collective::all_reduce, 1, 4096, 2e-5}}).ok);
}

}  // namespace
}  // namespace meshplan
