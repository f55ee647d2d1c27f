#include "executor/data/idx_file.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <limits>
#include <memory>
#include <type_traits>
#include <utility>

namespace meshplan::data {
namespace {

// Refuse headers that claim more than this; a corrupt size must not allocate terabytes.
constexpr std::int64_t max_payload_bytes = std::int64_t{1} << 34;

struct GzCloser {
  void operator()(gzFile file) const { gzclose(file); }
};
using GzHandle = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

std::string hex32(std::uint32_t value) {
  std::array<char, 11> text{};
  std::snprintf(text.data(), text.size(), "0x%08x", value);
  return text.data();
}

// Reads exactly `bytes` bytes; returns how many were read (fewer at end of file), or -1 on a zlib error.
std::int64_t read_fully(gzFile file, std::uint8_t* out, std::int64_t bytes) {
  std::int64_t done = 0;
  while (done < bytes) {
    const auto chunk = static_cast<unsigned>(std::min<std::int64_t>(bytes - done, 1 << 30));
    const int got = gzread(file, out + done, chunk);
    if (got < 0) return -1;
    if (got == 0) break;
    done += got;
  }
  return done;
}

std::uint32_t big_endian_u32(const std::uint8_t* bytes) {
  return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
         (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
}

}  // namespace

Loaded<IdxArray> read_idx_file(const std::string& path, int expected_dimensions) {
  Loaded<IdxArray> result;
  const auto fail = [&](std::string message) {
    result.value = {};
    result.problems.push_back({Severity::error, path, std::move(message)});
    return std::move(result);
  };

  GzHandle file(gzopen(path.c_str(), "rb"));
  if (!file) return fail("cannot open IDX file (missing or unreadable)");

  std::array<std::uint8_t, 4> word{};
  if (read_fully(file.get(), word.data(), 4) != 4) return fail("not an IDX file: shorter than the 4-byte magic number");
  const std::uint32_t magic = big_endian_u32(word.data());
  const std::uint32_t expected_magic = 0x00000800u | static_cast<std::uint32_t>(expected_dimensions);
  if (magic != expected_magic) {
    return fail("IDX magic number is " + hex32(magic) + ", expected " + hex32(expected_magic) + " (unsigned bytes, " +
                std::to_string(expected_dimensions) + (expected_dimensions == 1 ? " dimension)" : " dimensions)"));
  }

  std::int64_t payload_bytes = 1;
  for (int d = 0; d < expected_dimensions; ++d) {
    if (read_fully(file.get(), word.data(), 4) != 4) {
      return fail("IDX header truncated: missing size of dimension " + std::to_string(d));
    }
    const std::int64_t size = big_endian_u32(word.data());
    if (size == 0) return fail("IDX dimension " + std::to_string(d) + " has size 0");
    result.value.dimensions.push_back(size);
    if (payload_bytes > max_payload_bytes / size) {
      return fail("IDX header claims more than " + std::to_string(max_payload_bytes) + " bytes of data");
    }
    payload_bytes *= size;
  }

  // Grown as the data arrives, not sized from the header: a 133-byte file whose header claimed 10 GB
  // allocated 10 GB before it was found short.
  constexpr std::int64_t chunk_bytes = std::int64_t{1} << 24;
  std::vector<std::uint8_t>& values = result.value.values;
  std::int64_t got = 0;
  while (got < payload_bytes) {
    const std::int64_t want = std::min(chunk_bytes, payload_bytes - got);
    values.resize(static_cast<std::size_t>(got + want));
    const std::int64_t read = read_fully(file.get(), values.data() + got, want);
    if (read < 0) {
      int zlib_error = Z_OK;
      const char* message = gzerror(file.get(), &zlib_error);
      return fail(std::string("cannot decompress IDX file: ") + (message ? message : "zlib error"));
    }
    got += read;
    if (read < want) break;
  }
  values.resize(static_cast<std::size_t>(got));
  if (got != payload_bytes) {
    return fail("IDX data truncated: header promises " + std::to_string(payload_bytes) + " bytes, file holds " +
                std::to_string(got));
  }
  std::uint8_t extra = 0;
  if (read_fully(file.get(), &extra, 1) != 0) {
    return fail("IDX file is longer than its header says (" + std::to_string(payload_bytes) +
                " bytes of data expected)");
  }
  return result;
}

}  // namespace meshplan::data
