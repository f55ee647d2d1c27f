// make_loader: `--data` spec parsing, and the checks shared by every loader.
#include "executor/data/loader.hpp"

#include <utility>

#include "executor/data/fashion_mnist.hpp"
#include "executor/data/in_memory.hpp"
#include "executor/data/synthetic.hpp"
#include "executor/data/text.hpp"

namespace meshplan::data {
namespace {

constexpr const char* spec_flag = "--data";
constexpr const char* allowed_specs = "allowed: fashion-mnist, fashion-mnist:DIR, text:PATH, synthetic";

Loaded<std::unique_ptr<DataLoader>> spec_problem(std::string message) {
  Loaded<std::unique_ptr<DataLoader>> result;
  result.problems.push_back({Severity::error, spec_flag, std::move(message)});
  return result;
}

Loaded<std::unique_ptr<DataLoader>> make_text_loader(const std::string& path, Split split, std::uint64_t seed,
                                                     std::int64_t sequence_length) {
  Loaded<std::unique_ptr<DataLoader>> result;
  if (sequence_length < 1) {
    return spec_problem("text needs a sequence length of at least 1, got " + std::to_string(sequence_length));
  }
  Loaded<std::vector<std::uint8_t>> corpus = read_text_corpus(path);
  result.problems = std::move(corpus.problems);
  if (!result.ok()) return result;
  if (corpus.value.empty()) {
    result.problems.push_back({Severity::error, path, "text is empty"});
    return result;
  }
  const TextSplitRange range = text_split_range(std::ssize(corpus.value), split);
  if (range.end - range.begin < sequence_length + 1) {
    result.problems.push_back({Severity::error, path,
                               std::string("the ") + to_string(split) + " split holds " +
                                   std::to_string(range.end - range.begin) + " bytes, fewer than one window of " +
                                   std::to_string(sequence_length + 1) + " (sequence length + 1)"});
    return result;
  }
  result.value = std::make_unique<TextLoader>(std::move(corpus.value), range, sequence_length, seed);
  return result;
}

}  // namespace

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
  const std::size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const bool has_argument = colon != std::string::npos;
  const std::string argument = has_argument ? spec.substr(colon + 1) : std::string();

  if (kind == "fashion-mnist") {
    if (has_argument && argument.empty()) return spec_problem("'" + spec + "' names no directory after ':'");
    Loaded<InMemoryDataset> data =
        load_fashion_mnist(has_argument ? argument : std::string(default_fashion_mnist_directory), split);
    Loaded<std::unique_ptr<DataLoader>> result;
    result.problems = std::move(data.problems);
    if (result.ok()) result.value = std::make_unique<ShuffledLoader>(std::move(data.value), seed);
    return result;
  }
  if (kind == "text") {
    if (argument.empty()) return spec_problem("'" + spec + "' names no file or folder: use text:PATH");
    return make_text_loader(argument, split, seed, sequence_length);
  }
  if (kind == "synthetic") {
    if (has_argument) return spec_problem("'" + spec + "': synthetic takes no argument");
    Loaded<std::unique_ptr<DataLoader>> result;
    result.value = std::make_unique<ShuffledLoader>(make_synthetic_regression(SyntheticConfig{}, split), seed);
    return result;
  }
  return spec_problem("unknown data kind '" + kind + "' in '" + spec + "' (" + allowed_specs + ")");
}

}  // namespace meshplan::data
