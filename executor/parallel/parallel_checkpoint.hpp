// Checkpoints across plans: a parallel run saves full tensors by name, in
// the single-rank trainer's naming ("wte", "wte.adam_m", "wte.adam_v", ...),
// so a checkpoint saved under any plan loads under any other plan of the
// same model, or on one rank (`meshplan train --resume`), and training
// continues from it. Resharding happens on load: each rank cuts its slices
// from the full tensors, as at initialisation (parallel_gpt.hpp).
//
// Gathering goes through ParallelGpt::gather_full, a world all-reduce of the
// whole model per buffer: simple and exact (one owner per element, zeros
// elsewhere), and at the model sizes a CPU trains its cost is that of a
// few gradient reductions. Loading reads the checkpoint on every rank.
//
// defines: checkpoint_blobs, checkpoint_full, gather_checkpoint_tensors, restore_checkpoint_tensors
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

#include "executor/checkpoint/checkpoint.hpp"
#include "executor/model/parameters.hpp"
#include "executor/parallel/parallel_gpt.hpp"
#include "model/problem.hpp"

namespace meshplan::exec::parallel {

// Values and both AdamW moments of every tensor, full size, in parameter_layout
// order. Collective over the world; the result is complete on every rank.
// The checkpoint's tensors of full buffers in `layout` order: values, AdamW m and v
// (what a single-rank Parameters holds, and what gather_full returns).
std::vector<TensorBlob> checkpoint_blobs(const ParameterLayout& layout, const std::array<std::span<const float>, 3>& full);
// The reverse, into `full` (each total_elements long); problems name `where` and the tensor.
Problems checkpoint_full(const ParameterLayout& layout, const std::vector<TensorBlob>& blobs, const std::string& where,
                         const std::array<std::span<float>, 3>& full);

std::vector<TensorBlob> gather_checkpoint_tensors(ParallelGpt& model);

// Replaces this rank's slices of values and moments from `blobs`; problems
// (naming `where`) for a missing tensor or one of another shape.
Problems restore_checkpoint_tensors(ParallelGpt& model, const std::vector<TensorBlob>& blobs, const std::string& where);

}  // namespace meshplan::exec::parallel
