// Fuzz target: a checkpoint's manifest.json as `meshplan train --resume`
// reads it. load_checkpoint takes a directory, so each input is written as
// the manifest of a scratch checkpoint (in /dev/shm when there is one),
// sealed by a COMPLETE marker that records the input's checksum (so the
// manifest is read in full; an unsealed one is refused), in a folder not named
// step-NNNNNN (so any step is read), with one 16-byte tensor file `w.f32`
// (4 floats 1, 2, 3, 4: crc32: 8ba71454) for manifests to refer to. Rejected
// manifests must name a file of the checkpoint directory; an accepted one
// must hold tensors whose sizes match their shapes.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>

#include "executor/checkpoint/checkpoint.hpp"
#include "executor/checkpoint/checksum.hpp"
#include "fuzz/fuzz_common.hpp"

namespace {

std::filesystem::path checkpoint_dir;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root = fs::is_directory("/dev/shm", error) ? fs::path("/dev/shm") : fs::temp_directory_path();
  checkpoint_dir = root / ("meshplan-fuzz-checkpoint-" + std::to_string(::getpid())) / "checkpoint";
  fs::create_directories(checkpoint_dir);
  const float values[4] = {1, 2, 3, 4};
  std::ofstream(checkpoint_dir / "w.f32", std::ios::binary).write(reinterpret_cast<const char*>(values), sizeof values);
  std::atexit([] {
    std::error_code ignored;
    std::filesystem::remove_all(checkpoint_dir.parent_path(), ignored);
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  {
    std::ofstream manifest(checkpoint_dir / "manifest.json", std::ios::binary | std::ios::trunc);
    manifest.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  std::ofstream(checkpoint_dir / "COMPLETE", std::ios::trunc)
      << "manifest " << exec::checksum_text(std::as_bytes(std::span(data, size))) << "\n";
  const auto loaded = exec::load_checkpoint(checkpoint_dir.string());
  fuzz::check_loaded(loaded, checkpoint_dir.string());
  if (!loaded.ok()) return 0;
  for (const auto& tensor : loaded.value.tensors) {
    std::int64_t count = 1;
    for (const auto extent : tensor.shape) count *= extent;
    fuzz::require(count == static_cast<std::int64_t>(tensor.data.size()), "tensor data matches its shape");
  }
  return 0;
}
