// save_checkpoint, load_checkpoint, latest_checkpoint: the on-disk protocol
// described in checkpoint.hpp. Every check a reader makes is a Problem naming
// the directory or file, never an exception or an assert: checkpoints come
// from disks that fill up, jobs that get killed and people who copy folders.
#include "executor/checkpoint/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <limits>
#include <set>
#include <sstream>
#include <utility>

#include "executor/checkpoint/checksum.hpp"
#include "model/atomic_file.hpp"

namespace meshplan::exec {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* manifest_file_name = "manifest.json";
constexpr const char* complete_file_name = "COMPLETE";
constexpr const char* tensor_file_suffix = ".f32";
constexpr const char* temporary_suffix = ".tmp";
constexpr const char* directory_prefix = "step-";
constexpr std::int64_t float_bytes = 4;

bool is_valid_file_stem(const std::string& name) {
  if (name.empty() || name.front() == '.') return false;
  for (const char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
                         c == '_' || c == '-';
    if (!allowed) return false;
  }
  return true;
}

// product(shape), or nullopt for a negative extent or an overflowing product.
std::optional<std::int64_t> element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t count = 1;
  for (const std::int64_t extent : shape) {
    if (extent < 0) return std::nullopt;
    if (extent != 0 && count > std::numeric_limits<std::int64_t>::max() / float_bytes / extent) return std::nullopt;
    count *= extent;
  }
  return count;
}

std::string shape_text(const std::vector<std::int64_t>& shape) { return json(shape).dump(); }

std::vector<std::byte> little_endian_bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      const auto bits = std::bit_cast<std::uint32_t>(values[i]);
      for (std::size_t k = 0; k < 4; ++k) bytes[4 * i + k] = static_cast<std::byte>((bits >> (8 * k)) & 0xffu);
    }
  }
  return bytes;
}

std::vector<float> floats_from_little_endian(const std::vector<std::byte>& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if constexpr (std::endian::native == std::endian::little) {
    if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  } else {
    for (std::size_t i = 0; i < values.size(); ++i) {
      std::uint32_t bits = 0;
      for (std::size_t k = 0; k < 4; ++k) bits |= std::to_integer<std::uint32_t>(bytes[4 * i + k]) << (8 * k);
      values[i] = std::bit_cast<float>(bits);
    }
  }
  return values;
}

// A rename or a new file is durable only once its directory is fsynced.
bool fsync_directory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return false;
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  return synced;
}

std::optional<std::vector<std::byte>> read_bytes(const fs::path& path, std::uintmax_t size) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::vector<std::byte> bytes(static_cast<std::size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) return std::nullopt;
  return bytes;
}

// "step-000123" -> 123; "step-000123.tmp" -> 123 with `temporary` set.
std::optional<std::int64_t> parse_directory_name(const std::string& name, bool& temporary) {
  const std::string prefix = directory_prefix;
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  std::string digits = name.substr(prefix.size());
  temporary = digits.ends_with(temporary_suffix);
  if (temporary) digits.resize(digits.size() - std::strlen(temporary_suffix));
  if (digits.empty() || digits.size() > 18) return std::nullopt;
  std::int64_t step = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
  if (error != std::errc{} || end != digits.data() + digits.size()) return std::nullopt;
  return step;
}

Problems check_contents(const CheckpointContents& contents, const std::string& where) {
  Problems problems;
  if (contents.step < 0) {
    problems.push_back({Severity::error, where, "step must be >= 0, got " + std::to_string(contents.step)});
  }
  std::set<std::string> names;
  for (const TensorBlob& tensor : contents.tensors) {
    if (!is_valid_file_stem(tensor.name)) {
      problems.push_back({Severity::error, where,
                          "tensor name '" + tensor.name +
                              "' is not allowed (letters, digits, '.', '_', '-'; not empty; not starting with '.')"});
      continue;
    }
    if (!names.insert(tensor.name).second) {
      problems.push_back({Severity::error, where, "tensor name '" + tensor.name + "' appears twice"});
    }
    const std::optional<std::int64_t> count = element_count(tensor.shape);
    if (!count) {
      problems.push_back({Severity::error, where,
                          "tensor '" + tensor.name + "' has an invalid shape " + shape_text(tensor.shape)});
    } else if (*count != std::ssize(tensor.data)) {
      problems.push_back({Severity::error, where,
                          "tensor '" + tensor.name + "' has shape " + shape_text(tensor.shape) + " (" +
                              std::to_string(*count) + " values) but holds " + std::to_string(tensor.data.size())});
    }
  }
  return problems;
}

// Reads a manifest field, recording a problem naming the file and key when it is absent or of another type.
class ManifestReader {
 public:
  ManifestReader(std::string file, Problems& problems) : file_(std::move(file)), problems_(problems) {}

  const json* field(const json& object, const char* key, const std::string& path) {
    const auto found = object.find(key);
    if (found == object.end()) {
      fail(path, "is missing");
      return nullptr;
    }
    return &*found;
  }

  std::optional<std::int64_t> integer(const json& object, const char* key, const std::string& path) {
    const json* value = field(object, key, path);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number_integer() ||
        (value->is_number_unsigned() &&
         value->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))) {
      fail(path, "must be an integer, got " + value->dump());
      return std::nullopt;
    }
    return value->get<std::int64_t>();
  }

  std::optional<std::uint64_t> unsigned_integer(const json& object, const char* key, const std::string& path) {
    const json* value = field(object, key, path);
    if (value == nullptr) return std::nullopt;
    if (!value->is_number_unsigned()) {
      fail(path, "must be a non-negative integer, got " + value->dump());
      return std::nullopt;
    }
    return value->get<std::uint64_t>();
  }

  std::optional<std::string> string(const json& object, const char* key, const std::string& path) {
    const json* value = field(object, key, path);
    if (value == nullptr) return std::nullopt;
    if (!value->is_string()) {
      fail(path, "must be a string, got " + value->dump());
      return std::nullopt;
    }
    return value->get<std::string>();
  }

  void fail(const std::string& path, const std::string& message) {
    problems_.push_back({Severity::error, file_ + " key '" + path + "'", "malformed manifest: " + message});
  }

 private:
  std::string file_;
  Problems& problems_;
};

struct TensorEntry {
  std::string name;
  std::string file;
  std::vector<std::int64_t> shape;
  std::int64_t bytes = 0;
  std::string checksum;
};

std::optional<TensorEntry> read_tensor_entry(ManifestReader& reader, const json& entry, const std::string& path) {
  if (!entry.is_object()) {
    reader.fail(path, "must be an object");
    return std::nullopt;
  }
  TensorEntry tensor;
  const auto name = reader.string(entry, "name", path + ".name");
  const auto file = reader.string(entry, "file", path + ".file");
  const auto dtype = reader.string(entry, "dtype", path + ".dtype");
  const auto bytes = reader.integer(entry, "bytes", path + ".bytes");
  const auto checksum = reader.string(entry, "checksum", path + ".checksum");
  const json* shape = reader.field(entry, "shape", path + ".shape");
  if (!name || !file || !dtype || !bytes || !checksum || shape == nullptr) return std::nullopt;
  bool valid = true;
  if (!is_valid_file_stem(*name)) {
    reader.fail(path + ".name", "'" + *name + "' is not a valid tensor name");
    valid = false;
  }
  if (!is_valid_file_stem(*file)) {
    reader.fail(path + ".file", "'" + *file + "' is not a plain file name inside the checkpoint");
    valid = false;
  }
  if (*dtype != "float32") {
    reader.fail(path + ".dtype", "'" + *dtype + "' is not supported (allowed: float32)");
    valid = false;
  }
  if (!shape->is_array()) {
    reader.fail(path + ".shape", "must be an array of non-negative integers");
    return std::nullopt;
  }
  for (const json& extent : *shape) {
    if (!extent.is_number_unsigned() ||
        extent.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
      reader.fail(path + ".shape", "must be an array of non-negative integers, got " + shape->dump());
      return std::nullopt;
    }
    tensor.shape.push_back(extent.get<std::int64_t>());
  }
  const std::optional<std::int64_t> count = element_count(tensor.shape);
  if (!count || *count * float_bytes != *bytes) {
    reader.fail(path + ".bytes", std::to_string(*bytes) + " does not match shape " + shape_text(tensor.shape) +
                                     " of float32");
    valid = false;
  }
  if (!valid) return std::nullopt;
  tensor.name = *name;
  tensor.file = *file;
  tensor.bytes = *bytes;
  tensor.checksum = *checksum;
  return tensor;
}

// Reads one tensor file and checks it against its manifest entry.
std::optional<TensorBlob> read_tensor(const fs::path& directory, const TensorEntry& entry, Problems& problems) {
  const fs::path path = directory / entry.file;
  std::error_code error;
  const std::uintmax_t size = fs::file_size(path, error);
  if (error) {
    problems.push_back({Severity::error, path.string(),
                        "missing tensor file (manifest.json lists it for tensor '" + entry.name + "')"});
    return std::nullopt;
  }
  if (size != static_cast<std::uintmax_t>(entry.bytes)) {
    problems.push_back({Severity::error, path.string(),
                        "damaged: " + std::to_string(size) + " bytes, manifest.json says " +
                            std::to_string(entry.bytes) + (size < static_cast<std::uintmax_t>(entry.bytes)
                                                               ? " (truncated)"
                                                               : "")});
    return std::nullopt;
  }
  std::optional<std::vector<std::byte>> bytes = read_bytes(path, size);
  if (!bytes) {
    problems.push_back({Severity::error, path.string(), "cannot read the file"});
    return std::nullopt;
  }
  const std::string checksum = checksum_text(*bytes);
  if (checksum != entry.checksum) {
    problems.push_back({Severity::error, path.string(),
                        "damaged: checksum " + checksum + " does not match manifest.json's " + entry.checksum});
    return std::nullopt;
  }
  return TensorBlob{entry.name, entry.shape, floats_from_little_endian(*bytes)};
}

}  // namespace

std::string checkpoint_directory_name(std::int64_t step) {
  std::string digits = std::to_string(step);
  if (digits.size() < 6) digits.insert(0, 6 - digits.size(), '0');
  return directory_prefix + digits;
}

Problems save_checkpoint(const std::string& dir, const CheckpointContents& contents) {
  const fs::path final_path = fs::path(dir) / checkpoint_directory_name(contents.step);
  const fs::path temporary_path = fs::path(final_path.string() + temporary_suffix);
  Problems problems = check_contents(contents, final_path.string());
  if (has_errors(problems)) return problems;

  std::error_code error;
  fs::create_directories(dir, error);
  if (error) return {{Severity::error, dir, "cannot create the checkpoint directory: " + error.message()}};
  if (fs::exists(final_path / complete_file_name, error)) {
    return {{Severity::error, final_path.string(),
             "a checkpoint for step " + std::to_string(contents.step) + " already exists; remove it first"}};
  }
  fs::remove_all(final_path, error);  // without COMPLETE: a save of the same step interrupted after its rename
  fs::remove_all(temporary_path, error);  // left over from an interrupted save of the same step
  fs::create_directory(temporary_path, error);
  if (error) {
    return {{Severity::error, temporary_path.string(), "cannot create the directory: " + error.message()}};
  }
  const auto give_up = [&](Problems found) {
    std::error_code ignored;
    fs::remove_all(temporary_path, ignored);
    return found;
  };

  json tensors = json::array();
  for (const TensorBlob& tensor : contents.tensors) {
    const std::string file = tensor.name + tensor_file_suffix;
    const std::vector<std::byte> bytes = little_endian_bytes(tensor.data);
    Problems written = write_file_atomically((temporary_path / file).string(), [&](std::ostream& out) {
      out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    });
    if (has_errors(written)) return give_up(std::move(written));
    tensors.push_back({{"name", tensor.name},
                       {"file", file},
                       {"dtype", "float32"},
                       {"shape", tensor.shape},
                       {"bytes", bytes.size()},
                       {"checksum", checksum_text(bytes)}});
  }
  const json manifest = {
      {"version", checkpoint_manifest_version},
      {"step", contents.step},
      {"seed", contents.seed},
      {"data_state",
       {{"seed", contents.data_state.seed},
        {"epoch", contents.data_state.epoch},
        {"position", contents.data_state.position}}},
      {"plan", contents.plan},
      {"extra", contents.extra},
      {"tensors", std::move(tensors)},
  };
  const std::string manifest_text = manifest.dump(2) + "\n";
  Problems written = write_file_atomically((temporary_path / manifest_file_name).string(),
                                           [&](std::ostream& out) { out << manifest_text; });
  if (has_errors(written)) return give_up(std::move(written));

  if (!fsync_directory(temporary_path)) {
    return give_up({{Severity::error, temporary_path.string(), "cannot fsync the directory"}});
  }
  fs::rename(temporary_path, final_path, error);
  if (error) {
    return give_up({{Severity::error, final_path.string(),
                     "cannot rename '" + temporary_path.string() + "' into place: " + error.message()}});
  }
  if (!fsync_directory(dir)) return {{Severity::error, dir, "cannot fsync the directory"}};
  problems = write_file_atomically((final_path / complete_file_name).string(), [&](std::ostream& out) {
    // The marker also seals the manifest: a changed manifest no longer matches it.
    out << "step " << contents.step << '\n'
        << "manifest " << checksum_text(std::as_bytes(std::span(manifest_text.data(), manifest_text.size()))) << '\n';
  });
  if (has_errors(problems)) return problems;
  if (!fsync_directory(final_path)) return {{Severity::error, final_path.string(), "cannot fsync the directory"}};
  return problems;
}

Loaded<CheckpointContents> load_checkpoint(const std::string& path) {
  Loaded<CheckpointContents> result;
  Problems& problems = result.problems;
  const fs::path directory(path);
  std::error_code error;
  if (!fs::is_directory(directory, error)) {
    problems.push_back({Severity::error, path, "not a checkpoint: no such directory"});
    return result;
  }
  if (!fs::exists(directory / complete_file_name, error)) {
    problems.push_back({Severity::error, path,
                        "incomplete checkpoint: no COMPLETE marker (the save was interrupted); "
                        "use an earlier checkpoint"});
    return result;
  }

  const std::string manifest_path = (directory / manifest_file_name).string();
  std::ifstream in(manifest_path);
  if (!in) {
    problems.push_back({Severity::error, manifest_path, "missing file: cannot open the manifest"});
    return result;
  }
  std::stringstream text;
  text << in.rdbuf();
  // Checked last, so that a malformed manifest is reported as such first.
  std::optional<Problem> seal_problem;
  std::optional<std::int64_t> sealed_step;
  {
    std::ifstream marker(directory / complete_file_name);
    std::string line, sealed;
    while (std::getline(marker, line)) {
      if (line.rfind("manifest ", 0) == 0) sealed = line.substr(9);
      if (line.rfind("step ", 0) == 0) {
        std::int64_t value = 0;
        const auto [end, ec] = std::from_chars(line.data() + 5, line.data() + line.size(), value);
        if (ec == std::errc() && end == line.data() + line.size()) sealed_step = value;
      }
    }
    const std::string manifest_text = text.str();
    const std::string actual = checksum_text(std::as_bytes(std::span(manifest_text.data(), manifest_text.size())));
    if (sealed.empty()) {
      // Every save writes the checksum; an empty or garbled marker (a crash before it reached the
      // disk, or an edit) does not vouch for the manifest, and was taken as a seal.
      seal_problem = Problem{Severity::error, (directory / complete_file_name).string(),
                             "damaged: the COMPLETE marker does not record the manifest's checksum"};
    } else if (sealed != actual) {
      seal_problem = Problem{Severity::error, manifest_path,
                             "damaged: checksum " + actual + " does not match " + sealed + " recorded in COMPLETE"};
    }
  }
  const json manifest = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (manifest.is_discarded()) {
    problems.push_back({Severity::error, manifest_path, "malformed manifest: not valid JSON"});
    return result;
  }
  if (!manifest.is_object()) {
    problems.push_back({Severity::error, manifest_path, "malformed manifest: must be a JSON object"});
    return result;
  }

  ManifestReader reader(manifest_path, problems);
  const std::optional<std::int64_t> version = reader.integer(manifest, "version", "version");
  if (!version) return result;
  if (*version != checkpoint_manifest_version) {
    problems.push_back({Severity::error, manifest_path + " key 'version'",
                        "unsupported manifest version " + std::to_string(*version) + " (this build reads version " +
                            std::to_string(checkpoint_manifest_version) + ")"});
    return result;
  }

  CheckpointContents& contents = result.value;
  if (const auto step = reader.integer(manifest, "step", "step")) {
    contents.step = *step;
    bool temporary = false;
    const std::optional<std::int64_t> named = parse_directory_name(directory.filename().string(), temporary);
    if (*step < 0) {
      reader.fail("step", "must be 0 or more, got " + std::to_string(*step));
    } else if (named && *named != *step) {  // the name orders checkpoints: a renamed one was resumed as the newest
      reader.fail("step", "is " + std::to_string(*step) + ", but the folder is named for step " + std::to_string(*named));
    } else if (sealed_step && *sealed_step != *step) {
      reader.fail("step", "is " + std::to_string(*step) + ", but COMPLETE records step " + std::to_string(*sealed_step));
    }
  }
  if (const auto seed = reader.unsigned_integer(manifest, "seed", "seed")) contents.seed = *seed;
  if (const json* plan = reader.field(manifest, "plan", "plan")) contents.plan = *plan;
  if (const json* extra = reader.field(manifest, "extra", "extra")) contents.extra = *extra;
  if (const json* state = reader.field(manifest, "data_state", "data_state")) {
    if (!state->is_object()) {
      reader.fail("data_state", "must be an object {seed, epoch, position}");
    } else {
      if (const auto seed = reader.unsigned_integer(*state, "seed", "data_state.seed")) {
        contents.data_state.seed = *seed;
      }
      if (const auto epoch = reader.integer(*state, "epoch", "data_state.epoch")) contents.data_state.epoch = *epoch;
      if (const auto position = reader.integer(*state, "position", "data_state.position")) {
        contents.data_state.position = *position;
      }
    }
  }

  std::vector<TensorEntry> entries;
  if (const json* tensors = reader.field(manifest, "tensors", "tensors")) {
    if (!tensors->is_array()) {
      reader.fail("tensors", "must be an array");
    } else {
      std::set<std::string> names;
      for (std::size_t i = 0; i < tensors->size(); ++i) {
        const std::string key = "tensors[" + std::to_string(i) + "]";
        std::optional<TensorEntry> entry = read_tensor_entry(reader, (*tensors)[i], key);
        if (!entry) continue;
        if (!names.insert(entry->name).second) {
          reader.fail(key + ".name", "tensor '" + entry->name + "' appears twice");
          continue;
        }
        entries.push_back(std::move(*entry));
      }
    }
  }
  if (!result.ok()) return result;

  for (const TensorEntry& entry : entries) {
    if (std::optional<TensorBlob> tensor = read_tensor(directory, entry, problems)) {
      contents.tensors.push_back(std::move(*tensor));
    }
  }
  if (seal_problem && !has_errors(problems)) problems.push_back(*seal_problem);
  return result;
}

namespace {

// The complete checkpoints of `dir`, newest (highest step) first; warnings for incomplete ones.
Loaded<std::vector<fs::path>> complete_checkpoints(const std::string& dir) {
  Loaded<std::vector<fs::path>> result;
  std::error_code error;
  if (!fs::exists(dir, error)) return result;
  fs::directory_iterator entries(dir, error);
  if (error) {
    result.problems.push_back({Severity::error, dir, "cannot list the checkpoint directory: " + error.message()});
    return result;
  }
  // Directory order is unspecified; sorting keeps the warnings in a stable order.
  std::vector<fs::path> directories;
  for (const fs::directory_entry& entry : entries) {
    if (entry.is_directory(error)) directories.push_back(entry.path());
  }
  std::sort(directories.begin(), directories.end());
  std::vector<std::pair<std::int64_t, fs::path>> complete;
  // The first few incomplete ones are named; the rest are counted (3,000 empty step folders gave
  // 3,000 warning lines).
  constexpr std::size_t kNamed = 3;
  std::size_t incomplete = 0;
  const auto ignore = [&](const fs::path& directory, const char* why) {
    if (++incomplete <= kNamed) result.problems.push_back({Severity::warning, directory.string(), why});
  };
  for (const fs::path& directory : directories) {
    bool temporary = false;
    const std::optional<std::int64_t> step = parse_directory_name(directory.filename().string(), temporary);
    if (!step) continue;
    if (temporary) {
      ignore(directory, "incomplete checkpoint (the save stopped before its rename), ignored");
      continue;
    }
    if (!fs::exists(directory / complete_file_name, error)) {
      ignore(directory, "incomplete checkpoint: no COMPLETE marker, ignored");
      continue;
    }
    complete.emplace_back(*step, directory);
  }
  if (incomplete > kNamed) {
    result.problems.push_back({Severity::warning, dir,
                               std::to_string(incomplete - kNamed) + " more incomplete checkpoints, ignored"});
  }
  std::stable_sort(complete.begin(), complete.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [step, directory] : complete) result.value.push_back(std::move(directory));
  return result;
}

}  // namespace

Loaded<std::optional<std::string>> latest_checkpoint(const std::string& dir) {
  Loaded<std::vector<fs::path>> found = complete_checkpoints(dir);
  Loaded<std::optional<std::string>> result;
  result.problems = std::move(found.problems);
  if (!found.value.empty()) result.value = found.value.front().string();
  return result;
}

Loaded<std::optional<ResumePoint>> load_latest_checkpoint(const std::string& dir) {
  Loaded<std::vector<fs::path>> found = complete_checkpoints(dir);
  Loaded<std::optional<ResumePoint>> result;
  result.problems = std::move(found.problems);
  if (!result.ok()) return result;
  std::vector<std::string> damaged;
  for (const fs::path& directory : found.value) {
    Loaded<CheckpointContents> loaded = load_checkpoint(directory.string());
    if (loaded.ok()) {
      result.value = ResumePoint{directory.string(), std::move(loaded.value), std::move(damaged)};
      return result;
    }
    const auto first_error = std::find_if(loaded.problems.begin(), loaded.problems.end(),
                                          [](const Problem& p) { return p.severity == Severity::error; });
    result.problems.push_back({Severity::warning, directory.string(),
                               "skipped, an older checkpoint is tried instead: " + describe(*first_error)});
    damaged.push_back(directory.string());
  }
  if (!found.value.empty()) {
    result.problems.push_back({Severity::error, dir,
                               "no checkpoint here loads (" + std::to_string(found.value.size()) +
                                   " complete, every one damaged; see the warnings above)"});
  }
  return result;
}

Problems set_checkpoint_aside(const std::string& path) {
  std::error_code error;
  std::string target = path + ".damaged";
  for (int n = 2; fs::exists(target, error); ++n) target = path + ".damaged-" + std::to_string(n);
  fs::rename(path, target, error);
  if (error) return {{Severity::error, path, "cannot move the damaged checkpoint aside: " + error.message()}};
  return {{Severity::warning, path, "damaged: moved aside to " + target + " (its step will be saved again)"}};
}

}  // namespace meshplan::exec
