// meshplan-train-cuda: `meshplan train --backend cuda` (train_command.cpp,
// train_cuda.hpp), a program of its own so that `meshplan` does not load
// the CUDA runtime and cuBLASLt for every command. `meshplan train
// --backend cuda ...` runs it (exec, keeping the MPI launcher's environment
// and the OpenMP settings) with the same arguments.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Train a plan on a GPU (run by `meshplan train --backend cuda`)", "meshplan-train-cuda"};
  const meshplan::cli::Command train = meshplan::cli::add_train_command(app);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : meshplan::cli::exit_bad_input;
  }
  return train();
}
