// Blob names and shapes come from parameter_layout(spec), the same list the
// single-rank trainer's checkpoints use, so both kinds are one format.
#include "executor/parallel/parallel_checkpoint.hpp"

#include <map>

#include "executor/model/parameters.hpp"

namespace meshplan::exec::parallel {
namespace {

constexpr const char* suffixes[] = {"", ".adam_m", ".adam_v"};

}  // namespace

std::vector<TensorBlob> gather_checkpoint_tensors(ParallelGpt& model) {
  const ParameterLayout layout = parameter_layout(model.spec()).value;
  const std::vector<float> full[] = {model.gather_full(0), model.gather_full(1), model.gather_full(2)};
  std::vector<TensorBlob> blobs;
  for (const ParameterTensor& t : layout.tensors)
    for (int which = 0; which < 3; ++which) {
      const auto begin = full[which].begin() + t.offset;
      blobs.push_back({t.name + suffixes[which], t.shape, std::vector<float>(begin, begin + t.elements)});
    }
  return blobs;
}

Problems restore_checkpoint_tensors(ParallelGpt& model, const std::vector<TensorBlob>& blobs, const std::string& where) {
  const ParameterLayout layout = parameter_layout(model.spec()).value;
  std::map<std::string, const TensorBlob*> by_name;
  for (const TensorBlob& b : blobs) by_name[b.name] = &b;
  Problems problems;
  for (int which = 0; which < 3; ++which) {
    Floats full(static_cast<std::size_t>(layout.total_elements), 0.0f, floats(MemoryCategory::communication).get_allocator());
    for (const ParameterTensor& t : layout.tensors) {
      const auto it = by_name.find(t.name + suffixes[which]);
      if (it == by_name.end() || it->second->shape != t.shape) {
        problems.push_back({Severity::error, where,
                            "tensor '" + t.name + suffixes[which] + "' is missing or has another shape"});
        continue;
      }
      std::copy(it->second->data.begin(), it->second->data.end(), full.begin() + t.offset);
    }
    if (!has_errors(problems)) model.scatter_full(which, full);
  }
  return problems;
}

}  // namespace meshplan::exec::parallel
