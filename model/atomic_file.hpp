// Writing a file so that readers see the old file or the whole new one,
// never half of one: write a temporary next to it, flush, fsync, rename.
// Plan files, traces and checkpoints all go through here. And why a path
// given as an input file cannot be read, in the words every reader uses.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>

#include "model/problem.hpp"

namespace meshplan {

// `write` fills the stream; problems name `path` (cannot open, write failed, rename failed).
// A device or pipe is written in place (special_file); a link's target is written.
Problems write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write);

// Whether `path` (its link's target) exists and is neither a regular file
// nor a folder: a device (/dev/null) or a pipe, which outputs write in place.
bool special_file(const std::string& path);

// Why `path` cannot be read as an input file ("no such file", "is a folder,
// not a file", "is a device or a socket, not a file", "cannot be read
// (permissions?)"), or nullopt when it can. Pipes are readable (`--plan <(...)`).
std::optional<std::string> why_unreadable(const std::string& path);

}  // namespace meshplan
