// A cluster: identical nodes of `devices_per_node` devices, joined inside a
// node by one kind of link (NVLink, PCIe, ICI) and between nodes by NICs.
// Bandwidths are per direction (a full-duplex link moves this much each way).
// Loaded from presets/clusters/*.yaml; the device is a device preset.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "model/device_spec.hpp"
#include "model/problem.hpp"

namespace meshplan {

// What a cluster preset accepts for a link (read_cluster), for the code that
// writes presets too (calibrate --nccl-tests): intra_node.per_direction_gb_per_s
// (GB/s) and inter_node.per_nic_gbit_per_s (Gbit/s) within [min, max], latency_us
// within [0, max], nics_per_node within [1, max].
inline constexpr double kLinkRateMin = 1e-6;
// achievable_fraction (nccl-tests busbw / line rate) from this up to 1: a link that carries less than
// 0.1% of its line rate is not one a plan can be priced on (below it step times ran to inf).
inline constexpr double kLinkFractionMin = 1e-3;
inline constexpr double kLinkRateMax = 1e6;
inline constexpr double kLinkLatencyMaxUs = 1e6;
inline constexpr std::int64_t kMaxNicsPerNode = 1024;

struct LinkSpec {
  std::string kind;                      // nvlink | pcie | ici | infiniband | ethernet
  double bandwidth_bytes_per_s = 0;      // per direction, per device (intra) or per NIC (inter)
  double latency_s = 0;
  std::int64_t nics_per_node = 0;        // inter-node only
  // Fraction of the line rate NCCL-style collectives reach on this link (nccl-tests
  // busbw / line rate); the topology multiplies bandwidth_bytes_per_s by it. (0, 1].
  double achievable_fraction = 1.0;
  // Whether collectives on this link can run while the devices compute. An
  // accelerator's NCCL kernels and copy engines move data beside the compute
  // (the overlap the model grants to bucketed dp reduction, FSDP prefetch and
  // tp backward collectives); MPI over shared memory copies with the same CPU
  // cores that compute, so nothing it does is hidden. `overlaps_compute: false`.
  bool overlaps_compute = true;
};

struct ClusterSpec {
  std::string name;
  std::string source;
  DeviceSpec device;
  std::int64_t devices_per_node = 1;
  std::optional<std::int64_t> max_nodes;  // absent = as many as asked for
  LinkSpec intra_node;
  LinkSpec inter_node;
};

Loaded<ClusterSpec> load_cluster(const std::string& name_or_path);
// The same, from YAML text (tests, fuzzing); `display_name` names it in
// messages. Its `device` is still looked up as a preset name or path.
Loaded<ClusterSpec> load_cluster_text(const std::string& yaml_text, const std::string& display_name);

}  // namespace meshplan
