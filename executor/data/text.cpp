#include "executor/data/text.hpp"

#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>

#include "executor/data/random.hpp"

namespace meshplan::data {
namespace {

namespace fs = std::filesystem;

// Appends the bytes of `path` to `out`, reserved to its size first (growing by doubling held 2.4x
// the corpus); false if it cannot be read.
bool append_file(const fs::path& path, std::vector<std::uint8_t>& out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::error_code error;
  const auto size = fs::file_size(path, error);
  if (!error) out.reserve(out.size() + size);
  char buffer[1 << 16];
  while (in.read(buffer, sizeof buffer) || in.gcount() > 0) {
    out.insert(out.end(), reinterpret_cast<const std::uint8_t*>(buffer),
               reinterpret_cast<const std::uint8_t*>(buffer) + in.gcount());
    if (!in) break;
  }
  return !in.bad();
}

// The byte-level loader keeps its corpus in memory, on every rank: at most this much.
constexpr std::uintmax_t kMaxCorpusBytes = std::uintmax_t{4} << 30;

std::optional<Problem> too_large(const std::string& path, std::uintmax_t bytes) {
  if (bytes <= kMaxCorpusBytes) return std::nullopt;
  char text[200];
  std::snprintf(text, sizeof text,
                "holds %.1f GiB; the byte-level text loader keeps the corpus in memory on every rank: at most 4 GiB",
                static_cast<double>(bytes) / (1024.0 * 1024 * 1024));
  return Problem{Severity::error, path, text};
}

}  // namespace

Loaded<TextCorpusFiles> text_corpus_files(const std::string& path) {
  Loaded<TextCorpusFiles> result;
  std::error_code error;
  const fs::file_status status = fs::status(path, error);
  if (error || !fs::exists(status)) {
    result.problems.push_back({Severity::error, path, "no such file or folder"});
    return result;
  }
  std::vector<fs::path> files;
  if (fs::is_regular_file(status)) {
    files.push_back(path);
  } else if (!fs::is_directory(status)) {
    result.problems.push_back({Severity::error, path, "neither a regular file nor a folder"});
    return result;
  } else {
    for (fs::directory_iterator it(path, error), end; !error && it != end; it.increment(error)) {
      std::error_code kind_error;
      if (it->is_regular_file(kind_error)) files.push_back(it->path());
    }
    if (error) {
      result.problems.push_back({Severity::error, path, "cannot list folder: " + error.message()});
      return result;
    }
    if (files.empty()) {
      result.problems.push_back({Severity::error, path, "folder holds no regular files"});
      return result;
    }
    std::sort(files.begin(), files.end(),
              [](const fs::path& a, const fs::path& b) { return a.filename().string() < b.filename().string(); });
  }
  std::uintmax_t total = 0;
  for (const fs::path& file : files) {
    std::error_code size_error;
    const auto size = fs::file_size(file, size_error);
    if (!size_error) total += size;
    if (::access(file.c_str(), R_OK) != 0) result.problems.push_back({Severity::error, file.string(), "cannot read file"});
    result.value.files.push_back(file.string());
  }
  if (const auto large = too_large(path, total)) result.problems.push_back(*large);
  if (!result.problems.empty()) return result;
  result.value.bytes = static_cast<std::int64_t>(total);
  return result;
}

Loaded<std::vector<std::uint8_t>> read_text_corpus(const std::string& path) {
  Loaded<std::vector<std::uint8_t>> result;
  const Loaded<TextCorpusFiles> files = text_corpus_files(path);
  if (!files.ok()) {
    result.problems = files.problems;
    return result;
  }
  result.value.reserve(static_cast<std::size_t>(files.value.bytes));
  for (const std::string& file : files.value.files) {
    if (!append_file(file, result.value)) {
      result.problems.push_back({Severity::error, file, "cannot read file"});
    }
  }
  return result;
}

TextSplitRange text_split_range(std::int64_t total_bytes, Split split, double validation_fraction) {
  const auto validation_bytes = static_cast<std::int64_t>(static_cast<double>(total_bytes) * validation_fraction);
  const std::int64_t boundary = total_bytes - std::clamp<std::int64_t>(validation_bytes, 0, total_bytes);
  return split == Split::train ? TextSplitRange{0, boundary} : TextSplitRange{boundary, total_bytes};
}

TextLoader::TextLoader(std::vector<std::uint8_t> corpus, TextSplitRange range, std::int64_t sequence_length,
                       std::uint64_t seed)
    : corpus_(std::move(corpus)), range_(range), sequence_length_(sequence_length), seed_(seed) {
  assert(sequence_length_ > 0);
  assert(0 <= range_.begin && range_.end <= std::ssize(corpus_));
  assert(range_.end - range_.begin >= sequence_length_ + 1);
  start_epoch(0);
}

std::int64_t TextLoader::samples_per_epoch() const {
  return std::max<std::int64_t>(1, (range_.end - range_.begin) / sequence_length_);
}

BatchShape TextLoader::shape() const { return {sequence_length_, sequence_length_, 0, text_vocab}; }

void TextLoader::start_epoch(std::int64_t epoch) {
  epoch_ = epoch;
  position_ = 0;
  engine_.seed(derive_seed(seed_, static_cast<std::uint64_t>(epoch)));
}

std::int64_t TextLoader::draw_window_start() {
  // A window of T + 1 bytes may start anywhere in [begin, end - T - 1].
  const auto starts = static_cast<std::uint64_t>(range_.end - range_.begin - sequence_length_);
  return range_.begin + static_cast<std::int64_t>(uniform_below(engine_, starts));
}

Batch TextLoader::next_batch(std::int64_t samples) {
  Batch batch;
  batch.samples = std::max<std::int64_t>(samples, 0);
  const auto width = static_cast<std::size_t>(sequence_length_);
  batch.inputs.reserve(static_cast<std::size_t>(batch.samples) * width);
  batch.targets.reserve(static_cast<std::size_t>(batch.samples) * width);
  for (std::int64_t s = 0; s < batch.samples; ++s) {
    const auto window = corpus_.begin() + static_cast<std::ptrdiff_t>(draw_window_start());
    for (std::size_t t = 0; t < width; ++t) {
      batch.inputs.push_back(static_cast<float>(window[static_cast<std::ptrdiff_t>(t)]));
      batch.targets.push_back(window[static_cast<std::ptrdiff_t>(t + 1)]);
    }
    if (++position_ == samples_per_epoch()) start_epoch(epoch_ + 1);
  }
  return batch;
}

Problems TextLoader::restore(const LoaderState& state) {
  Problems problems = check_loader_state(state, seed_, samples_per_epoch());
  if (has_errors(problems)) return problems;
  start_epoch(state.epoch);
  for (std::int64_t i = 0; i < state.position; ++i) draw_window_start();
  position_ = state.position;
  return problems;
}

}  // namespace meshplan::data
