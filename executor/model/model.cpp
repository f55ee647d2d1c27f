// make_model: the only place that maps a ModelSpec's kind to a class.
#include "executor/model/model.hpp"

#include "executor/model/gpt.hpp"
#include "executor/model/mlp.hpp"

namespace meshplan::exec {

template <typename T>
Loaded<std::unique_ptr<Model<T>>> make_model(const ModelSpec& spec, std::uint64_t seed, std::int64_t max_batch,
                                             std::int64_t seq_len, Backend& backend) {
  Loaded<std::unique_ptr<Model<T>>> result;
  if (max_batch <= 0)
    result.problems.push_back({Severity::error, "plan.micro_batch", "must be at least 1"});
  const bool gpt = spec.kind == ModelKind::transformer;
  if (gpt && seq_len == 0) seq_len = spec.transformer.seq_len;
  if (gpt && (seq_len <= 0 || seq_len > spec.transformer.seq_len))
    result.problems.push_back({Severity::error, "plan.seq_len",
                               std::to_string(seq_len) + " must be between 1 and the model's learned positions (" +
                                   std::to_string(spec.transformer.seq_len) + ")"});
  Loaded<Parameters<T>> parameters = make_parameters<T>(spec, seed, backend);
  result.problems.insert(result.problems.end(), parameters.problems.begin(), parameters.problems.end());
  if (!result.ok()) return result;
  if (gpt)
    result.value = std::make_unique<Gpt<T>>(spec, std::move(parameters.value), max_batch, seq_len);
  else
    result.value = std::make_unique<Mlp<T>>(spec, std::move(parameters.value), max_batch);
  return result;
}

template Loaded<std::unique_ptr<Model<float>>> make_model<float>(const ModelSpec&, std::uint64_t, std::int64_t,
                                                                 std::int64_t, Backend&);
template Loaded<std::unique_ptr<Model<double>>> make_model<double>(const ModelSpec&, std::uint64_t, std::int64_t,
                                                                   std::int64_t, Backend&);

}  // namespace meshplan::exec
