// Checkpoints: one directory per saved step, written so that a crash at any
// moment leaves either a complete, verifiable checkpoint or one that readers
// recognise as incomplete and skip: written, fsynced and renamed, then sealed
// by a completion marker, and checksummed (docs/architecture.md, "File formats").
//
// Layout of `<dir>/step-000123/` (docs/formats.md, "Checkpoints"):
//   <tensor>.f32    one per tensor: raw float32, little-endian, row-major,
//                   the tensor's full (unsharded) shape
//   manifest.json   {"version": 1, "step", "seed", "data_state": {"seed",
//                   "epoch", "position"}, "plan": <plan file JSON>, "extra",
//                   "tensors": [{"name", "file", "dtype": "float32",
//                   "shape": [...], "bytes", "checksum": "crc32:..."}]}
//   COMPLETE        written last; its presence is the only sign of a
//                   finished checkpoint
//
// Writing: every file goes through write_file_atomically into
// `step-000123.tmp/`, the directory is fsynced, renamed to `step-000123/`,
// the parent is fsynced, then COMPLETE is written. A crash before the rename
// leaves a `.tmp` directory; after it, a directory without COMPLETE. Both
// are ignored by latest_checkpoint and refused by load_checkpoint.
//
// Why a full shape per tensor: checkpoints must load under a different plan
// (correctness ladder step 4). Recording every tensor whole, by name and full
// shape, keeps the file independent of the plan that wrote it; when ranks
// save shards, a later manifest version adds each shard's offset within the
// full shape, and the loader reassembles or re-slices.
//
// defines: TensorBlob, CheckpointContents, checkpoint_manifest_version,
//          checkpoint_directory_name, save_checkpoint, load_checkpoint,
//          latest_checkpoint, ResumePoint, load_latest_checkpoint, set_checkpoint_aside
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "executor/data/loader.hpp"
#include "model/problem.hpp"

namespace meshplan::exec {

inline constexpr int checkpoint_manifest_version = 1;

// A named float32 tensor: `data` holds product(shape) values, row-major.
// Names become file names (`<name>.f32`), so they are limited to letters,
// digits, '.', '_' and '-', and may not start with '.'
// ("params.layers.0.w", "adam_m.layers.0.w").
struct TensorBlob {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> data;
};

struct CheckpointContents {
  std::int64_t step = 0;            // optimizer steps completed
  nlohmann::json plan;              // the plan file's JSON object (plan_file.hpp), as the caller gives it
  std::uint64_t seed = 0;           // the run's seed (initialisation, dropout)
  data::LoaderState data_state;     // where the training data loader is
  std::vector<TensorBlob> tensors;  // parameters, Adam m and v, anything else
  nlohmann::json extra;             // free-form (learning-rate schedule state, ...); null if unused
};

// "step-000123": six digits at least, more when the step needs them.
std::string checkpoint_directory_name(std::int64_t step);

// Writes `<dir>/<checkpoint_directory_name(step)>/`, creating `dir` if
// needed. Problems name the directory or file: invalid or duplicate tensor
// names, a data size that does not match the shape, an existing complete
// checkpoint for the same step, I/O failures. An incomplete one of the same
// step (no COMPLETE: its save was interrupted) is replaced.
Problems save_checkpoint(const std::string& dir, const CheckpointContents& contents);

// Reads and verifies one checkpoint directory. Refuses (every problem names
// the directory or file) an incomplete checkpoint (no COMPLETE), a malformed
// manifest or one of another version, a missing tensor file, and a damaged
// one (size or checksum does not match the manifest).
Loaded<CheckpointContents> load_checkpoint(const std::string& path);

// The path of the newest complete checkpoint in `dir` (by step number), or
// nullopt when there is none or `dir` does not exist. Only the COMPLETE
// marker is checked here; load_checkpoint verifies the contents. Incomplete
// checkpoints (no COMPLETE, or a leftover `.tmp` directory) are skipped with
// a warning each; an unreadable `dir` is an error.
Loaded<std::optional<std::string>> latest_checkpoint(const std::string& dir);

// What `--resume` continues from: a checkpoint that loaded and verified.
struct ResumePoint {
  std::string path;  // "<dir>/step-000123"
  CheckpointContents contents;
  std::vector<std::string> damaged;  // newer complete checkpoints that did not load, newest first
};

// The newest checkpoint in `dir` that loads and verifies (load_checkpoint),
// or nullopt when `dir` holds no complete checkpoint. A damaged one (a file
// missing, a size or checksum that does not match) is skipped for the next
// older one with a warning that names it and says why, so that one bad save
// does not cost the run; incomplete ones are skipped as latest_checkpoint
// does. An error when complete checkpoints exist but none loads, or `dir`
// cannot be read.
Loaded<std::optional<ResumePoint>> load_latest_checkpoint(const std::string& dir);

// Renames a damaged checkpoint `<dir>/step-000123` to `step-000123.damaged`
// (`.damaged-2`, ... when taken), which readers ignore, so that a run resumed
// from an older checkpoint can save that step again while the damaged files
// stay for inspection. A warning says where it went; an error if the rename fails.
Problems set_checkpoint_aside(const std::string& path);

}  // namespace meshplan::exec
