// make_loader: `--data` spec parsing, and the checks shared by every loader
// and by check_data_spec, which runs them without loading the data.
#include "executor/data/loader.hpp"

#include <fstream>
#include <initializer_list>
#include <utility>

#include "executor/data/fashion_mnist.hpp"
#include "executor/data/in_memory.hpp"
#include "executor/data/synthetic.hpp"
#include "executor/data/text.hpp"

namespace meshplan::data {
namespace {

constexpr const char* spec_flag = "--data";
constexpr const char* allowed_specs = "allowed: fashion-mnist, fashion-mnist:DIR, text:PATH, synthetic-text, synthetic";

Problem spec_error(std::string message) { return {Severity::error, spec_flag, std::move(message)}; }

// A `--data` spec split at its first ':' into a kind and an argument.
struct DataSpec {
  std::string kind;
  std::string argument;
  bool has_argument = false;
  std::string fashion_mnist_directory() const {
    return has_argument ? argument : std::string(default_fashion_mnist_directory);
  }
};

// The spec's own problems (an unknown kind, a missing or superfluous argument), before any file is read.
Loaded<DataSpec> parse_spec(const std::string& spec) {
  Loaded<DataSpec> result;
  DataSpec& s = result.value;
  const std::size_t colon = spec.find(':');
  s.kind = data_kind(spec);
  s.has_argument = colon != std::string::npos;
  s.argument = s.has_argument ? spec.substr(colon + 1) : std::string();
  if (s.kind == "fashion-mnist") {
    if (s.has_argument && s.argument.empty())
      result.problems.push_back(spec_error("'" + spec + "' names no directory after ':'"));
  } else if (s.kind == "text") {
    if (s.argument.empty()) result.problems.push_back(spec_error("'" + spec + "' names no file or folder: use text:PATH"));
  } else if (s.kind == "synthetic" || s.kind == synthetic_text_spec) {
    if (s.has_argument) result.problems.push_back(spec_error("'" + spec + "': " + s.kind + " takes no argument"));
  } else {
    result.problems.push_back(spec_error("unknown data kind '" + s.kind + "' in '" + spec + "' (" + allowed_specs + ")"));
  }
  return result;
}

// A text corpus of `bytes` bytes at `path`: not empty, and each of `splits` holds one window of T + 1 bytes.
Problems text_corpus_problems(const std::string& path, std::int64_t bytes, std::initializer_list<Split> splits,
                              std::int64_t sequence_length) {
  if (bytes == 0) return {{Severity::error, path, "text is empty"}};
  Problems problems;
  for (const Split split : splits) {
    const TextSplitRange range = text_split_range(bytes, split);
    if (range.end - range.begin < sequence_length + 1)
      problems.push_back({Severity::error, path,
                          std::string("the ") + to_string(split) + " split holds " +
                              std::to_string(range.end - range.begin) + " bytes, fewer than one window of " +
                              std::to_string(sequence_length + 1) + " (sequence length + 1)"});
  }
  return problems;
}

// Windows of text need a sequence length of at least 1.
Problems window_length_problems(std::int64_t sequence_length) {
  if (sequence_length >= 1) return {};
  return {spec_error("text needs a sequence length of at least 1, got " + std::to_string(sequence_length))};
}

Loaded<std::vector<std::uint8_t>> read_text_for_windows(const std::string& path, std::int64_t sequence_length) {
  if (Problems problems = window_length_problems(sequence_length); !problems.empty()) return {{}, std::move(problems)};
  return read_text_corpus(path);
}

// Windows of `corpus` (named `name` in problems), a text file's bytes or synthetic text.
Loaded<std::unique_ptr<DataLoader>> make_text_loader(const std::string& name, Loaded<std::vector<std::uint8_t>> corpus,
                                                     Split split, std::uint64_t seed, std::int64_t sequence_length) {
  Loaded<std::unique_ptr<DataLoader>> result;
  result.problems = std::move(corpus.problems);
  if (!result.ok()) return result;
  result.problems = text_corpus_problems(name, std::ssize(corpus.value), {split}, sequence_length);
  if (!result.ok()) return result;
  const TextSplitRange range = text_split_range(std::ssize(corpus.value), split);
  result.value = std::make_unique<TextLoader>(std::move(corpus.value), range, sequence_length, seed);
  return result;
}

// What read_text_for_windows gives for synthetic text: the generated corpus,
// or only the sequence-length problem.
Loaded<std::vector<std::uint8_t>> synthetic_text_for_windows(std::int64_t sequence_length) {
  if (Problems problems = window_length_problems(sequence_length); !problems.empty()) return {{}, std::move(problems)};
  return {synthetic_text_corpus(SyntheticTextConfig{}), {}};
}

}  // namespace

std::string data_kind(const std::string& spec) { return spec.substr(0, spec.find(':')); }

const char* to_string(Split split) { return split == Split::train ? "train" : "validation"; }

bool operator==(const LoaderState& a, const LoaderState& b) {
  return a.seed == b.seed && a.epoch == b.epoch && a.position == b.position;
}

Problems check_loader_state(const LoaderState& state, std::uint64_t seed, std::int64_t samples_per_epoch) {
  Problems problems;
  const auto problem = [&](std::string message) {
    problems.push_back({Severity::error, "data loader state", std::move(message)});
  };
  if (state.seed != seed) {
    problem("saved with seed " + std::to_string(state.seed) + ", this loader uses seed " + std::to_string(seed));
  }
  if (state.epoch < 0) problem("epoch " + std::to_string(state.epoch) + " is negative");
  if (state.position < 0 || state.position >= samples_per_epoch) {
    problem("position " + std::to_string(state.position) + " is outside 0.." + std::to_string(samples_per_epoch - 1) +
            " (samples per epoch)");
  }
  return problems;
}

Loaded<std::unique_ptr<DataLoader>> make_loader(const std::string& spec, Split split, std::uint64_t seed,
                                                std::int64_t sequence_length) {
  Loaded<std::unique_ptr<DataLoader>> result;
  const Loaded<DataSpec> parsed = parse_spec(spec);
  result.problems = parsed.problems;
  if (!result.ok()) return result;
  const DataSpec& s = parsed.value;
  if (s.kind == "fashion-mnist") {
    Loaded<InMemoryDataset> data = load_fashion_mnist(s.fashion_mnist_directory(), split);
    result.problems = std::move(data.problems);
    if (result.ok()) result.value = std::make_unique<ShuffledLoader>(std::move(data.value), seed);
    return result;
  }
  if (s.kind == "text") {
    return make_text_loader(s.argument, read_text_for_windows(s.argument, sequence_length), split, seed, sequence_length);
  }
  if (s.kind == synthetic_text_spec) {
    return make_text_loader(synthetic_text_spec, synthetic_text_for_windows(sequence_length), split, seed,
                            sequence_length);
  }
  result.value = std::make_unique<ShuffledLoader>(make_synthetic_regression(SyntheticConfig{}, split), seed);
  return result;
}

Problems check_data_spec(const std::string& spec, std::int64_t sequence_length) {
  const Loaded<DataSpec> parsed = parse_spec(spec);
  if (!parsed.ok()) return parsed.problems;
  const DataSpec& s = parsed.value;
  Problems problems;
  if (s.kind == "fashion-mnist") {
    for (const Split split : {Split::train, Split::validation}) {
      const auto [images, labels] = fashion_mnist_files(s.fashion_mnist_directory(), split);
      for (const std::string& path : {images, labels}) {
        std::ifstream file(path, std::ios::binary);
        if (file.get() == std::char_traits<char>::eof())
          problems.push_back({Severity::error, path, "cannot read the file (missing, unreadable or empty)"});
      }
    }
  } else if (s.kind == "text") {
    // By the files' sizes: reading the corpus here doubled a large one's cost before the run read it.
    if (Problems short_windows = window_length_problems(sequence_length); !short_windows.empty()) return short_windows;
    const Loaded<TextCorpusFiles> corpus = text_corpus_files(s.argument);
    if (!corpus.ok()) return corpus.problems;
    problems = text_corpus_problems(s.argument, corpus.value.bytes, {Split::train, Split::validation}, sequence_length);
  } else if (s.kind == synthetic_text_spec) {
    if (Problems short_windows = window_length_problems(sequence_length); !short_windows.empty()) return short_windows;
    problems = text_corpus_problems(synthetic_text_spec, SyntheticTextConfig{}.bytes,
                                    {Split::train, Split::validation}, sequence_length);
  }
  return problems;
}

}  // namespace meshplan::data
