// `meshplan presets`: what models, devices and clusters there are, with
// their key figures, so a user can pick one without opening YAML files.
// Presets from the user's folder (where `meshplan calibrate` writes
// local-cpu) override built-in ones of the same name and are marked with
// the file they come from.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/text_report.hpp"
#include "model/cluster_spec.hpp"
#include "model/device_spec.hpp"
#include "model/hf_config.hpp"
#include "model/layer_graph.hpp"
#include "model/model_spec.hpp"
#include "model/presets.hpp"
#include "model/suggest.hpp"

namespace meshplan::cli {
namespace {

// "  (from /home/me/.config/meshplan/presets/devices/local-cpu.yaml)" for a user preset, else "".
std::string origin(PresetKind kind, const std::string& name) {
  const auto file = find_preset(kind, name);
  return file.ok() && file.value.from_user_folder ? "  (from " + file.value.path + ")" : "";
}

// TFLOP/s with three significant digits, so a CPU's 0.141 does not print as 0.
std::string tflops(double flops_per_s) {
  const double t = flops_per_s / 1e12;
  return format(t >= 100 ? "%.0f" : t >= 10 ? "%.1f" : t >= 1 ? "%.2f" : "%.3g", t);
}

}  // namespace

Command add_presets_command(CLI::App& app) {
  auto* command = app.add_subcommand("presets", "List the model, device and cluster presets (built-in and the user's)");
  auto kind = std::make_shared<std::string>("all");
  command->add_option("kind", *kind, "models, devices, clusters or all")
      ->check(CLI::Validator(
          [](std::string& value) {
            static const std::vector<std::string> kinds = {"all", "models", "devices", "clusters"};
            if (std::find(kinds.begin(), kinds.end(), value) != kinds.end()) return std::string();
            return "'" + value + "' is not one of: all, models, devices, clusters" + did_you_mean(value, kinds);
          },
          "KIND"))
      ->capture_default_str();
  auto from_hf = std::make_shared<std::string>();
  command->add_option("--from-hf", *from_hf,
                      "Print a Hugging Face config.json as a model preset, each field commented with the keys it came "
                      "from (save it under presets/models/, or use --model hf:FILE directly)");

  return [kind, from_hf]() {
    int status = exit_ok;
    auto report = [&](const Problems& problems) {
      for (const auto& p : problems) std::cerr << "meshplan presets: " << describe(p) << "\n";
      if (has_errors(problems)) status = exit_bad_input;
    };
    if (!from_hf->empty()) {
      const Loaded<HfModel> hf = read_hf_config(*from_hf);
      for (const auto& p : hf.problems) std::cerr << "meshplan presets: " << describe(p) << "\n";
      if (!hf.ok()) return exit_bad_input;
      std::cout << hf_model_yaml(hf.value) << "# " << human_count(build_layer_graph(hf.value.model, hf.value.model.default_seq_len()).parameter_count())
                << " parameters\n";
      return exit_ok;
    }
    std::cout << "presets folder: " << presets_root() << "\n";
    const std::string user = user_presets_dir();
    std::cout << "user presets folder (searched first): " << (user.empty() ? std::string("none (no HOME)") : user) << "\n";
    if (*kind == "all" || *kind == "models") {
      std::cout << "\nmodels\n";
      report(user_preset_folder_problems(PresetKind::model));
      for (const auto& name : list_presets(PresetKind::model)) {
        auto model = load_model(name);
        report(model.problems);  // a preset's warnings too (e.g. a name that is not its file's)
        if (!model.ok()) continue;
        const auto graph = build_layer_graph(model.value, model.value.default_seq_len());
        std::cout << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ')
                  << to_string(model.value.kind) << std::string(13 - to_string(model.value.kind).size(), ' ')
                  << human_count(graph.parameter_count()) << " parameters" << origin(PresetKind::model, name) << "\n";
      }
    }
    if (*kind == "all" || *kind == "devices") {
      std::cout << "\ndevices\n";
      report(user_preset_folder_problems(PresetKind::device));
      for (const auto& name : list_presets(PresetKind::device)) {
        auto device = load_device(name);
        report(device.problems);  // a preset's warnings too (e.g. a name that is not its file's)
        if (!device.ok()) continue;
        std::string peaks;
        for (const auto& [dtype, flops] : device.value.peak_flops_per_s) {
          peaks += " " + to_string(dtype) + " " + tflops(flops);
        }
        std::cout << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') << gib(device.value.memory_bytes)
                  << " GiB, " << format(device.value.memory_bandwidth_bytes_per_s < 10e9 ? "%.3g" : "%.0f",
                                        device.value.memory_bandwidth_bytes_per_s / 1e9)
                  << " GB/s; TFLOP/s"
                  << peaks << origin(PresetKind::device, name) << "\n";
      }
    }
    if (*kind == "all" || *kind == "clusters") {
      std::cout << "\nclusters\n";
      report(user_preset_folder_problems(PresetKind::cluster));
      for (const auto& name : list_presets(PresetKind::cluster)) {
        auto cluster = load_cluster(name);
        report(cluster.problems);  // a preset's warnings too (e.g. a name that is not its file's)
        if (!cluster.ok()) continue;
        const auto& c = cluster.value;
        std::cout << "  " << name << std::string(name.size() < 14 ? 14 - name.size() : 1, ' ') << c.devices_per_node
                  << " x " << c.device.name << " per node, " << c.intra_node.kind << " "
                  << c.intra_node.bandwidth_bytes_per_s / 1e9 << " GB/s/direction; " << c.inter_node.nics_per_node
                  << " x " << c.inter_node.kind << " " << c.inter_node.bandwidth_bytes_per_s * 8 / 1e9 << " Gb/s"
                  << origin(PresetKind::cluster, name) << "\n";
      }
    }
    return status;
  };
}

}  // namespace meshplan::cli
