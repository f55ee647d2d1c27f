// `meshplan simulate`: replay one training step of a plan (the same flags as
// `explain`, or a plan file with --plan) as events on every pipeline stage's
// streams and links; print what the step amounts to beside the analytical
// estimate (text, or --json), and write the timeline as Trace Event JSON
// (--trace) for Perfetto or chrome://tracing. Exit 0, or 2 on bad input or an
// invalid plan. The simulator is in simulator/; docs/simulator.md explains it.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>

#include "cli/commands.hpp"
#include "cli/plan_options.hpp"
#include "cli/text_report.hpp"
#include "model/evaluate.hpp"
#include "model/layer_graph.hpp"
#include "model/plan_file.hpp"
#include "model/report_json.hpp"
#include "model/validate.hpp"
#include "simulator/simulate.hpp"
#include "simulator/trace_json.hpp"

namespace meshplan::cli {

Command add_simulate_command(CLI::App& app);  // for commands.hpp, where main() will find it

namespace {

struct SimulateFlags {
  PlanFlags plan;
  std::string plan_file;
  std::string trace;
  bool json = false;
  bool zero_communication = false;
  bool no_contention = false;
};

struct Job {
  ModelSpec model;
  ClusterSpec cluster;
  std::int64_t world_size = 0;
  Plan plan;
};


// A tiny model's step is microseconds (it printed "0.00 ms"); 0 stays "0.00 ms".
std::string seconds(double s) {
  if (s >= 1) return format("%.3f s", s);
  if (s >= 1e-3 || s <= 0) return format("%.2f ms", s * 1e3);
  return format("%.2f us", s * 1e6);
}

std::string percent(double fraction) { return format("%.1f%%", 100 * fraction); }

std::string per_axis(const std::array<double, 6>& s) {
  std::string text;
  for (Axis axis : all_axes) {
    const double value = s[static_cast<std::size_t>(axis)];
    if (value > 0) text += (text.empty() ? "" : ", ") + to_string(axis) + " " + seconds(value);
  }
  return text.empty() ? "none" : text;
}

// What makes the simulated step differ from the analytical one for this plan
// (docs/simulator.md, "Differences from the analytical model"); none where
// the steps are equal (one stage, links not shared: the same model).
std::vector<std::string> why_they_differ(const sim::Simulation& sim) {
  std::vector<std::string> reasons;
  if (!(std::abs(sim.summary.step_s / sim.analytical.step_s - 1) > 1e-9)) return reasons;
  if (sim.options.contention) reasons.push_back("transfers that meet on a link share it (--no-contention: they do not)");
  if (sim.work.stages > 1) {
    reasons.push_back("pipeline sends are asynchronous here, as meshplan's executor posts them, and blocking in the "
                      "analytical model, as Megatron-LM's are; its bubble is a closed form, exact for equal stages");
    bool sharded = false;
    for (const sim::StageWork& stage : sim.work.stage_work) {
      for (const sim::ChunkWork& chunk : stage.chunks) {
        for (const sim::SegmentWork& segment : chunk.segments) sharded = sharded || !segment.parameter_gather.empty();
      }
    }
    if (sharded) reasons.push_back("weights sharded on pipeline stages: the analytical model gathers them per stage, in closed form");
  }
  return reasons;
}

void print_summary(std::ostream& out, const Job& job, const sim::Simulation& sim, double wall_s,
                   const std::string& trace) {
  const sim::SimulationSummary& s = sim.summary;
  const TimeEstimate& a = sim.analytical;
  out << "meshplan simulate: " << job.model.name << " on " << job.world_size << " x " << job.cluster.device.name << " ("
      << job.cluster.name << "), mesh " << job.plan.mesh.to_string() << ", " << to_string(job.plan.schedule) << ", "
      << count_of(static_cast<double>(sim.work.micro_batches), "micro-batch", "micro-batches") << " per step\n\n";
  out << "step            " << seconds(s.step_s);
  if (sim.options.zero_communication) {
    out << "   (communication priced at zero; analytical, with communication: " << seconds(a.step_s) << ")\n";
  } else {
    out << "   (analytical " << seconds(a.step_s) << ", " << format("%+.2f%%", 100 * (s.step_s / a.step_s - 1)) << ")\n";
    // Each reason from column 21, its words wrapped at 100 columns, continued from column 23.
    const char* lead = "                why: ";
    for (const std::string& reason : why_they_differ(sim)) {
      std::string line = lead;
      bool first_word = true;
      std::size_t from = 0;
      while (from < reason.size()) {
        std::size_t to = reason.find(' ', from);
        if (to == std::string::npos) to = reason.size();
        const std::string word = reason.substr(from, to - from);
        if (!first_word && line.size() + 1 + word.size() > 100) {
          out << line << "\n";
          line = std::string(23, ' ');
          first_word = true;
        }
        line += (first_word ? "" : " ") + word;
        first_word = false;
        from = to + 1;
      }
      out << line << "\n";
      lead = "                     ";
    }
  }
  out << "pipeline        " << seconds(s.pipeline_s) << ", bubble " << percent(s.bubble_fraction) << " (analytical "
      << percent(a.step_s > 0 ? a.bubble_s / a.step_s : 0) << ")\n";
  out << "exposed comm    " << per_axis(s.exposed_communication_s) << "   (on the critical path)\n";
  out << "                analytical: " << per_axis(a.axis_exposed_s) << "\n";
  const sim::CriticalPath& path = s.critical_path;
  double path_communication = 0;
  for (double c : path.communication_s) path_communication += c;
  out << "critical path   " << path.events << " events, " << path.stage_changes << " stage changes: compute "
      << seconds(path.compute_s) << ", communication " << seconds(path_communication) << ", waiting "
      << seconds(path.waiting_s) << "\n";
  const auto [least, most] = std::minmax_element(
      s.stages.begin(), s.stages.end(),
      [](const sim::StageSummary& x, const sim::StageSummary& y) { return x.busy_fraction < y.busy_fraction; });
  out << "devices busy    compute " << percent(least->busy_fraction) << " (stage " << least->stage << ") to "
      << percent(most->busy_fraction) << " (stage " << most->stage << ") of the step\n";
  const auto peak = std::max_element(
      s.stages.begin(), s.stages.end(),
      [](const sim::StageSummary& x, const sim::StageSummary& y) { return x.peak_activation_bytes < y.peak_activation_bytes; });
  out << "activations     peak " << human_bytes(peak->peak_activation_bytes) << " per device (stage " << peak->stage << ")\n";
  out << "simulated       " << s.timeline_events << " events in " << seconds(wall_s) << " ("
      << format("%.2f", static_cast<double>(s.timeline_events) / std::max(wall_s, 1e-9) / 1e6) << " M events/s), "
      << (sim.options.zero_communication ? "communication free"
                                         : sim.options.contention ? "links shared" : "links not shared")
      << "\n";
  if (!trace.empty()) {
    std::error_code ec;
    const auto bytes = std::filesystem::file_size(trace, ec);
    out << "trace           " << trace << " (" << (ec ? std::string("size unknown") : human_bytes(static_cast<double>(bytes)));
    // chrome://tracing loads at most 256 MB (google/trace-viewer#627); the Perfetto UI is held to the
    // browser's memory, typically 2 GB at 2-4x the file (perfetto.dev, "Visualising large traces").
    if (!ec && bytes > (256ull << 20)) {
      out << "; too large for chrome://tracing: open it in ui.perfetto.dev, or past about 500 MB run "
             "`trace_processor --httpd "
          << trace << "` and then open ui.perfetto.dev)\n";
    } else {
      out << "; open in ui.perfetto.dev or chrome://tracing)\n";
    }
  }
}

// With --plan the file carries model, cluster and plan: other plan flags would be ignored, so they are refused.
Problems flags_beside_plan_file(const CLI::App& command) {
  Problems problems;
  for (const CLI::Option* option : command.get_options()) {
    if (option->count() == 0) continue;
    const auto& names = option->get_lnames();
    if (names.empty()) continue;
    static const char* own[] = {"plan", "trace", "json", "zero-communication", "no-contention", "help"};
    if (std::find(std::begin(own), std::end(own), names.front()) != std::end(own)) continue;
    problems.push_back({Severity::error, "--" + names.front(), "cannot be combined with --plan (the plan file sets it)"});
  }
  return problems;
}

Loaded<Job> load_job(const SimulateFlags& flags, const CLI::App& command) {
  Loaded<Job> result;
  if (!flags.plan_file.empty()) {
    result.problems = flags_beside_plan_file(command);
    auto file = read_plan_file(flags.plan_file);
    result.problems.insert(result.problems.end(), file.problems.begin(), file.problems.end());
    if (!result.ok()) return result;
    result.value = {file.value.model, file.value.cluster, file.value.world_size, file.value.plan};
    return result;
  }
  auto inputs = resolve_plan_flags(flags.plan);
  result.problems = inputs.problems;
  if (!result.ok()) return result;
  for (const auto& note : inputs.value.notes) std::cerr << "meshplan simulate: note: " << note << "\n";
  result.value = {inputs.value.model, inputs.value.cluster, inputs.value.deployment.world_size, inputs.value.plan};
  // Validate before building the cluster's topology for the world size.
  const std::int64_t seq_len = result.value.plan.seq_len > 0 ? result.value.plan.seq_len : result.value.model.default_seq_len();
  const Problems invalid = validate_plan(result.value.model, build_layer_graph(result.value.model, seq_len),
                                         result.value.cluster, {result.value.world_size, 0}, result.value.plan);
  for (Problem p : invalid) {
    p.where = flag_for_field(p.where);
    result.problems.push_back(std::move(p));
  }
  return result;
}

}  // namespace

Command add_simulate_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "simulate", "Replay one training step of a plan as a timeline of compute and communication");
  command->footer(
      "Takes the plan flags of `meshplan explain` (same defaults: without --mesh, the search's first plan),\n"
      "or a plan file (--plan). One device per pipeline stage is simulated (its replicas run the same events);\n"
      "see docs/simulator.md.\n"
      "Exit status: 0 simulated, 2 bad input or invalid plan.");
  auto flags = std::make_shared<SimulateFlags>();
  add_plan_flags(*command, flags->plan);
  // Every pipeline stage is replayed and reported: --rank (explain's device of one rank) had no
  // effect here and took any value, so simulate does not offer it.
  command->remove_option(command->get_option("--rank"));
  command->add_option("--plan", flags->plan_file, "Plan file (JSON, from `explain --emit-plan` or `plan --emit-plan`)");
  command->add_option("--trace", flags->trace, "Write the timeline as Trace Event JSON (Perfetto, chrome://tracing)");
  command->add_flag("--json", flags->json, "Print the summary as one JSON object");
  command->add_flag("--zero-communication", flags->zero_communication, "Price every collective and transfer at zero");
  command->add_flag("--no-contention", flags->no_contention,
                    "Give every transfer its axis bandwidth, as the analytical model does, even when links are shared");

  return [flags, command]() {
    auto job = load_job(*flags, *command);
    for (const auto& p : job.problems) std::cerr << "meshplan simulate: " << describe(p) << "\n";
    if (!job.ok()) return exit_bad_input;
    const Job& in = job.value;
    const std::int64_t seq_len = in.plan.seq_len > 0 ? in.plan.seq_len : in.model.default_seq_len();
    const Evaluator evaluator(in.model, in.cluster, in.world_size, seq_len);
    const sim::SimulationOptions options{flags->zero_communication, !flags->no_contention};

    const auto started = std::chrono::steady_clock::now();
    auto simulated = sim::simulate_plan(evaluator, in.plan, options);
    const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (!simulated.ok()) {
      for (const auto& p : simulated.problems) {
        if (p.severity == Severity::error) std::cerr << "meshplan simulate: " << flag_for_field(p.where) << ": " << p.message << "\n";
      }
      return exit_bad_input;
    }
    const sim::Simulation& sim = simulated.value;
    if (!evaluator.evaluate(in.plan).fits) {
      std::cerr << "meshplan simulate: note: the plan does not fit in device memory (see meshplan explain)\n";
    }
    if (!flags->trace.empty()) {
      const Problems written = sim::write_trace_file(flags->trace, sim);
      if (has_errors(written)) {
        for (const auto& p : written) std::cerr << "meshplan simulate: --trace " << describe(p) << "\n";
        return exit_bad_input;
      }
    }
    if (flags->json) {
      nlohmann::ordered_json j;
      j["model"] = in.model.name;
      j["cluster"] = in.cluster.name;
      j["world_size"] = in.world_size;
      j["plan"] = plan_to_json(in.plan);
      j["options"] = {{"zero_communication", options.zero_communication}, {"contention", options.contention}};
      j.update(sim::summary_to_json(sim.summary));
      nlohmann::ordered_json analytical;
      analytical["step_s"] = sim.analytical.step_s;
      analytical["bubble_fraction"] = sim.analytical.step_s > 0 ? sim.analytical.bubble_s / sim.analytical.step_s : 0;
      nlohmann::ordered_json exposed = nlohmann::ordered_json::object();
      for (Axis axis : all_axes) {
        const double value = sim.analytical.axis_exposed_s[static_cast<std::size_t>(axis)];
        if (value > 0) exposed[to_string(axis)] = value;
      }
      analytical["exposed_communication_s"] = exposed;
      analytical["differs_because"] = why_they_differ(sim);
      j["analytical"] = analytical;
      j["trace"] = flags->trace.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(flags->trace);
      j["simulation_wall_s"] = wall_s;
      std::cout << j.dump(2) << "\n";
    } else {
      print_summary(std::cout, in, sim, wall_s, flags->trace);
    }
    return exit_ok;
  };
}

}  // namespace meshplan::cli
