// A cluster link from nccl-tests output (`meshplan calibrate --from FILE
// --nccl-tests`): the text tables that all_reduce_perf, all_gather_perf,
// reduce_scatter_perf and sendrecv_perf print (NVIDIA/nccl-tests,
// src/common.cu print_header; doc/PERFORMANCE.md defines time, algbw and
// busbw). One data row per message size:
//
//   #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
//   #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
//      134217728      33554432     float     sum      -1   1211.2  110.81  110.81      0   1211.8  110.76  110.76      0
//
// out-of-place columns first, then in-place; versions before the `root`
// column print one column fewer. The header's "#  Rank  N Group ... on HOST
// device ..." lines give the rank count and whether the ranks span hosts.
//
// The fit: both times of every row are samples of the cost model's
//   t = latency_steps(collective, n, ring) x latency + S x F_bus(collective, n) / bandwidth
// (model/collectives.hpp), fitted by fit_link (model/calibration.hpp): least
// squares on the relative error, so sizes from bytes to gigabytes count
// alike, latency and 1/bandwidth kept >= 0. The fitted bandwidth is a bus
// bandwidth, as nccl-tests' busbw.
//
// Defines: NcclTestsRun, parse_nccl_tests, NcclLinkFit, fit_nccl_link, apply_link_fit, measured_cluster_yaml.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "model/calibration.hpp"
#include "model/cluster_spec.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct NcclTestsRun {
  std::string file;
  std::optional<Collective> collective;  // from "Collective test starting: X_perf" or the program's name in the text
  std::int64_t ranks = 0;                // "#  Rank" lines
  std::set<std::string> hosts;           // "on HOST" of those lines
  std::string device;                    // the device the first rank line names
  struct Row {
    double bytes = 0;
    double out_of_place_s = 0, in_place_s = 0;
    double algbw_bytes_per_s = 0, busbw_bytes_per_s = 0;  // out-of-place
  };
  std::vector<Row> rows;
};

// Problems name "FILE:LINE": a line that is neither a comment ('#'), an NCCL
// log line ("NCCL INFO", "NCCL WARN") nor a result row is an error, as is a
// result row whose numbers do not read. `collective_flag`: when not empty,
// the collective ("all_reduce", ...) instead of what the text says.
Loaded<NcclTestsRun> parse_nccl_tests(std::string_view text, const std::string& file, const std::string& collective_flag = "");

struct NcclLinkFit {
  LinkFit fit;
  bool inter_node = false;  // the ranks ran on more than one host
  std::int64_t samples = 0;
  // The bus bandwidth the link's figure is made from: the fit's, but for an
  // all-to-all across hosts with m = ranks / hosts > 1 ranks on each, the
  // NICs' aggregate its rate implies, fit x (n - m) m / (n - 1), since an
  // all-to-all cannot aggregate NICs as a ring does (model/collectives.hpp,
  // all_to_all_bus_bandwidth, with the NICs the limit).
  double link_bandwidth_bytes_per_s = 0;
};

// The fit of the header's comment; errors when the collective or the rank
// count is unknown, or fewer than two sizes have a time.
Loaded<NcclLinkFit> fit_nccl_link(const NcclTestsRun& run);

// `base` with the fitted link in place of the one the ranks crossed: the
// intra-node link's per-direction bus bandwidth and latency; or, across
// hosts, the inter-node link's per-NIC rate (the fitted bus bandwidth over
// nics_per_node: NCCL runs one ring per NIC, so a node's busbw across nodes
// is nics x one NIC's) and latency; achievable_fraction 1, since the
// bandwidth is itself a measured collective rate.
ClusterSpec apply_link_fit(const ClusterSpec& base, const NcclLinkFit& link);

// The cluster preset's YAML, the timings and the fit as comments; what is
// not fitted is `base_label`'s. `command`: how it was made, for the header.
std::string measured_cluster_yaml(const ClusterSpec& cluster, const NcclTestsRun& run, const NcclLinkFit& link,
                                  const std::string& base_label, const std::string& command);

}  // namespace meshplan
