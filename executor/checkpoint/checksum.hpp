// Checksums for checkpoint files. CRC-32 as zlib computes it (the gzip/PNG
// polynomial, ISO 3309): zlib is already a dependency of the executor (the
// Fashion-MNIST reader), its crc32 is fast and well tested, and any tool can
// check a file by hand (`python3 -c "import zlib; print(hex(zlib.crc32(open(f,'rb').read())))"`).
// A CRC catches the damage that matters here (flipped bits, torn or truncated
// writes); it is not a defence against deliberate tampering.
//
// The text form names its algorithm ("crc32:0a1b2c3d", 8 lower-case hex
// digits), so a later manifest version can change it without ambiguity.
//
// defines: crc32_of, checksum_text
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace meshplan::exec {

std::uint32_t crc32_of(std::span<const std::byte> bytes);

// "crc32:" followed by crc32_of(bytes) as 8 lower-case hex digits.
std::string checksum_text(std::span<const std::byte> bytes);

}  // namespace meshplan::exec
