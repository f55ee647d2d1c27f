// zlib's crc32 over a byte span, in chunks because zlib takes a uInt length.
#include "executor/checkpoint/checksum.hpp"

#include <zlib.h>

#include <algorithm>
#include <cstdio>

namespace meshplan::exec {

std::uint32_t crc32_of(std::span<const std::byte> bytes) {
  constexpr std::size_t chunk_bytes = std::size_t{1} << 30;
  uLong crc = ::crc32(0L, Z_NULL, 0);
  for (std::size_t offset = 0; offset < bytes.size(); offset += chunk_bytes) {
    const std::size_t length = std::min(chunk_bytes, bytes.size() - offset);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + offset), static_cast<uInt>(length));
  }
  return static_cast<std::uint32_t>(crc);
}

std::string checksum_text(std::span<const std::byte> bytes) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", static_cast<unsigned>(crc32_of(bytes)));
  return std::string("crc32:") + text;
}

}  // namespace meshplan::exec
