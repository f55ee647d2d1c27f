// The one interface the trainer sees for training data, whatever the source
// (`--data fashion-mnist[:DIR]`, `--data text:PATH`, `--data synthetic`).
// Two promises matter more than speed here, because the correctness ladder
// (docs/architecture.md) asks for bit-identical reruns and resumes:
//  - determinism: a loader's batches depend only on the data, the split, the
//    seed and how many samples were taken before (never on the platform:
//    see random.hpp);
//  - checkpointing: state() is a few integers; restore(state) on a fresh
//    loader built from the same spec and seed continues with exactly the
//    batches the original would have produced next.
//
// defines: Split, Batch, BatchShape, LoaderState, DataLoader, make_loader,
//          check_data_spec, default_fashion_mnist_directory
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/problem.hpp"

namespace meshplan::data {

// `validation` is the held-out part: Fashion-MNIST's t10k test set, the last
// 10% of a text corpus, the synthetic set's separately drawn samples.
enum class Split { train, validation };

const char* to_string(Split split);

// One batch, row-major, `samples` rows. Which fields are filled depends on
// the task (see BatchShape):
//  - classification (fashion-mnist): inputs [samples x 784] pixels in [0, 1],
//    targets [samples] class ids in [0, 10), target_values empty;
//  - next-byte prediction (text): inputs [samples x T] byte values 0..255
//    stored exactly as floats, targets [samples x T] the following bytes
//    (targets[s][t] == inputs[s][t + 1] for t < T - 1), target_values empty;
//  - regression (synthetic): inputs [samples x in], targets empty,
//    target_values [samples x out].
struct Batch {
  std::vector<float> inputs;
  std::vector<std::int32_t> targets;
  std::vector<float> target_values;
  std::int64_t samples = 0;
};

struct BatchShape {
  std::int64_t inputs_per_sample = 0;         // floats per row of Batch::inputs
  std::int64_t targets_per_sample = 0;        // ints per row of Batch::targets (0: none)
  std::int64_t target_values_per_sample = 0;  // floats per row of Batch::target_values (0: none)
  std::int64_t classes = 0;                   // range of Batch::targets (10, 256) or 0
};

// Where a loader is in its stream; plain integers so any checkpoint format
// can hold it. `position` counts samples already taken in `epoch`
// (0 <= position < samples_per_epoch()); `seed` guards against restoring
// into a loader made with another seed.
struct LoaderState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::int64_t position = 0;
};

bool operator==(const LoaderState& a, const LoaderState& b);

// The checks every restore() makes: same seed, epoch >= 0, 0 <= position < samples_per_epoch.
Problems check_loader_state(const LoaderState& state, std::uint64_t seed, std::int64_t samples_per_epoch);

class DataLoader {
 public:
  virtual ~DataLoader() = default;

  // The next `samples` samples (>= 1). A batch that runs past the end of an
  // epoch continues into the next one (reshuffled), so batches always hold
  // exactly `samples` rows and every epoch still visits each sample once.
  virtual Batch next_batch(std::int64_t samples) = 0;

  // The epoch the next sample comes from, counting from 0.
  virtual std::int64_t epoch() const = 0;
  // Samples in one epoch: the split's size, or for text the number of
  // windows that together hold as many bytes as the split (windows are
  // drawn at random, so an epoch is a budget, not a partition).
  virtual std::int64_t samples_per_epoch() const = 0;
  virtual BatchShape shape() const = 0;

  virtual LoaderState state() const = 0;
  // Problems (seed mismatch, out-of-range epoch or position) leave the loader unchanged.
  virtual Problems restore(const LoaderState& state) = 0;
};

inline constexpr const char* default_fashion_mnist_directory = "/usr/share/datasets/fashion-mnist";

// Parses a `--data` spec and builds its loader:
//   "fashion-mnist"        Debian's dataset-fashion-mnist in default_fashion_mnist_directory
//   "fashion-mnist:DIR"    the same four *-idx?-ubyte.gz files in DIR
//   "text:PATH"            bytes of a file, or of every regular file in a folder
//   "synthetic"            the synthetic regression set (synthetic.hpp)
// `seed` fixes the shuffle order / window choice; `sequence_length` (T) is
// used by text only. Problems name "--data" for bad specs and the file for
// unreadable or malformed data.
Loaded<std::unique_ptr<DataLoader>> make_loader(const std::string& spec, Split split, std::uint64_t seed,
                                                std::int64_t sequence_length);

// What make_loader would refuse for either split, found without loading the
// data (meshplan launch and train ask it before their ranks start): the spec;
// for fashion-mnist, that the split files can be read (not decompressed:
// loading the 60000 training images takes a second or two); for text, that the
// corpus is readable, not empty, and each split holds one window of
// `sequence_length` + 1 bytes; for synthetic, nothing. The images' shapes
// and labels are still checked only by loading.
Problems check_data_spec(const std::string& spec, std::int64_t sequence_length);

}  // namespace meshplan::data
