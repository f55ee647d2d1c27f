// make_model: the only place that maps a ModelSpec's kind to a single-rank
// Model class. A GPT is not one of them: every GPT plan, one device
// included, trains on executor/parallel/parallel_gpt.hpp.
#include "executor/model/model.hpp"

#include "executor/model/mlp.hpp"

namespace meshplan::exec {

template <typename T>
Loaded<std::unique_ptr<Model<T>>> make_model(const ModelSpec& spec, std::uint64_t seed, std::int64_t max_batch,
                                             std::int64_t, Backend& backend) {
  Loaded<std::unique_ptr<Model<T>>> result;
  if (max_batch <= 0)
    result.problems.push_back({Severity::error, "plan.micro_batch", "must be at least 1"});
  Loaded<Parameters<T>> parameters = make_parameters<T>(spec, seed, backend);
  result.problems.insert(result.problems.end(), parameters.problems.begin(), parameters.problems.end());
  if (spec.kind == ModelKind::transformer)
    result.problems.push_back({Severity::error, "model.kind",
                               "a transformer trains on the parallel GPT (executor/parallel/parallel_gpt.hpp), "
                               "one device included; make_model builds MLPs"});
  if (!result.ok()) return result;
  result.value = std::make_unique<Mlp<T>>(spec, std::move(parameters.value), max_batch);
  return result;
}

template Loaded<std::unique_ptr<Model<float>>> make_model<float>(const ModelSpec&, std::uint64_t, std::int64_t,
                                                                 std::int64_t, Backend&);
template Loaded<std::unique_ptr<Model<double>>> make_model<double>(const ModelSpec&, std::uint64_t, std::int64_t,
                                                                   std::int64_t, Backend&);

}  // namespace meshplan::exec
