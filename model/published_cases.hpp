// Published training runs the cost model is checked against
// (../shared/reference/validation-visible.md): Korthikanti et al. 2022's
// Table 5 iteration times and Figure 1 activation memory, and the ZeRO
// paper's model-state figures. The golden tests and `meshplan validation`
// (which writes docs/validation.md) both read this one list.
#pragma once

#include <string>
#include <vector>

#include "model/explain.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan {

struct PublishedCase {
  std::string name;         // "175B selective+SP"
  std::string source;       // "Korthikanti et al. 2022, Table 5"
  std::string quantity;     // "iteration time (s)", "activations, first stage (GiB)"
  double published = 0;
  ModelSpec model;
  std::string cluster;      // preset name
  Plan plan;
};

struct PublishedResult {
  PublishedCase c;
  double predicted = 0;
  double error() const { return predicted / c.published - 1; }
};

// Korthikanti et al. 2022 Table 3 models (vocab 51200, sequence 2048).
ModelSpec korthikanti_model(std::int64_t layers, std::int64_t hidden, std::int64_t heads);

std::vector<PublishedCase> korthikanti_iteration_time_cases();
std::vector<PublishedResult> predict(const std::vector<PublishedCase>& cases);

}  // namespace meshplan
