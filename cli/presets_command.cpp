// `meshplan presets`: what models, devices and clusters are built in, with
// their key figures, so a user can pick one without opening YAML files.
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/text_report.hpp"
#include "model/cluster_spec.hpp"
#include "model/device_spec.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/presets.hpp"

namespace meshplan::cli {

Command add_presets_command(CLI::App& app) {
  auto* command = app.add_subcommand("presets", "List the built-in model, device and cluster presets");
  auto kind = std::make_shared<std::string>("all");
  command->add_option("kind", *kind, "models, devices, clusters or all")
      ->check(CLI::IsMember({"all", "models", "devices", "clusters"}))
      ->capture_default_str();

  return [kind]() {
    int status = exit_ok;
    auto report = [&](const Problems& problems) {
      for (const auto& p : problems) std::cerr << "meshplan presets: " << describe(p) << "\n";
      status = exit_bad_input;
    };
    std::cout << "presets folder: " << presets_root() << "\n";
    if (*kind == "all" || *kind == "models") {
      std::cout << "\nmodels\n";
      for (const auto& name : list_presets(PresetKind::model)) {
        auto model = load_model(name);
        if (!model.ok()) {
          report(model.problems);
          continue;
        }
        const auto graph = build_layer_graph(model.value, model.value.default_seq_len());
        std::cout << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ')
                  << to_string(model.value.kind) << std::string(13 - to_string(model.value.kind).size(), ' ')
                  << human_count(graph.parameter_count()) << " parameters\n";
      }
    }
    if (*kind == "all" || *kind == "devices") {
      std::cout << "\ndevices\n";
      for (const auto& name : list_presets(PresetKind::device)) {
        auto device = load_device(name);
        if (!device.ok()) {
          report(device.problems);
          continue;
        }
        std::string peaks;
        for (const auto& [dtype, flops] : device.value.peak_flops_per_s) {
          peaks += " " + to_string(dtype) + " " + std::to_string(static_cast<long>(flops / 1e12 + 0.5));
        }
        std::cout << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') << gib(device.value.memory_bytes)
                  << " GiB, " << static_cast<long>(device.value.memory_bandwidth_bytes_per_s / 1e9) << " GB/s; TFLOP/s"
                  << peaks << "\n";
      }
    }
    if (*kind == "all" || *kind == "clusters") {
      std::cout << "\nclusters\n";
      for (const auto& name : list_presets(PresetKind::cluster)) {
        auto cluster = load_cluster(name);
        if (!cluster.ok()) {
          report(cluster.problems);
          continue;
        }
        const auto& c = cluster.value;
        std::cout << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') << c.devices_per_node
                  << " x " << c.device.name << " per node, " << c.intra_node.kind << " "
                  << c.intra_node.bandwidth_bytes_per_s / 1e9 << " GB/s/direction; " << c.inter_node.nics_per_node
                  << " x " << c.inter_node.kind << " " << c.inter_node.bandwidth_bytes_per_s * 8 / 1e9 << " Gb/s\n";
      }
    }
    return status;
  };
}

}  // namespace meshplan::cli
