// meshplan-calibrate-cuda: the measuring half of `meshplan calibrate
// --backend cuda` (calibrate_cuda.hpp), a program of its own so that
// `meshplan` does not load the CUDA runtime and cuBLASLt for every command.
// `meshplan calibrate --backend cuda ...` runs it (exec) with these flags.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/calibrate_cuda.hpp"
#include "cli/commands.hpp"

int main(int argc, char** argv) {
  meshplan::cli::CalibrateCudaFlags flags;
  CLI::App app{"Measure one GPU with meshplan's CUDA kernels and write a device preset (run by `meshplan calibrate --backend cuda`)",
               "meshplan-calibrate-cuda"};
  app.add_option("--device", flags.device, "CUDA device to measure");
  app.add_flag("--quick", flags.quick, "Fewer shapes");
  app.add_option("--out", flags.out, "Presets folder");
  app.add_option("--name", flags.name, "Name of the written preset");
  app.add_option("--base", flags.base, "Device preset for the figures a measurement does not give");
  app.add_option("--jsonl", flags.jsonl, "Where the measured rows go");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : meshplan::cli::exit_bad_input;
  }
  return meshplan::cli::run_calibrate_cuda(flags);
}
