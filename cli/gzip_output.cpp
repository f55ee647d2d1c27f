// gzip output through zlib's gzFile (gzip_output.hpp).
#include "cli/gzip_output.hpp"

#include <algorithm>
#include <climits>

namespace meshplan::cli {

GzipOutputFile::GzipOutputFile(const std::string& path) : std::ostream(&buffer_) {
  buffer_.file = gzopen(path.c_str(), "wb");  // zlib's default level (6)
  if (!buffer_.file) setstate(std::ios::badbit);
}

GzipOutputFile::~GzipOutputFile() { close(); }

bool GzipOutputFile::close() {
  if (!buffer_.file) return false;
  const int status = gzclose(buffer_.file);
  buffer_.file = nullptr;
  if (status != Z_OK) setstate(std::ios::badbit);
  return status == Z_OK && good();
}

GzipOutputFile::Buffer::int_type GzipOutputFile::Buffer::overflow(int_type c) {
  if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
  if (!file || gzputc(file, traits_type::to_int_type(traits_type::to_char_type(c))) < 0) return traits_type::eof();
  return c;
}

std::streamsize GzipOutputFile::Buffer::xsputn(const char* data, std::streamsize size) {
  if (!file) return 0;
  std::streamsize done = 0;
  while (done < size) {  // gzwrite takes an unsigned length: write in chunks
    const auto chunk = static_cast<unsigned>(std::min<std::streamsize>(size - done, INT_MAX / 2));
    const int written = gzwrite(file, data + done, chunk);
    if (written <= 0) break;
    done += written;
  }
  return done;
}

}  // namespace meshplan::cli
