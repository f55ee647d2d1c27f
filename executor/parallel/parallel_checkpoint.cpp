// Blob names and shapes come from parameter_layout(spec), the same list the
// single-rank trainer's checkpoints use, so both kinds are one format.
#include "executor/parallel/parallel_checkpoint.hpp"

#include <map>

#include "executor/model/parameters.hpp"

namespace meshplan::exec::parallel {
namespace {

constexpr const char* suffixes[] = {"", ".adam_m", ".adam_v"};

}  // namespace

std::vector<TensorBlob> checkpoint_blobs(const ParameterLayout& layout, const std::array<std::span<const float>, 3>& full) {
  std::vector<TensorBlob> blobs;
  for (const ParameterTensor& t : layout.tensors)
    for (std::size_t which = 0; which < 3; ++which) {
      const auto begin = full[which].begin() + t.offset;
      blobs.push_back({t.name + suffixes[which], t.shape, std::vector<float>(begin, begin + t.elements)});
    }
  return blobs;
}

Problems checkpoint_full(const ParameterLayout& layout, const std::vector<TensorBlob>& blobs, const std::string& where,
                         const std::array<std::span<float>, 3>& full) {
  std::map<std::string, const TensorBlob*> by_name;
  for (const TensorBlob& b : blobs) by_name[b.name] = &b;
  Problems problems;
  for (std::size_t which = 0; which < 3; ++which)
    for (const ParameterTensor& t : layout.tensors) {
      const auto it = by_name.find(t.name + suffixes[which]);
      if (it == by_name.end() || it->second->shape != t.shape) {
        problems.push_back({Severity::error, where,
                            "tensor '" + t.name + suffixes[which] + "' is missing or has another shape"});
        continue;
      }
      std::copy(it->second->data.begin(), it->second->data.end(), full[which].begin() + t.offset);
    }
  return problems;
}

std::vector<TensorBlob> gather_checkpoint_tensors(ParallelGpt& model) {
  const std::vector<float> full[] = {model.gather_full(0), model.gather_full(1), model.gather_full(2)};
  return checkpoint_blobs(parameter_layout(model.spec()).value, {full[0], full[1], full[2]});
}

Problems restore_checkpoint_tensors(ParallelGpt& model, const std::vector<TensorBlob>& blobs, const std::string& where) {
  const ParameterLayout layout = parameter_layout(model.spec()).value;
  const auto n = static_cast<std::size_t>(layout.total_elements);
  std::vector<float> full[] = {std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f), std::vector<float>(n, 0.0f)};
  Problems problems = checkpoint_full(layout, blobs, where, {full[0], full[1], full[2]});
  if (!has_errors(problems))
    for (int which = 0; which < 3; ++which) model.scatter_full(which, full[which]);
  return problems;
}

}  // namespace meshplan::exec::parallel
