// Fuzz target: `meshplan calibrate --from FILE --nccl-tests` (parse_nccl_tests,
// fit_nccl_link, model/nccl_tests.hpp). A rejected file names the file (and
// line); an accepted one has rows of finite, non-negative sizes and times;
// a fitted link has a finite positive bandwidth and a finite non-negative
// latency, and the cluster preset written from it (on dgx-h100, as with
// --base dgx-h100) loads back as a cluster preset.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/cluster_spec.hpp"
#include "model/nccl_tests.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const std::string file = "fuzz-nccl-tests.txt";
  const auto run = parse_nccl_tests(text, file);
  fuzz::check_loaded(run, file);
  if (!run.ok()) return 0;
  for (const NcclTestsRun::Row& row : run.value.rows) {
    fuzz::require(std::isfinite(row.bytes) && row.bytes >= 0, "row sizes are finite and >= 0");
    fuzz::require(std::isfinite(row.out_of_place_s) && row.out_of_place_s >= 0, "row times are finite and >= 0");
    fuzz::require(std::isfinite(row.in_place_s) && row.in_place_s >= 0, "row times are finite and >= 0");
  }
  const auto link = fit_nccl_link(run.value);
  fuzz::check_loaded(link, file);
  if (!link.ok()) return 0;
  fuzz::require(std::isfinite(link.value.fit.bandwidth_bytes_per_s) && link.value.fit.bandwidth_bytes_per_s > 0,
                "a fitted bandwidth is finite and > 0");
  fuzz::require(std::isfinite(link.value.fit.latency_s) && link.value.fit.latency_s >= 0,
                "a fitted latency is finite and >= 0");
  static const ClusterSpec base = fuzz::must_load(load_cluster("dgx-h100"));
  const ClusterSpec cluster = apply_link_fit(base, link.value);
  const std::string yaml = measured_cluster_yaml(cluster, run.value, link.value, "--base dgx-h100", "fuzz");
  fuzz::require_no_errors(load_cluster_text(yaml, "written preset").problems,
                          "the cluster preset written from an accepted file does not load");
  return 0;
}
