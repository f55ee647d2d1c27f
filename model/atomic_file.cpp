#include "model/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace meshplan {

Problems write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::error_code ec;
  if (path.empty()) return {{Severity::error, "(empty path)", "give a file name to write"}};
  if (std::filesystem::is_directory(path, ec)) return {{Severity::error, path, "is a folder; give a file name in it"}};
  if (special_file(path)) {
    // A device (/dev/null, /dev/stdout) or a pipe: written in place. Renaming a temporary over it
    // replaced /dev/null itself with a regular file, as root.
    std::ofstream out(path, std::ios::binary);
    if (!out) return {{Severity::error, path, "cannot open it for writing"}};
    write(out);
    out.flush();
    if (!out) return {{Severity::error, path, "write failed (disk full?)"}};
    return {};
  }
  if (std::filesystem::is_symlink(std::filesystem::symlink_status(path, ec))) {
    // The link's target is written, not the link (a rename over the link made it a plain file), also
    // when the target does not exist yet; a chain of links is followed, a loop refused.
    std::filesystem::path target = path;
    for (int hops = 0; std::filesystem::is_symlink(std::filesystem::symlink_status(target, ec)); ++hops) {
      if (hops == 40) return {{Severity::error, path, "is a loop of symbolic links; give a file name"}};
      const std::filesystem::path next = std::filesystem::read_symlink(target, ec);
      if (ec) return {{Severity::error, path, "cannot read the symbolic link: " + ec.message()}};
      target = next.is_absolute() ? next : target.parent_path() / next;
    }
    return write_file_atomically(target.string(), write);
  }
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) return {{Severity::error, path, "cannot open '" + temporary + "' for writing"}};
    write(out);
    out.flush();
    if (!out) return {{Severity::error, path, "write failed (disk full?)"}};
  }
  // The data must be on disk before the rename makes it visible.
  if (const int fd = ::open(temporary.c_str(), O_RDONLY); fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) {
    std::filesystem::remove(temporary, error);
    return {{Severity::error, path, "cannot rename '" + temporary + "' into place"}};
  }
  return {};
}

bool special_file(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);  // follows a symbolic link
  return std::filesystem::exists(status) && !std::filesystem::is_regular_file(status) &&
         !std::filesystem::is_directory(status);
}

std::optional<std::string> why_unreadable(const std::string& path) {
  std::error_code ec;
  if (path.empty()) return "no file name given";
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) return "no such file";
  if (std::filesystem::is_directory(status)) return "is a folder, not a file";
  if (std::filesystem::is_character_file(status) || std::filesystem::is_block_file(status) ||
      std::filesystem::is_socket(status)) {
    return "is a device or a socket, not a file";  // /dev/zero was read until memory ran out
  }
  if (::access(path.c_str(), R_OK) != 0) return "cannot be read (permissions?)";
  return std::nullopt;
}

}  // namespace meshplan
