// Human-readable reports: the explain breakdown as aligned tables.
#pragma once

#include <ostream>

#include "model/cluster_spec.hpp"
#include "model/explain.hpp"
#include "model/fit_search.hpp"
#include "model/model_spec.hpp"
#include "model/plan.hpp"
#include "model/text.hpp"

namespace meshplan::cli {

void print_explanation(std::ostream& out, const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan,
                       const Explanation& explanation);

// "what would fit": the fastest plan at this count, or the least memory any
// searched plan needs here and the fewest devices at which one fits.
void print_what_would_fit(std::ostream& out, const ClusterSpec& cluster, const SearchSpace& space,
                          const WhatWouldFit& fit);

// "pp=8,dp=16,tp=8, micro-batch 1 x 96, ZeRO-1, selective recompute, sp on, 1f1b"
std::string describe_plan_briefly(const Plan& plan);

// Bytes as GiB with two decimals.
std::string gib(double bytes);
// Bytes in the unit that shows them: "11.40 GiB", "3.21 MiB", "812.00 KiB", "96 B".
std::string human_bytes(double bytes);
// "1 micro-batch", "90291 candidates", "1.5 micro-batches": `count` (whole
// numbers in full, others to 4 digits) and the word, plural unless count is 1.
std::string count_of(double count, const std::string& singular, const std::string& plural);

}  // namespace meshplan::cli
