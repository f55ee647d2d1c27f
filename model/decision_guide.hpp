// The decision guide for parallelising a training job, answered with
// numbers: does the model train on one device (then plain data
// parallelism)? does FSDP over every device fit? does tensor parallelism
// inside a node? else the smallest pipeline that fits. Then the "How to
// Scale Your Model" roofline check for data parallelism (Austin et al. 2025,
// "Training" chapter: data parallelism is compute-bound when the per-device
// batch B/X exceeds C/W).
//
// Why concrete plans: every question is answered by costing one plan with
// explain_plan (micro-batch 1, selective recompute, the memory model and
// evaluator the search uses), not by a separate back-of-the-envelope formula
// that could disagree with the table printed above it. Only C/W is a
// formula, because it is the book's criterion; the evaluator's compute and
// data-parallel communication times are printed beside it.
//
// Library code, so that the CLI (`meshplan plan`, cli/decision_guide.cpp
// prints it) and the studio ask the same questions; the questions' plans
// take their defaults from model/plan_defaults.hpp, as `explain` does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/memory_model.hpp"
#include "model/model_spec.hpp"
#include "model/precision.hpp"

namespace meshplan {

struct GuideQuestion {
  std::string question;     // "Does gpt3-175b train on one a100-80g?"
  std::string mesh;         // the plan that answered it, "fsdp=1024"
  bool answered = false;    // false: no plan of this shape is valid here (reason in `detail`)
  bool fits = false;
  MemoryBreakdown memory;   // bytes per device, worst stage
  double parameters_on_device = 0;
  double usable_bytes = 0;
  std::int64_t global_batch = 0;  // the batch the plan was costed with
  bool batch_differs = false;     // it is not the user's (theirs did not split over the question's mesh)
  std::string reason;       // when not answered: why the question does not apply
};

// Data parallelism over all devices: compute- or communication-bound?
struct DataParallelCheck {
  bool applicable = false;          // false for one device
  // The criterion counts 6 FLOPs per parameter per token (transformer
  // matmuls); for MLPs and CNNs only the evaluator's answer is given.
  bool transformer = true;
  double batch_per_device = 0;      // B / X: global batch x sequence / devices
  double peak_flops_per_s = 0;      // C: the device's peak at the plan's GEMM precision
  double bandwidth_bytes_per_s = 0; // W: per-device bus bandwidth of a dp axis over every device (place_axes)
  double threshold = 0;             // C / W
  bool compute_bound = false;       // B / X > C / W (transformers)
  // The same question asked of the evaluator, when the batch splits over the devices.
  bool evaluated = false;
  std::string mesh;
  std::int64_t micro_batch = 0;
  double compute_s = 0;
  double dp_communication_s = 0;
  double dp_exposed_s = 0;
  std::string note;                 // why the evaluator was not asked
};

struct DecisionGuide {
  std::string recompute;                 // what the questions' plans use: "selective recompute (...)" (transformers) or "no recompute"
  std::vector<GuideQuestion> questions;  // asked in order, up to the first that fits
  std::string recommendation;            // the shape to start from, or what to try
  DataParallelCheck data_parallel;
};

DecisionGuide build_decision_guide(const ModelSpec& model, const ClusterSpec& cluster, std::int64_t world_size,
                                   std::int64_t global_batch, std::int64_t seq_len_flag, Precision precision,
                                   double memory_headroom);

}  // namespace meshplan
