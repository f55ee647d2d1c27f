// meshplan-commbench-nccl: `meshplan commbench --backend nccl`
// (commbench_command.cpp, commbench_nccl.hpp), a program of its own so that
// `meshplan` does not load the CUDA runtime and NCCL for every command.
// `meshplan commbench --backend nccl ...` runs it (exec, keeping the MPI
// launcher's environment) as `meshplan-commbench-nccl commbench --backend nccl ...`.
#include <CLI/CLI.hpp>

#include "cli/commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"Time the NCCL communicator's collectives on GPU buffers (run by `meshplan commbench --backend nccl`)",
               "meshplan-commbench-nccl"};
  const meshplan::cli::Command commbench = meshplan::cli::add_commbench_command(app);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : meshplan::cli::exit_bad_input;
  }
  return commbench();
}
