// Prints the decision guide (model/decision_guide.hpp) under `meshplan
// plan`'s table: each question, the plan that answered it and its memory,
// the recommendation, and the data-parallel roofline check.
#pragma once

#include <ostream>

#include "model/decision_guide.hpp"

namespace meshplan::cli {

void print_decision_guide(std::ostream& out, const DecisionGuide& guide);

}  // namespace meshplan::cli
