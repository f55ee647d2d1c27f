#include "model/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace meshplan {

Problems write_file_atomically(const std::string& path, const std::function<void(std::ostream&)>& write) {
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

}  // namespace meshplan
