// `meshplan calibrate --backend cuda` (calibrate_cuda.hpp): checks that there
// is a GPU and a base preset before measuring, measures, keeps the rows,
// and writes the preset through calibrate --from's derivation.
#include "cli/calibrate_cuda.hpp"

#include <filesystem>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "cli/calibrate_from.hpp"
#include "cli/commands.hpp"
#include "cli/sibling_program.hpp"
#include "model/atomic_file.hpp"
#include "model/device_spec.hpp"
#include "model/presets.hpp"

#if defined(MESHPLAN_HAVE_CUDA_CALIBRATE)
#include "executor/backend/cuda_backend.hpp"
#include "executor/calibrate/cuda_measure.hpp"
#include "executor/calibrate/measurement_rows.hpp"
#include "kernels/cuda/cuda_check.hpp"
#endif

namespace meshplan::cli {
namespace {
namespace fs = std::filesystem;

// What to do instead, for every way of not measuring here.
constexpr const char* kAlternative =
    "measure the GPU with PyTorch instead (python3 scripts/gpu/measure_device.py OUT.jsonl, on the GPU's machine) "
    "and write the preset with `meshplan calibrate --from OUT.jsonl --base DEVICE` (docs/presets.md, "
    "\"Calibrating from measurements made elsewhere\")";

int cannot_measure(const std::string& why) {
  std::cerr << "meshplan calibrate: --backend cuda: " << why << "; nothing was measured. Alternatively, " << kAlternative
            << "\n";
  return exit_bad_input;
}

}  // namespace

#if !defined(MESHPLAN_HAVE_CUDA_CALIBRATE)

// `meshplan` itself: the measuring program is a separate executable beside
// it (MESHPLAN_CUDA_CALIBRATE_PROGRAM), so that every other command does not
// load the CUDA runtime and cuBLASLt (0.17 s and 210 MB per start).
int run_calibrate_cuda(const CalibrateCudaFlags& f) {
#if defined(MESHPLAN_CUDA_CALIBRATE_PROGRAM)
  std::vector<std::string> args = {"--device", std::to_string(f.device)};
  if (f.quick) args.emplace_back("--quick");
  for (const auto& [flag, value] : {std::pair<const char*, const std::string*>{"--out", &f.out}, {"--name", &f.name},
                                    {"--base", &f.base}, {"--jsonl", &f.jsonl}}) {
    if (!value->empty()) {
      args.emplace_back(flag);
      args.push_back(*value);
    }
  }
  return cannot_measure(exec_beside_meshplan(MESHPLAN_CUDA_CALIBRATE_PROGRAM, args));
#else
  (void)f;
  return cannot_measure("this meshplan was built without CUDA (MESHPLAN_CUDA=OFF, or CMake found no CUDA toolkit)");
#endif
}

#else

namespace {

void report(const Problems& problems) {
  for (const auto& p : problems) std::cerr << "meshplan calibrate: " << describe(p) << "\n";
}

std::string command_of(const CalibrateCudaFlags& f, const std::string& base) {
  std::string c = "meshplan calibrate --backend cuda --device " + std::to_string(f.device) + (f.quick ? " --quick" : "");
  if (!f.name.empty()) c += " --name " + f.name;
  return c + " --base " + base;
}

}  // namespace

int run_calibrate_cuda(const CalibrateCudaFlags& f) {
  const int count = exec::CudaBackend::device_count();
  if (count == 0) {
    const std::string problem = kernels::cuda::cuda_device_problem();
    return cannot_measure("no usable CUDA device on this machine (" + (problem.empty() ? std::string("none found") : problem) + ")");
  }
  if (f.device < 0 || f.device >= count) {
    report({{Severity::error, "--device", std::to_string(f.device) + " is not a CUDA device here (0 to " +
                                              std::to_string(count - 1) + ")"}});
    return exit_bad_input;
  }
  exec::CudaDeviceInfo info;
  try {
    info = exec::probe_cuda_device(f.device);
  } catch (const std::exception& e) {
    return cannot_measure(e.what());
  }
  // The datasheet figures the rows cannot measure: --base, else the preset for this GPU's name.
  const std::string base = !f.base.empty() ? f.base : exec::base_preset_for_gpu(info.name, info.memory_bytes);
  if (base.empty()) {
    report({{Severity::error, "--base",
             "no built-in preset is known for '" + info.name +
                 "': name the device preset whose dense peaks and memory bandwidth it has (--base NAME or FILE)"}});
    return exit_bad_input;
  }
  if (const auto loaded = load_device(base); has_errors(loaded.problems)) {
    report(loaded.problems);
    return exit_bad_input;
  }
  const std::string name = f.name.empty() ? kDefaultCudaPresetName : f.name;
  const fs::path out = f.out.empty() ? fs::path(user_presets_dir()) : fs::path(f.out);
  if (out.empty()) {
    report({{Severity::error, "--out", "no user presets folder: set MESHPLAN_USER_PRESETS, XDG_CONFIG_HOME or HOME, or give --out DIR"}});
    return exit_bad_input;
  }
  const fs::path preset_path = out / "devices" / (name + ".yaml");
  const fs::path jsonl_path = !f.jsonl.empty() ? fs::path(f.jsonl) : out / "measured" / (name + ".jsonl");
  for (const fs::path& folder : {preset_path.parent_path(), jsonl_path.parent_path()}) {
    std::error_code ec;
    if (!folder.empty()) fs::create_directories(folder, ec);
    if (ec) {
      report({{Severity::error, "--out", "cannot create the folder '" + folder.string() + "': " + ec.message()}});
      return exit_bad_input;
    }
  }

  std::cerr << "calibrate: measuring " << info.name << " (cuda:" << f.device << ")" << (f.quick ? ", quick" : "")
            << " with meshplan's CUDA kernels; base preset " << base << std::endl;
  exec::CudaMeasureOptions options;
  options.device = f.device;
  options.quick = f.quick;
  options.say = [](const std::string& line) { std::cerr << "calibrate: " << line << std::endl; };
  exec::CudaMeasurement measured;
  try {
    measured = exec::measure_cuda_device(options);
  } catch (const std::exception& e) {
    report({{Severity::error, "cuda:" + std::to_string(f.device), std::string("measuring failed: ") + e.what()}});
    return exit_bad_input;
  }
  for (const auto& note : measured.notes) std::cerr << "calibrate: note: " << note << "\n";
  const std::string text = exec::to_jsonl(measured.rows);
  if (Problems problems = write_file_atomically(jsonl_path.string(), [&](std::ostream& o) { o << text; });
      has_errors(problems)) {
    report(problems);
    return exit_bad_input;
  }
  std::cerr << "calibrate: wrote the measurements to " << jsonl_path.string() << " (" << measured.rows.size()
            << " rows; `meshplan calibrate --from` reads them)\n";

  CalibrateFromFlags from;
  from.file = jsonl_path.string();
  from.name = name;
  from.base = base;
  const Loaded<std::string> yaml = device_preset_yaml(from, text, command_of(f, base));
  report(yaml.problems);
  if (has_errors(yaml.problems)) return exit_bad_input;
  if (Problems problems = write_file_atomically(preset_path.string(), [&](std::ostream& o) { o << yaml.value; });
      has_errors(problems)) {
    report(problems);
    return exit_bad_input;
  }
  std::cout << yaml.value;
  std::cerr << "calibrate: wrote " << preset_path.string() << " (the device preset " << name << ")\n";
  return exit_ok;
}

#endif

}  // namespace meshplan::cli
