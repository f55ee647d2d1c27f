// IDX files (the format of MNIST and Fashion-MNIST; LeCun et al.,
// http://yann.lecun.com/exdb/mnist/ "FILE FORMATS"), read straight from the
// .gz that Debian's dataset-fashion-mnist ships: no conversion step, no
// second copy on disk. zlib's gzread also reads uncompressed files, so an
// unpacked copy works too.
//
// Layout: a 4-byte big-endian magic 0x0000TTDD (TT = 0x08 for unsigned
// bytes, DD = number of dimensions), DD big-endian uint32 sizes, then the
// payload in row-major order. Only unsigned-byte files are supported
// (0x00000801 labels, 0x00000803 images), which is all (Fashion-)MNIST uses.
//
// defines: IdxArray, read_idx_file
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/problem.hpp"

namespace meshplan::data {

struct IdxArray {
  std::vector<std::int64_t> dimensions;  // e.g. {60000, 28, 28} for images, {60000} for labels
  std::vector<std::uint8_t> values;      // product(dimensions) bytes, row-major
};

// Reads `path` and checks the magic is 0x00000800 | expected_dimensions, that
// every size is positive, and that the payload holds exactly the product of
// the sizes in bytes (no more, no less). Every problem names `path`.
Loaded<IdxArray> read_idx_file(const std::string& path, int expected_dimensions);

}  // namespace meshplan::data
