// Programs built beside `meshplan` that hold what `meshplan` itself must not
// load at every start (the CUDA runtime, cuBLASLt, NCCL: 0.17 s and 210 MB):
// meshplan-calibrate-cuda and meshplan-commbench-nccl. A command that needs
// one replaces this process with it (exec), so its output and exit status
// are the command's.
//
// defines: exec_beside_meshplan
#pragma once

#include <string>
#include <vector>

namespace meshplan::cli {

// Runs `program` from the folder this executable is in with `args` (its
// argv[1..]) in place of this process. Returns only when it could not: why
// ("its program X is not beside this meshplan (...)", "could not start ...").
std::string exec_beside_meshplan(const std::string& program, const std::vector<std::string>& args);

}  // namespace meshplan::cli
