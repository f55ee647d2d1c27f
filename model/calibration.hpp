// Turning measurements into preset figures, wherever they were measured:
// the GEMM efficiency curve from (intensity, fraction) points and a link's
// latency and bandwidth from timed collectives. `meshplan calibrate` uses
// both for this machine (executor/calibrate/), `meshplan calibrate --from`
// for measurements made elsewhere (model/measured_device.hpp,
// model/nccl_tests.hpp). Pure functions: no timing happens here.
//
// Defines: CollectiveSample, LinkFit, fit_link, build_gemm_curve.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/collectives.hpp"
#include "model/device_spec.hpp"

namespace meshplan {

// One timed collective (executor/comm/collective_bench.hpp: S in bytes as
// nccl-tests counts it, t the median iteration of the slowest rank).
struct CollectiveSample {
  Collective collective = Collective::all_reduce;
  std::int64_t ranks = 2;
  double bytes = 0;
  double time_s = 0;
};

// The link figures of the cost model (model/collectives.hpp) fitted to the
// samples: t = latency_steps(collective, n, ring) x latency
//            + S x F_bus(collective, n) / bandwidth,
// least squares on the relative error (every size counts alike, from a few
// microseconds to tens of milliseconds), latency and 1/bandwidth kept >= 0.
// The ring's latency steps because collective_time prices the cheaper of
// ring and tree and for 2 ranks they coincide. `worst_relative_error`: the
// largest |fit - t| / t over the samples.
struct LinkFit {
  bool ok = false;                 // at least two samples with distinct shapes and a positive bandwidth
  double latency_s = 0;
  double bandwidth_bytes_per_s = 0;  // bus bandwidth per direction
  double worst_relative_error = 0;
  double median_relative_error = 0;
};

LinkFit fit_link(const std::vector<CollectiveSample>& samples);

// The written curve from measured (intensity, fraction) points: sorted by
// intensity; a run of points whose intensities are within `merge_relative`
// of the run's first becomes one point (mean intensity, mean fraction); then,
// while more than `max_points` remain, the two neighbours closest in
// log(intensity) are merged the same way (weighted by how many measurements
// each holds). Fractions are kept as measured (not made monotone), clamped
// to [1e-3, 1.5] (the range the device schema accepts); points with a
// non-positive intensity or fraction are dropped.
std::vector<GemmCurvePoint> build_gemm_curve(std::vector<GemmCurvePoint> measured, double merge_relative,
                                             std::size_t max_points);

}  // namespace meshplan
