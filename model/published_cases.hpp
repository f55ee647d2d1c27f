// Published training runs the cost model is checked against
// (../shared/reference/validation-visible.md): Korthikanti et al. 2022's
// Table 5 iteration times and Figure 1 activation memory, and the ZeRO
// paper's model-state figures. The golden tests and `meshplan validation`
// (which writes docs/validation.md) both read this one list; no constant of
// the model is fitted to it.
#pragma once

#include <string>
#include <vector>

#include "model/explain.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"

namespace meshplan {

enum class PublishedQuantity {
  iteration_time_s,             // seconds per optimizer step
  first_stage_activations_gib,  // activation memory per GPU of pipeline stage 0
  model_states_gb,              // parameters + gradients + optimizer state per device, 1e9 bytes
};

std::string unit_of(PublishedQuantity quantity);

struct PublishedCase {
  std::string name;         // "175B selective+SP"
  std::string source;       // "Korthikanti et al. 2022, Table 5"
  PublishedQuantity quantity = PublishedQuantity::iteration_time_s;
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
// A 7.5-billion-parameter model (one 50000 x 150000 linear layer): the ZeRO
// example's Psi; only its parameter count matters for model states.
ModelSpec zero_paper_model();

std::vector<PublishedCase> korthikanti_iteration_time_cases();    // Table 5, 8 rows
std::vector<PublishedCase> korthikanti_activation_cases();        // Figure 1, 8 rows
std::vector<PublishedCase> zero_model_state_cases();              // ZeRO Figure 1, 4 rows
std::vector<PublishedResult> predict(const std::vector<PublishedCase>& cases);

}  // namespace meshplan
