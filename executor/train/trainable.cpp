// The checks of trainable.hpp. The model and plan rules live beside the code
// that runs them (check_supported, parallel::plan_problems); this file only
// says which apply to which model, and probes the run's inputs.
#include "executor/train/trainable.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <string>

#include "executor/calibrate/measure.hpp"
#include "executor/data/fashion_mnist.hpp"
#include "executor/data/loader.hpp"
#include "executor/data/synthetic.hpp"
#include "executor/data/text.hpp"
#include "executor/model/parameters.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "executor/parallel/shard_layout.hpp"
#include "model/plan_defaults.hpp"
#include "model/validate.hpp"

namespace meshplan::exec {
namespace {

Problem error(const std::string& field, const std::string& message) { return {Severity::error, field, message}; }

// A probe file written in `dir` and removed; problems name `where`.
Problems folder_write_problems(const std::string& dir, const std::string& where) {
  namespace fs = std::filesystem;
  std::error_code failure;
  // Named by process: every rank of a job probes the same folder.
  const fs::path probe = fs::path(dir) / (".meshplan-write-check-" + std::to_string(::getpid()));
  std::FILE* file = std::fopen(probe.c_str(), "wb");
  if (file == nullptr) return {error(where, std::string("cannot write a file in the folder: ") + std::strerror(errno))};
  const bool written = std::fputc('x', file) != EOF;
  const bool closed = std::fclose(file) == 0;
  fs::remove(probe, failure);
  if (!written || !closed) return {error(where, "cannot write a file in the folder (is the disk full?)")};
  return {};
}

// Created when missing (save_checkpoint creates it too), then probed: what
// the first save would find out hours later.
Problems checkpoint_dir_problems(const std::string& dir) {
  namespace fs = std::filesystem;
  const std::string where = "--checkpoint-dir " + dir;
  std::error_code failure;
  if (fs::exists(dir, failure) && !fs::is_directory(dir, failure)) return {error(where, "is not a folder")};
  fs::create_directories(dir, failure);
  if (failure) return {error(where, "cannot create the folder: " + failure.message())};
  return folder_write_problems(dir, where);
}

// An MLP runs under DataParallelTrainer: dp and fsdp axes (any ZeRO stage the
// GPT runtime also runs) and tp (Mlp::split_over_tp: tp divides the output
// size of every column-parallel, even, linear, as the planner requires); no
// other model-parallel axis.
Problems mlp_mesh_problems(const ModelSpec& spec, const Plan& plan) {
  Problems problems;
  const std::pair<Axis, const char*> model_parallel[] = {
      {Axis::pp, "pipeline parallelism"}, {Axis::cp, "context parallelism"}, {Axis::ep, "expert parallelism"}};
  for (const auto& [axis, what] : model_parallel)
    if (plan.mesh.size(axis) > 1)
      problems.push_back(error("mesh." + to_string(axis), std::string("an MLP trains on dp, fsdp and tp meshes; ") + what +
                                                              " for MLPs is not run (mesh " + plan.mesh.to_string() +
                                                              ")"));
  // The planner's widths (mlp_tp_split_widths); an odd linear's is the even one's before it.
  const std::int64_t tp = plan.mesh.size(Axis::tp);
  const std::vector<std::int64_t> widths = mlp_tp_split_widths(spec.mlp);
  for (std::size_t i = 0; tp > 1 && i < widths.size(); i += 2)
    if (widths[i] % tp != 0)
      problems.push_back(error("mesh.tp", "tp " + std::to_string(tp) + " must divide the output size (" +
                                              std::to_string(widths[i]) + ") of column-parallel linear" +
                                              std::to_string(i)));
  const Problems sharding = parallel::data_sharding_problems(plan);
  problems.insert(problems.end(), sharding.begin(), sharding.end());
  return problems;
}

}  // namespace

Problems trainable(const ModelSpec& spec, const Plan& plan, std::int64_t seq_len) {
  switch (spec.kind) {
    case ModelKind::transformer:
      return parallel::plan_problems(spec, plan, seq_len);  // check_supported(spec) among them
    case ModelKind::mlp: {
      Problems problems = check_supported(spec);
      const Problems mesh = mlp_mesh_problems(spec, plan);
      problems.insert(problems.end(), mesh.begin(), mesh.end());
      return problems;
    }
    case ModelKind::cnn:
      break;
  }
  return {error("model.kind", "ResNet/CNN models are planned but not trained by the executor")};
}

std::int64_t training_seq_len(const ModelSpec& spec, const Plan& plan) {
  return plan_seq_len(spec, plan);
}

Problems data_model_problems(const std::string& data_spec, const ModelSpec& spec) {
  const std::string kind = data::data_kind(data_spec);
  const bool tokens = kind == "text" || kind == data::synthetic_text_spec;
  if (spec.kind == ModelKind::transformer && (kind == "synthetic" || kind == "fashion-mnist")) {
    return {{Severity::error, "--data",
             "'" + kind + "' gives labelled vectors for MLPs; a transformer trains on token windows: "
             "--data text:PATH (the bytes of a file or folder, e.g. text:README.md) or synthetic-text (generated)"}};
  }
  if (spec.kind == ModelKind::transformer && tokens && spec.transformer.vocab < data::text_vocab) {
    const std::string bytes = std::to_string(data::text_vocab);
    return {{Severity::error, "--data",
             kind + " gives byte tokens (" + bytes + " values); the model's vocabulary is " +
                 std::to_string(spec.transformer.vocab) + ": give it at least " + bytes}};
  }
  if (spec.kind == ModelKind::mlp && tokens) {
    return {{Severity::error, "--data", kind + " gives token windows for transformers; an MLP trains on "
                                        "--data synthetic or fashion-mnist[:DIR]"}};
  }
  return {};
}

std::string default_data_spec(const ModelSpec& spec) {
  if (spec.kind == ModelKind::transformer) return data::synthetic_text_spec;
  const std::vector<std::int64_t>& sizes = spec.mlp.layer_sizes;
  const bool fashion_shaped = spec.kind == ModelKind::mlp && sizes.size() >= 2 &&
                              sizes.front() == data::fashion_mnist_side * data::fashion_mnist_side &&
                              sizes.back() == data::fashion_mnist_classes;
  return fashion_shaped ? "fashion-mnist" : "synthetic";
}

std::string default_data_reason(const ModelSpec& spec) {
  const std::string data = default_data_spec(spec);
  if (data == data::synthetic_text_spec) {
    const data::SyntheticTextConfig text;
    char reason[96];
    std::snprintf(reason, sizeof reason, "generated byte text; the best possible loss is ln %d = %.3f", text.successors,
                  data::synthetic_text_entropy_nats(text));
    return reason;
  }
  if (data == "fashion-mnist") {
    return "the MLP has its " + std::to_string(data::fashion_mnist_side * data::fashion_mnist_side) + " inputs and " +
           std::to_string(data::fashion_mnist_classes) + " classes";
  }
  return "";
}

Problems host_memory_problems(double predicted_rank_bytes, std::int64_t ranks_here, double host_bytes) {
  const double need = predicted_rank_bytes * static_cast<double>(std::max<std::int64_t>(ranks_here, 1));
  if (need <= host_bytes) return {};
  constexpr double gib = 1024.0 * 1024 * 1024;
  char text[320];
  std::snprintf(text, sizeof text,
                "the plan predicts %.1f GiB per rank x %lld rank%s here = %.1f GiB; this machine has %.1f GiB: "
                "train a smaller plan, or add --shrink to rehearse this one at a size it holds",
                predicted_rank_bytes / gib, static_cast<long long>(ranks_here), ranks_here == 1 ? "" : "s", need / gib,
                host_bytes / gib);
  return {{Severity::error, "memory", text}};
}

double host_memory_bytes() { return probe_machine().memory_total_bytes; }

Problems output_file_problems(const std::string& path, const std::string& flag) {
  namespace fs = std::filesystem;
  if (path.empty()) return {};
  const std::string where = flag + " " + path;
  std::error_code failure;
  if (fs::is_directory(path, failure)) return {error(where, "is a folder; give a file name")};
  const fs::path parent = fs::path(path).parent_path();
  const std::string dir = parent.empty() ? "." : parent.string();
  if (!fs::is_directory(dir, failure)) return {error(where, "the folder " + dir + " does not exist")};
  return folder_write_problems(dir, where);
}

Problems run_input_problems(const std::string& data_spec, std::int64_t seq_len, const std::string& checkpoint_dir) {
  Problems problems = data::check_data_spec(data_spec, seq_len);
  if (!checkpoint_dir.empty()) {
    const Problems folder = checkpoint_dir_problems(checkpoint_dir);
    problems.insert(problems.end(), folder.begin(), folder.end());
  }
  return problems;
}

}  // namespace meshplan::exec
