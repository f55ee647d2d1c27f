// Fuzz target: a cluster preset (YAML), including the local-cpu cluster
// `meshplan calibrate` writes. Its `device` is looked up like any preset
// (the built-in presets folder; the user folder is pointed at an empty
// directory so the machine's own presets do not change the run). Rejected
// clusters must name "fuzz-cluster.yaml" (a bad device reads
// "fuzz-cluster.yaml:3 key 'device' -> presets/devices/...").
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "fuzz/fuzz_common.hpp"
#include "model/cluster_spec.hpp"

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const auto empty = std::filesystem::temp_directory_path() / "meshplan-fuzz-no-user-presets";
  std::filesystem::create_directories(empty);
  ::setenv("MESHPLAN_USER_PRESETS", empty.c_str(), 1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const auto cluster = load_cluster_text(text, "fuzz-cluster.yaml");
  fuzz::check_loaded(cluster, "fuzz-cluster.yaml");
  if (!cluster.ok()) return 0;
  const ClusterSpec& c = cluster.value;
  fuzz::require(c.devices_per_node >= 1, "devices_per_node >= 1");
  fuzz::require(!c.max_nodes || *c.max_nodes >= 1, "max_nodes >= 1");
  for (const LinkSpec* link : {&c.intra_node, &c.inter_node}) {
    fuzz::require(std::isfinite(link->bandwidth_bytes_per_s) && link->bandwidth_bytes_per_s > 0, "link bandwidth > 0");
    fuzz::require(link->latency_s >= 0, "link latency >= 0");
    fuzz::require(link->achievable_fraction > 0 && link->achievable_fraction <= 1, "achievable_fraction in (0, 1]");
  }
  fuzz::require(!c.device.peak_flops_per_s.empty(), "the device has a peak");
  return 0;
}
