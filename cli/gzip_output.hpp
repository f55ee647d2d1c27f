// An std::ostream that writes a gzip file (RFC 1952) through zlib, for
// `meshplan sweep --out sweep.csv.gz`: most of a sweep is repetitive text
// (model names, meshes, rejection reasons), which deflate shrinks about
// tenfold (docs/formats.md, "Sweeps").
//
// Why an ostream: the row writer writes to a std::ostream; stdout, a plain
// file and a gzip file are then the same to it. zlib's gzFile (gzopen,
// gzwrite, gzclose; zlib.h) does the framing: the header, deflate, and the
// trailer with the CRC-32 and length of the data. The trailer is written by
// close(), which the destructor also calls, so a sweep stopped by Ctrl-C,
// which returns normally, still leaves a complete gzip file. A process
// killed outright (a second Ctrl-C) leaves a truncated one.
//
// defines: GzipOutputFile
#pragma once

#include <zlib.h>

#include <ostream>
#include <streambuf>
#include <string>

namespace meshplan::cli {

class GzipOutputFile : public std::ostream {
 public:
  // Creates or truncates `path`; check is_open().
  explicit GzipOutputFile(const std::string& path);
  ~GzipOutputFile() override;
  GzipOutputFile(const GzipOutputFile&) = delete;
  GzipOutputFile& operator=(const GzipOutputFile&) = delete;

  bool is_open() const { return buffer_.file != nullptr; }
  // Compresses what is left and writes the trailer; false (and badbit set)
  // when zlib reported an error, now or in an earlier write.
  bool close();

 private:
  // Hands every write to gzwrite, which buffers and compresses.
  struct Buffer : std::streambuf {
    gzFile file = nullptr;
    int_type overflow(int_type c) override;
    std::streamsize xsputn(const char* data, std::streamsize size) override;
  };
  Buffer buffer_;
};

}  // namespace meshplan::cli
