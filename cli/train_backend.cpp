// choose_backend and nvidia_gpu_visible (train_backend.hpp).
#include "cli/train_backend.hpp"

#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <system_error>

namespace meshplan::cli {

BackendChoice choose_backend(const std::string& requested, const PlanFile& plan_file,
                             const std::function<std::optional<std::string>()>& gpu_cannot_run) {
  if (requested != "auto") return {requested, ""};
  const DeviceSpec& device = plan_file.cluster.device;
  if (device.kind != DeviceKind::nvidia_gpu) return {"cpu", ""};
  if (plan_file.model.kind != ModelKind::transformer)
    return cpu_instead(plan_file, "its " + to_string(plan_file.model.kind) + " trains on the CPU only (GPUs train transformers)");
  if (const std::optional<std::string> why = gpu_cannot_run()) return cpu_instead(plan_file, *why);
  return {"cuda", ""};
}

BackendChoice cpu_instead(const PlanFile& plan_file, const std::string& why) {
  return {"cpu", "the plan was made for " + plan_file.cluster.device.name + ", an NVIDIA GPU, but " + why +
                     "; training on this machine's cores instead (--backend cpu picks them without this note)"};
}

std::optional<std::string> nvidia_gpu_visible() {
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const std::string v = visible;
    if (v.empty() || v.starts_with("-1") || v == "NoDevFiles") return "CUDA_VISIBLE_DEVICES='" + v + "' hides every GPU";
  }
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path driver_list = "/proc/driver/nvidia/gpus";
  if (fs::is_directory(driver_list, ec) && !fs::is_empty(driver_list, ec)) return std::nullopt;
  for (const auto& entry : fs::directory_iterator("/dev", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() > 6 && name.starts_with("nvidia") && std::isdigit(static_cast<unsigned char>(name[6])))
      return std::nullopt;
  }
  return std::string("no NVIDIA GPU is visible here (no /proc/driver/nvidia/gpus, no /dev/nvidiaN)");
}

}  // namespace meshplan::cli
