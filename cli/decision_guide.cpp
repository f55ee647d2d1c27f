// The decision guide as text (decision_guide.hpp); the questions are asked
// in model/decision_guide.cpp.
#include "cli/decision_guide.hpp"

#include <string>

#include "cli/text_report.hpp"

namespace meshplan::cli {
namespace {

// "fsdp=8 (global batch 8): model states ... needed, ... usable".
std::string memory_detail(const GuideQuestion& q) {
  const MemoryBreakdown& m = q.memory;
  const double states = m.parameters_bytes + m.gradients_bytes + m.optimizer_bytes;
  const double per_parameter = q.parameters_on_device > 0 ? states / q.parameters_on_device : 0;
  return q.mesh + (q.batch_differs ? " (global batch " + std::to_string(q.global_batch) + ")" : "") +
         ": model states " + human_bytes(states) + " (" + format("%.0f", per_parameter) + " B x " +
         human_count(q.parameters_on_device) + " parameters held) + activations " + human_bytes(m.activations_bytes) +
         " + buffers " + human_bytes(m.buffers_bytes) + " = " + human_bytes(m.total_bytes()) + " needed, " +
         human_bytes(q.usable_bytes) + " usable";
}

}  // namespace

void print_decision_guide(std::ostream& out, const DecisionGuide& guide) {
  out << "decision guide (each question answered by costing one plan: micro-batch 1, " << guide.recompute << ")\n";
  int number = 1;
  for (const auto& q : guide.questions) {
    out << "  " << number++ << ". " << q.question << "  "
        << (q.answered ? (q.fits ? "yes" : "no") : "does not apply") << "\n";
    const std::string detail = q.answered ? memory_detail(q) : q.reason;
    if (!detail.empty()) out << "     " << detail << "\n";
  }
  out << "  -> start from: " << guide.recommendation << "\n";

  const DataParallelCheck& d = guide.data_parallel;
  out << "\n  Is pure data parallelism compute- or communication-bound? (How to Scale Your Model, \"Training\":\n"
         "  compute-bound when the per-device batch B/X exceeds C/W)\n";
  if (!d.applicable) {
    out << "     " << d.note << "\n";
    return;
  }
  if (d.transformer) {
    out << "     B/X = " << format("%.0f", d.batch_per_device) << " tokens per device; C/W = "
        << format("%.1f", d.peak_flops_per_s / 1e12) << " TFLOP/s / " << format("%.1f", d.bandwidth_bytes_per_s / 1e9)
        << " GB/s = " << format("%.0f", d.threshold) << "\n"
        << "     (W: the per-device bus bandwidth of a dp axis over every device, from the topology)\n";
    out << "     -> pure data parallelism would be " << (d.compute_bound ? "compute-bound" : "communication-bound") << " ("
        << format("%.0f", d.batch_per_device) << (d.compute_bound ? " > " : " <= ") << format("%.0f", d.threshold)
        << ")\n";
  } else {
    out << "     B/X = " << format("%.0f", d.batch_per_device)
        << " samples per device; C/W counts a transformer's 6 FLOPs per parameter per token and does not\n"
           "     apply to this model as it stands: the evaluator answers instead\n";
  }
  if (d.evaluated) {
    out << "     evaluator, " << d.mesh << " with micro-batch " << d.micro_batch << ": compute " << format("%.4g", d.compute_s)
        << " s, dp gradient communication " << format("%.4g", d.dp_communication_s) << " s ("
        << format("%.4g", d.dp_exposed_s) << " s exposed) -> "
        << (d.dp_communication_s <= d.compute_s ? "compute-bound" : "communication-bound") << "\n";
  } else if (!d.note.empty()) {
    out << "     " << d.note << "\n";
  }
}

}  // namespace meshplan::cli
