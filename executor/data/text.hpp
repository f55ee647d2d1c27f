// Byte-level text for next-token training: the vocabulary is the 256 byte
// values, so any file works (UTF-8, code, logs) with no tokenizer to ship or
// version. A folder is read as every regular file directly inside it, in
// byte order of their names, concatenated with nothing in between, so the
// corpus is the same on every machine.
//
// The corpus is split by position: the last `validation_fraction` of the
// bytes (10% by default) is validation, the rest train; no window crosses
// the boundary. A sample is a window of T + 1 consecutive bytes starting at
// a uniformly random offset within the split: inputs are its first T bytes,
// targets its last T (inputs shifted by one). Window starts come from
// std::mt19937_64 seeded with derive_seed(seed, epoch); restoring a state
// replays `position` draws of that epoch, so a checkpoint needs no RNG state.
//
// defines: text_vocab, read_text_corpus, TextSplitRange, text_split_range, TextLoader
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "executor/data/loader.hpp"

namespace meshplan::data {

inline constexpr double default_validation_fraction = 0.1;

// Tokens are bytes: a model trained on text needs at least this vocabulary.
inline constexpr std::int64_t text_vocab = 256;

// The bytes of a file, or of every regular file in a folder (sorted by name).
// Problems name `path`: missing, unreadable, a folder with no regular files.
// An empty result is not a problem here; make_loader reports it.
Loaded<std::vector<std::uint8_t>> read_text_corpus(const std::string& path);

// The files read_text_corpus reads, in its order, and their bytes, with the
// same problems (and a corpus past 4 GiB, refused before reading): what the
// checks before a run need, without reading the corpus.
struct TextCorpusFiles {
  std::vector<std::string> files;
  std::int64_t bytes = 0;
};
Loaded<TextCorpusFiles> text_corpus_files(const std::string& path);

// Byte range [begin, end) of `split` in a corpus of `total_bytes`.
struct TextSplitRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
};
TextSplitRange text_split_range(std::int64_t total_bytes, Split split,
                                double validation_fraction = default_validation_fraction);

class TextLoader final : public DataLoader {
 public:
  // `range` must hold at least sequence_length + 1 bytes of `corpus`.
  TextLoader(std::vector<std::uint8_t> corpus, TextSplitRange range, std::int64_t sequence_length,
             std::uint64_t seed);

  Batch next_batch(std::int64_t samples) override;
  std::int64_t epoch() const override { return epoch_; }
  std::int64_t samples_per_epoch() const override;
  BatchShape shape() const override;
  LoaderState state() const override { return {seed_, epoch_, position_}; }
  Problems restore(const LoaderState& state) override;

  const TextSplitRange& range() const { return range_; }

 private:
  void start_epoch(std::int64_t epoch);
  std::int64_t draw_window_start();

  std::vector<std::uint8_t> corpus_;
  TextSplitRange range_;
  std::int64_t sequence_length_;
  std::uint64_t seed_;
  std::int64_t epoch_ = 0;
  std::int64_t position_ = 0;
  std::mt19937_64 engine_;
};

}  // namespace meshplan::data
