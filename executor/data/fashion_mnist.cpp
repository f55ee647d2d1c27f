#include "executor/data/fashion_mnist.hpp"

#include <algorithm>

#include "executor/data/idx_file.hpp"

namespace meshplan::data {

std::pair<std::string, std::string> fashion_mnist_files(const std::string& directory, Split split) {
  const std::string prefix = directory + "/" + (split == Split::train ? "train" : "t10k");
  return {prefix + "-images-idx3-ubyte.gz", prefix + "-labels-idx1-ubyte.gz"};
}

Loaded<InMemoryDataset> load_fashion_mnist(const std::string& directory, Split split) {
  Loaded<InMemoryDataset> result;
  const auto [images_path, labels_path] = fashion_mnist_files(directory, split);
  Loaded<IdxArray> images = read_idx_file(images_path, 3);
  Loaded<IdxArray> labels = read_idx_file(labels_path, 1);
  result.problems = images.problems;
  result.problems.insert(result.problems.end(), labels.problems.begin(), labels.problems.end());
  if (!images.ok() || !labels.ok()) return result;

  const std::vector<std::int64_t>& dims = images.value.dimensions;
  if (dims[1] != fashion_mnist_side || dims[2] != fashion_mnist_side) {
    result.problems.push_back({Severity::error, images_path,
                               "images are " + std::to_string(dims[1]) + "x" + std::to_string(dims[2]) +
                                   ", Fashion-MNIST images are 28x28"});
  }
  if (labels.value.dimensions[0] != dims[0]) {
    result.problems.push_back({Severity::error, labels_path,
                               "holds " + std::to_string(labels.value.dimensions[0]) + " labels but " + images_path +
                                   " holds " + std::to_string(dims[0]) + " images"});
  }
  const auto bad_label = std::find_if(labels.value.values.begin(), labels.value.values.end(),
                                      [](std::uint8_t label) { return label >= fashion_mnist_classes; });
  if (bad_label != labels.value.values.end()) {
    result.problems.push_back({Severity::error, labels_path,
                               "label " + std::to_string(*bad_label) + " of sample " +
                                   std::to_string(bad_label - labels.value.values.begin()) +
                                   " is outside 0..9"});
  }
  if (!result.ok()) return result;

  InMemoryDataset& data = result.value;
  data.samples = dims[0];
  data.inputs_per_sample = fashion_mnist_side * fashion_mnist_side;
  data.inputs.resize(images.value.values.size());
  std::transform(images.value.values.begin(), images.value.values.end(), data.inputs.begin(),
                 [](std::uint8_t pixel) { return static_cast<float>(pixel) / 255.0f; });
  data.classes = fashion_mnist_classes;
  data.labels.assign(labels.value.values.begin(), labels.value.values.end());
  return result;
}

}  // namespace meshplan::data
