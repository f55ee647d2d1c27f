// `meshplan calibrate --from` (calibrate_from.hpp): flags to a base device or
// cluster, the file to measurements, the library to figures, the YAML out.
#include "cli/calibrate_from.hpp"

#include <fstream>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/commands.hpp"
#include "model/atomic_file.hpp"
#include "model/measured_device.hpp"
#include "model/nccl_tests.hpp"
#include "model/presets.hpp"
#include "model/text.hpp"

namespace meshplan::cli {
namespace {

std::optional<Dtype> dtype_named(const std::string& text) {
  for (Dtype d : {Dtype::fp32, Dtype::tf32, Dtype::bf16, Dtype::fp16, Dtype::fp8}) {
    if (text == to_string(d)) return d;
  }
  return std::nullopt;
}

void report(const Problems& problems) {
  for (const auto& p : problems) {
    std::cerr << "meshplan calibrate: " << describe(p) << "\n";
  }
}

// --peak-tflops "bf16=989.4,fp32=67" into the device's peaks.
void apply_peaks(const std::string& text, DeviceSpec& device, Problems& problems) {
  std::stringstream items(text);
  std::string item;
  while (std::getline(items, item, ',')) {
    const auto eq = item.find('=');
    std::optional<Dtype> dtype;
    double value = 0;
    if (eq != std::string::npos) {
      dtype = dtype_named(item.substr(0, eq));
      try {
        std::size_t used = 0;
        value = std::stod(item.substr(eq + 1), &used);
        if (used != item.size() - eq - 1) value = 0;
      } catch (const std::exception&) {
        value = 0;
      }
    }
    if (!dtype || !(value >= kPeakTflopsMin && value <= kPeakTflopsMax)) {
      problems.push_back({Severity::error, "--peak-tflops",
                          "'" + item + "' is not DTYPE=TFLOPS with DTYPE one of fp32, tf32, bf16, fp16, fp8 and a rate "
                          "from " + format("%g", kPeakTflopsMin) + " to " + format("%g", kPeakTflopsMax) + " TFLOP/s"});
      continue;
    }
    device.peak_flops_per_s[*dtype] = value * 1e12;
  }
}

// How the file was made, for its header: the flags that decide its figures (not -o).
std::string command_of(const CalibrateFromFlags& f) {
  std::string c = "meshplan calibrate --from " + f.file + (f.nccl_tests ? " --nccl-tests" : "");
  if (!f.collective.empty()) c += " --collective " + f.collective;
  if (!f.name.empty()) c += " --name " + f.name;
  if (!f.base.empty()) c += " --base " + f.base;
  if (!f.peak_tflops.empty()) c += " --peak-tflops " + f.peak_tflops;
  if (f.memory_bandwidth_gb_per_s > 0) c += " --memory-bandwidth-gb-per-s " + std::to_string(f.memory_bandwidth_gb_per_s);
  if (f.memory_gib > 0) c += " --memory-gib " + std::to_string(f.memory_gib);
  if (!f.source.empty()) c += " --source '" + f.source + "'";
  return c;
}

int write_out(const CalibrateFromFlags& f, const std::string& yaml) {
  if (f.output.empty()) {
    std::cout << yaml;
    return exit_ok;
  }
  const Problems problems = write_file_atomically(f.output, [&](std::ostream& o) { o << yaml; });
  if (has_errors(problems)) {
    report(problems);
    return exit_bad_input;
  }
  std::cerr << "meshplan calibrate: wrote " << f.output << "\n";
  return exit_ok;
}

int device_from(const CalibrateFromFlags& f, const std::string& text) {
  const Loaded<std::string> yaml = device_preset_yaml(f, text, command_of(f));
  report(yaml.problems);
  if (has_errors(yaml.problems)) return exit_bad_input;
  return write_out(f, yaml.value);
}

int cluster_from(const CalibrateFromFlags& f, const std::string& text) {
  if (f.base.empty()) {
    report({{Severity::error, "--base",
             "--nccl-tests fits one link; name the cluster preset whose other figures to keep (e.g. --base dgx-h100)"}});
    return exit_bad_input;
  }
  Problems problems;
  auto base = load_cluster(f.base);
  for (auto p : base.problems) {
    p.where = "--base " + p.where;
    problems.push_back(p);
  }
  auto run = parse_nccl_tests(text, f.file, f.collective);
  problems.insert(problems.end(), run.problems.begin(), run.problems.end());
  if (has_errors(problems)) {
    report(problems);
    return exit_bad_input;
  }
  auto link = fit_nccl_link(run.value);
  problems.insert(problems.end(), link.problems.begin(), link.problems.end());
  report(problems);
  if (has_errors(problems)) return exit_bad_input;
  ClusterSpec cluster = apply_link_fit(base.value, link.value);
  if (!f.name.empty()) cluster.name = f.name;
  if (!f.source.empty()) cluster.source = f.source;
  return write_out(f, measured_cluster_yaml(cluster, run.value, link.value, "--base " + f.base, command_of(f)));
}

}  // namespace

Loaded<std::string> device_preset_yaml(const CalibrateFromFlags& f, const std::string& text, const std::string& command) {
  Loaded<std::string> result;
  Problems& problems = result.problems;
  DeviceSpec base;
  std::string base_label = "flags";
  std::map<std::string, std::string> base_comments;
  if (!f.base.empty()) {
    auto loaded = load_device(f.base);
    for (auto p : loaded.problems) {
      p.where = "--base " + p.where;
      problems.push_back(p);
    }
    base = loaded.value;
    base_label = "--base " + f.base;
    // The base's comments carry the sources of the figures it keeps.
    if (const auto file = find_preset(PresetKind::device, f.base); file.ok()) {
      std::ifstream base_file(file.value.path);
      std::stringstream base_text;
      base_text << base_file.rdbuf();
      base_comments = yaml_line_comments(base_text.str());
    }
  } else {
    base.name = "measured-device";
    base.source = "datasheet figures from flags";
  }
  if (!f.peak_tflops.empty()) apply_peaks(f.peak_tflops, base, problems);
  // 0 is "not given"; anything else must be what a device preset holds.
  const auto check_range = [&](double value, const char* flag, double least, double most, const char* unit) {
    if (value != 0 && !(value >= least && value <= most)) {
      problems.push_back({Severity::error, flag, "must be from " + format("%g", least) + " to " + format("%g", most) +
                                                     " " + unit + ", got " + format("%g", value)});
    }
  };
  check_range(f.memory_bandwidth_gb_per_s, "--memory-bandwidth-gb-per-s", kMemoryBandwidthGbPerSMin,
              kMemoryBandwidthGbPerSMax, "GB/s");
  check_range(f.memory_gib, "--memory-gib", kMemoryGibMin, kMemoryGibMax, "GiB");
  if (f.memory_bandwidth_gb_per_s > 0) base.memory_bandwidth_bytes_per_s = f.memory_bandwidth_gb_per_s * 1e9;
  if (!f.name.empty()) base.name = f.name;
  if (!f.source.empty()) base.source = f.source;
  auto measured = parse_device_measurements(text, f.file);
  problems.insert(problems.end(), measured.problems.begin(), measured.problems.end());
  if (has_errors(problems)) return result;
  auto figures = derive_device_figures(measured.value, base);
  problems.insert(problems.end(), figures.problems.begin(), figures.problems.end());
  if (has_errors(problems)) return result;
  DeviceSpec device = apply_measured_figures(base, figures.value, measured.value);
  DeviceMeasurements written = measured.value;
  if (f.memory_gib > 0) {
    device.memory_bytes = f.memory_gib * 1024.0 * 1024 * 1024;
    written.memory_bytes = 0;  // the figure's comment names the flag, not the file's row
    base_comments["memory_gib"] = "from --memory-gib";
  }
  if (device.memory_bytes <= 0) {
    problems.push_back({Severity::error, "--memory-gib", "the file states no device memory: give --memory-gib or a --base device"});
    return result;
  }
  const std::string yaml = measured_device_yaml(device, figures.value, written, base_label, command, base_comments);
  // Never write a preset that does not load: whatever slipped past the checks above is named here.
  const Loaded<DeviceSpec> again = load_device_text(yaml, "the preset it would write");
  for (const Problem& p : again.problems) {
    if (p.severity == Severity::error) problems.push_back({Severity::error, f.file, describe(p)});
  }
  if (!has_errors(problems)) result.value = yaml;
  return result;
}

int run_calibrate_from(const CalibrateFromFlags& f) {
  if (const auto why = why_unreadable(f.file)) {
    report({{Severity::error, "--from", f.file + ": " + *why}});
    return exit_bad_input;
  }
  std::ifstream in(f.file, std::ios::binary);
  if (!in) {
    report({{Severity::error, "--from", "cannot read '" + f.file + "'"}});
    return exit_bad_input;
  }
  std::stringstream text;
  text << in.rdbuf();
  if (f.nccl_tests) return cluster_from(f, text.str());
  if (!f.collective.empty()) {
    report({{Severity::error, "--collective", "only with --nccl-tests"}});
    return exit_bad_input;
  }
  return device_from(f, text.str());
}

}  // namespace meshplan::cli
