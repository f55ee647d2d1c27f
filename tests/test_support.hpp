// Small helpers shared by the model tests.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "model/cluster_spec.hpp"
#include "model/explain.hpp"
#include "model/mesh.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan::testing_support {

inline constexpr double kGiB = 1024.0 * 1024 * 1024;

inline std::string messages(const Problems& problems) {
  std::string text;
  for (const auto& p : problems) text += describe(p) + "\n";
  return text;
}

template <typename T>
T must(Loaded<T> loaded) {
  EXPECT_TRUE(loaded.ok()) << messages(loaded.problems);
  return loaded.value;
}

inline Plan plan_with(const std::string& mesh, std::int64_t micro_batch, std::int64_t global_batch) {
  Plan plan;
  plan.mesh = must(parse_mesh(mesh, "mesh"));
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.recompute = Recompute::none;
  plan.precision = Precision::bf16;
  return plan;
}

}  // namespace meshplan::testing_support
