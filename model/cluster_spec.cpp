#include "model/cluster_spec.hpp"

#include <algorithm>

#include "model/presets.hpp"
#include "model/text.hpp"
#include "model/yaml_reader.hpp"

namespace meshplan {
namespace {

// Optional `achievable_fraction` (nccl-tests busbw / line rate), in [kLinkFractionMin, 1]; 1.0 (the
// line rate) when absent.
double read_achievable_fraction(YamlMap& link) {
  return link.number("achievable_fraction", Need::optional, kLinkFractionMin, 1).value_or(1.0);
}

Loaded<ClusterSpec> read_cluster(const YAML::Node& node, const std::string& display_name) {
  Loaded<ClusterSpec> result;
  Problems& problems = result.problems;
  ClusterSpec& cluster = result.value;
  YamlMap root(node, display_name, "", problems);
  cluster.name = root.text("name", Need::required).value_or("");
  cluster.source = root.text("source", Need::required).value_or("");
  const auto device_name = root.text("device", Need::required);
  cluster.devices_per_node = root.integer("devices_per_node", Need::required, 1, 1 << 20).value_or(1);
  cluster.max_nodes = root.integer("max_nodes", Need::optional, 1, 1 << 24);

  if (auto intra = root.map("intra_node", Need::required)) {
    cluster.intra_node.kind = intra->choice("kind", Need::required, {"nvlink", "pcie", "ici", "shared-memory"}).value_or("");
    cluster.intra_node.bandwidth_bytes_per_s =
        scale_decimal(intra->number("per_direction_gb_per_s", Need::required, kLinkRateMin, kLinkRateMax).value_or(0), 9);
    cluster.intra_node.latency_s = scale_decimal(intra->number("latency_us", Need::optional, 0, kLinkLatencyMaxUs).value_or(0), -6);
    cluster.intra_node.achievable_fraction = read_achievable_fraction(*intra);
    cluster.intra_node.overlaps_compute = intra->boolean("overlaps_compute", Need::optional).value_or(true);
    intra->finish();
  }
  if (auto inter = root.map("inter_node", Need::required)) {
    cluster.inter_node.kind = inter->choice("kind", Need::required, {"infiniband", "ethernet", "ici"}).value_or("");
    cluster.inter_node.nics_per_node = inter->integer("nics_per_node", Need::required, 1, kMaxNicsPerNode).value_or(1);
    cluster.inter_node.bandwidth_bytes_per_s =
        scale_decimal(inter->number("per_nic_gbit_per_s", Need::required, kLinkRateMin, kLinkRateMax).value_or(0), 9) / 8.0;
    cluster.inter_node.latency_s = scale_decimal(inter->number("latency_us", Need::optional, 0, kLinkLatencyMaxUs).value_or(0), -6);
    cluster.inter_node.achievable_fraction = read_achievable_fraction(*inter);
    cluster.inter_node.overlaps_compute = inter->boolean("overlaps_compute", Need::optional).value_or(true);
    inter->finish();
  }
  root.finish();

  if (device_name) {
    auto device = load_device(*device_name);
    if (!device.ok()) {
      for (auto& p : device.problems) {
        p.where = root.where("device") + " -> " + p.where;
        problems.push_back(p);
      }
    } else {
      cluster.device = device.value;
    }
  }
  return result;
}

// A device preset's name where a cluster's was asked for (`--cluster
// h100-sxm`): the clusters built from that device, to say which to name.
std::string clusters_of_device(const std::string& name) {
  const auto devices = list_presets(PresetKind::device);
  if (std::find(devices.begin(), devices.end(), name) == devices.end()) return "";
  std::string clusters;
  for (const auto& cluster : list_presets(PresetKind::cluster)) {
    const auto file = find_preset(PresetKind::cluster, cluster);
    if (!file.ok()) continue;
    const auto yaml = load_yaml_file(file.value.path, file.value.display_name);
    if (!yaml.ok() || !yaml.value.IsMap() || !yaml.value["device"] || !yaml.value["device"].IsScalar()) continue;
    if (yaml.value["device"].Scalar() == name) clusters += (clusters.empty() ? "" : ", ") + cluster;
  }
  return name + " is a device preset; a cluster preset names its device, its nodes and their links: " +
         (clusters.empty() ? "none is built from " + name + " yet (write one: docs/presets.md)"
                           : "the clusters of " + name + " are " + clusters + " (with --gpus 1, one device of it)");
}

}  // namespace

Loaded<ClusterSpec> load_cluster(const std::string& name_or_path) {
  auto file = find_preset(PresetKind::cluster, name_or_path);
  if (!file.ok()) {
    if (const std::string hint = clusters_of_device(name_or_path); !hint.empty() && !file.problems.empty()) {
      file.problems.front().message = hint;
    }
    return {{}, file.problems};
  }
  auto yaml = load_yaml_file(file.value.path, file.value.display_name);
  if (!yaml.ok()) return {{}, yaml.problems};
  auto loaded = read_cluster(yaml.value, file.value.display_name);
  if (loaded.ok()) add_name_mismatch(file.value, yaml.value, loaded.value.name, loaded.problems);
  return loaded;
}

Loaded<ClusterSpec> load_cluster_text(const std::string& yaml_text, const std::string& display_name) {
  auto yaml = load_yaml_text(yaml_text, display_name);
  if (!yaml.ok()) return {{}, yaml.problems};
  return read_cluster(yaml.value, display_name);
}

}  // namespace meshplan
