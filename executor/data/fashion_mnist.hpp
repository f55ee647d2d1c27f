// Fashion-MNIST (Xiao, Rasul, Vollgraf, arXiv:1708.07747): 28x28 greyscale
// images of clothing in 10 classes, 60000 for training and 10000 for test.
// Read from the four gzipped IDX files exactly as Debian's
// dataset-fashion-mnist installs them, so the trainer needs no download and
// no conversion step:
//   train-images-idx3-ubyte.gz  train-labels-idx1-ubyte.gz   (Split::train)
//   t10k-images-idx3-ubyte.gz   t10k-labels-idx1-ubyte.gz    (Split::validation)
// Other copies (another directory) may hold any number of samples, but the
// images must be 28x28 and the labels 0..9 and as many as the images.
//
// defines: fashion_mnist_files, load_fashion_mnist
#pragma once

#include <string>
#include <utility>

#include "executor/data/in_memory.hpp"
#include "executor/data/loader.hpp"

namespace meshplan::data {

inline constexpr std::int64_t fashion_mnist_side = 28;
inline constexpr std::int64_t fashion_mnist_classes = 10;

// {images path, labels path} of `split` inside `directory`.
std::pair<std::string, std::string> fashion_mnist_files(const std::string& directory, Split split);

// Images as floats in [0, 1] (byte / 255), 784 per sample, row-major;
// labels as class ids 0..9. Problems name the offending file.
Loaded<InMemoryDataset> load_fashion_mnist(const std::string& directory, Split split);

}  // namespace meshplan::data
