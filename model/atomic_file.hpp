// Writing a file so that readers see the old file or the whole new one,
// never half of one: write a temporary next to it, flush, fsync, rename.
// Plan files, traces and checkpoints all go through here.
#pragma once

#include <functional>
#include <ostream>
#include <string>

#include "model/problem.hpp"

namespace meshplan {

// `write` fills the stream; problems name `path` (cannot open, write failed, rename failed).
Problems write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

}  // namespace meshplan
