// Parsing of the shared plan/sweep flags (search_options.hpp). Lists are
// split strictly (an empty item is an error, not skipped) and every value is
// checked against the words the model library accepts, so that a typo names
// its flag before any search starts.
#include "cli/search_options.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>

#include "cli/plan_options.hpp"
#include "model/plan_defaults.hpp"
#include "model/mesh.hpp"
#include "model/default_batch.hpp"
#include "model/layer_graph.hpp"
#include "model/validate.hpp"
#include "model/suggest.hpp"
#include "model/text.hpp"

namespace meshplan::cli {
namespace {


std::string join(const std::vector<std::string>& words, const char* separator = ",") {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : separator) + w;
  return out;
}

void add_prefixed(Problems& into, const Problems& from, const std::string& flag) {
  for (auto p : from) {
    p.where = flag + " " + p.where;
    into.push_back(std::move(p));
  }
}

template <typename T, typename Parse>
std::vector<T> parse_words(const std::string& text, const std::string& flag, const std::string& allowed, Parse parse,
                           Problems& problems) {
  std::vector<T> out;
  auto words = split_list(text, flag);
  problems.insert(problems.end(), words.problems.begin(), words.problems.end());
  for (const auto& word : words.value) {
    if (auto value = parse(word)) {
      if (std::find(out.begin(), out.end(), *value) == out.end()) out.push_back(*value);
    } else {
      problems.push_back({Severity::error, flag, "'" + word + "' is not one of: " + allowed + did_you_mean(word, choice_words(allowed))});
    }
  }
  return out;
}

Loaded<SearchSpace> resolve_space(const SearchFlags& f) {
  Loaded<SearchSpace> result;
  Problems& problems = result.problems;
  SearchSpace& space = result.value;

  if (trim(f.axes).empty()) {
    space.axes.clear();  // each job's model picks them (resolve_jobs)
  } else {
    space.axes = parse_words<Axis>(f.axes, "--axes", "dp, fsdp, tp, pp, cp, ep",
                                   [](const std::string& w) { return parse_axis(w); }, problems);
    if (space.axes.empty() && !has_errors(problems)) problems.push_back({Severity::error, "--axes", "name at least one axis"});
  }

  for (const auto& [flag, value] : {std::pair{"--max-tp", f.max_tp}, std::pair{"--max-pp", f.max_pp},
                                    std::pair{"--max-cp", f.max_cp}, std::pair{"--max-ep", f.max_ep}}) {
    if (value < 0) problems.push_back({Severity::error, flag, "must be 0 (no limit of its own) or more, got " + std::to_string(value)});
  }
  space.max_tp = f.max_tp;
  space.max_pp = f.max_pp;
  space.max_cp = f.max_cp;
  space.max_ep = f.max_ep;

  if (!trim(f.micro_batches).empty()) {
    auto sizes = parse_int_list(f.micro_batches, "--micro-batches", 1, std::int64_t{1} << 20);
    problems.insert(problems.end(), sizes.problems.begin(), sizes.problems.end());
    space.micro_batches = sizes.value;
  }

  auto zero = parse_int_list(f.zero, "--zero", 0, 3);
  problems.insert(problems.end(), zero.problems.begin(), zero.problems.end());
  space.zero_stages.clear();
  for (auto z : zero.value) space.zero_stages.push_back(static_cast<int>(z));

  space.recomputes = parse_words<Recompute>(f.recompute, "--recompute", std::string(recompute_choices),
                                            [](const std::string& w) { return parse_recompute(w); }, problems);
  space.attentions = parse_words<Attention>(f.attention, "--attention", std::string(attention_choices),
                                            [](const std::string& w) { return parse_attention(w); }, problems);
  if (auto c = parse_cp_comm_flag(trim(f.cp_comm), problems)) space.cp_comm = *c;
  if (space.cp_comm != CpComm::ring && std::find(space.axes.begin(), space.axes.end(), Axis::cp) == space.axes.end()) {
    problems.push_back({Severity::warning, "--cp-comm",
                        to_string(space.cp_comm) + " moves keys and values between cp ranks, and --axes does not search "
                        "cp: no effect (add cp to --axes)"});
  }
  space.fp32_gradients = f.fp32_gradients;
  space.bf16_moments = f.bf16_moments;
  space.overlaps = f.overlaps;
  if (const auto modules = parse_recompute_modules_flag(f.recompute_modules, problems)) {
    space.recompute_modules = *modules;
    if (std::find(space.recomputes.begin(), space.recomputes.end(), Recompute::selective) == space.recomputes.end()) {
      problems.push_back({Severity::warning, "--recompute-modules",
                          "names what selective recompute repeats, and --recompute does not search selective: no "
                          "effect (add selective to --recompute)"});
    }
  }
  if (auto l = parse_loss_flag(trim(f.loss), problems)) space.loss = *l;
  if (auto d = parse_ep_dispatch_flag(trim(f.ep_dispatch), problems)) space.ep_dispatch = *d;
  space.expert_tensor_parallel = parse_words<std::int64_t>(
      f.expert_tp, "--expert-tp", std::string(expert_tp_choices), [](const std::string& w) { return parse_expert_tp(w); },
      problems);

  space.schedules.clear();
  auto schedules = split_list(f.schedules, "--schedules");
  problems.insert(problems.end(), schedules.problems.begin(), schedules.problems.end());
  for (const auto& word : schedules.value) {
    std::optional<ScheduleKind> kind;
    if (word == "interleaved") {
      kind = ScheduleKind::interleaved;
    } else if (auto s = parse_schedule(word); s && s->kind != ScheduleKind::interleaved) {
      kind = s->kind;
    }
    if (!kind) {
      problems.push_back({Severity::error, "--schedules",
                          "'" + word + "' is not one of: gpipe, 1f1b, interleaved, zb-h1" +
                              (word.starts_with("interleaved:") ? " (give the interleaving degrees with --interleave)" : "")});
    } else if (std::find(space.schedules.begin(), space.schedules.end(), *kind) == space.schedules.end()) {
      space.schedules.push_back(*kind);
    }
  }

  auto interleave = parse_int_list(f.interleave, "--interleave", 2, 1 << 10);
  problems.insert(problems.end(), interleave.problems.begin(), interleave.problems.end());
  space.interleave = interleave.value;

  space.precisions.clear();
  if (trim(f.precision) != "auto") {
    space.precisions = parse_words<Precision>(f.precision, "--precision", std::string(precision_choices) + " (or auto)",
                                              [](const std::string& w) { return parse_precision(w); }, problems);
  }
  if (!(f.headroom >= 0 && f.headroom < 1)) {
    problems.push_back({Severity::error, "--headroom", "must be a fraction in [0, 1)"});
  }
  space.memory_headroom = f.headroom;
  if (f.threads < 0 || f.threads > 4096) {
    problems.push_back({Severity::error, "--threads", "must be 0 (one per core) to 4096, got " + std::to_string(f.threads)});
  }
  return result;
}

}  // namespace

Loaded<std::vector<std::string>> split_list(const std::string& text, const std::string& flag) {
  Loaded<std::vector<std::string>> result;
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (item.empty()) {
      result.problems.push_back({Severity::error, flag, "empty item in '" + text + "' (expected a comma-separated list)"});
      result.value.clear();
      return result;
    }
    result.value.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return result;
}

Loaded<std::vector<std::int64_t>> parse_int_list(const std::string& text, const std::string& flag,
                                                  std::int64_t min_value, std::int64_t max_value, bool in_order) {
  Loaded<std::vector<std::int64_t>> result;
  auto words = split_list(text, flag);
  result.problems = words.problems;
  for (const auto& word : words.value) {
    const bool digits = word.size() <= 15 && std::all_of(word.begin(), word.end(), [](unsigned char c) { return std::isdigit(c); });
    if (digits && word.size() > 1 && word[0] == '0') {  // as main.cpp refuses for single-number flags
      result.problems.push_back({Severity::error, flag, "'" + word + "': write numbers in decimal, without leading zeros"});
      continue;
    }
    const std::int64_t value = digits ? std::stoll(word) : -1;
    if (!digits || value < min_value || value > max_value) {
      result.problems.push_back({Severity::error, flag,
                                 "'" + word + "' is not a whole number in [" + std::to_string(min_value) + ", " +
                                     std::to_string(max_value) + "]"});
      continue;
    }
    if (in_order || std::find(result.value.begin(), result.value.end(), value) == result.value.end()) {
      result.value.push_back(value);
    }
  }
  return result;
}

void add_job_flags(CLI::App& command, JobFlags& f, bool lists) {
  const std::string several = lists ? " (comma list: the sweep crosses them all)" : "";
  command.add_option("--model", f.models, "Model preset name or YAML file" + several)->capture_default_str();
  command.add_option("--cluster", f.clusters, "Cluster preset name or YAML file" + several)->capture_default_str();
  command.add_option("--gpus", f.gpus, "Devices in the job (world size, 1 to " + std::to_string(kMaxMeshDevices) + ")" + several)->capture_default_str();
  command.add_option("--global-batch", f.global_batches,
                     "Sequences per optimizer step across all ranks" + several +
                         " (default: GPT-3's batch in tokens for the nearest GPT-3 size / the sequence length, 256 "
                         "samples for MLPs and CNNs, at least one per device; docs/cost-model.md)");
  command.add_option("--seq", f.seq, "Training sequence length in tokens (default: the model's seq_len)")
      ->check(sequence_length_check());
}

void add_search_flags(CLI::App& command, SearchFlags& f) {
  command.add_option("--axes", f.axes,
                     "Mesh axes to search over: any of dp, fsdp, tp, pp, cp, ep (default: dp,fsdp,tp,pp, and ep for "
                     "a mixture-of-experts model)");
  command.add_option("--max-tp", f.max_tp, "Largest tp (0: the cluster's devices per node)")->capture_default_str();
  command.add_option("--max-pp", f.max_pp, "Largest pp (0: no limit but the layers)")->capture_default_str();
  command.add_option("--max-cp", f.max_cp, "Largest cp, where --axes has cp (0: no limit but the device count)")
      ->capture_default_str();
  command.add_option("--max-ep", f.max_ep, "Largest ep, where ep is searched (0: no limit but the device count; ep must divide the experts)")
      ->capture_default_str();
  command.add_option("--micro-batches", f.micro_batches,
                     "Micro-batch sizes to try, e.g. 1,2,4 (default: 1, 2, 4, ... 64 that fit the batch)");
  command.add_option("--zero", f.zero, "ZeRO stages on dp to try (0-3)")->capture_default_str();
  command.add_option("--recompute", f.recompute, "Recompute modes to try: none, selective, full, selective-op (torchtitan's op-level checkpointing)")->capture_default_str();
  command.add_option("--attention", f.attention, "Attention kernels to try: fused, unfused")->capture_default_str();
  add_fixed_plan_flags(command, f.cp_comm, f.loss, f.fp32_gradients, f.bf16_moments, f.overlaps, f.ep_dispatch);
  add_recompute_modules_flag(command, f.recompute_modules);
  command.add_option("--expert-tp", f.expert_tp,
                     "Routed experts' tensor parallelism to try: tp (split over tp like the dense layers), 1 (each "
                     "expert whole, the tp ranks in the expert-parallel group, Megatron-Core's "
                     "--expert-tensor-parallel-size 1; tried for mixtures of experts with tp > 1, sequence parallelism "
                     "and ep directly outside tp; elsewhere the experts stay in tp)")
      ->capture_default_str();
  command.add_option("--schedules", f.schedules, "Pipeline schedules to try: gpipe, 1f1b, interleaved, zb-h1")
      ->capture_default_str();
  command.add_option("--interleave", f.interleave, "Model chunks per device (v) for the interleaved schedule")
      ->capture_default_str();
  command.add_option("--precision", f.precision, "Precisions to try: fp32, bf16, fp16, fp8, or auto (bf16 where the device has it)")
      ->capture_default_str();
  command.add_option("--headroom", f.headroom, "Fraction of device memory kept free")->capture_default_str();
  command.add_option("--threads", f.threads, "Search threads (0: one per core)")->capture_default_str();
}

Loaded<std::vector<Job>> resolve_jobs(const JobFlags& f, const SearchFlags& search, bool lists) {
  Loaded<std::vector<Job>> result;
  Problems& problems = result.problems;

  auto space = resolve_space(search);
  problems.insert(problems.end(), space.problems.begin(), space.problems.end());

  auto model_names = split_list(f.models, "--model");
  auto cluster_names = split_list(f.clusters, "--cluster");
  for (auto* names : {&model_names.value, &cluster_names.value}) {  // each once, in the order given
    std::vector<std::string> unique;
    for (const auto& n : *names) {
      if (std::find(unique.begin(), unique.end(), n) == unique.end()) unique.push_back(n);
    }
    *names = unique;
  }
  auto gpus = parse_int_list(f.gpus, "--gpus", 1, kMaxMeshDevices);
  // No --global-batch: each job gets the rule's batch (model/default_batch.hpp), said in its note.
  auto batches = f.global_batches.empty() ? Loaded<std::vector<std::int64_t>>{}
                                          : parse_int_list(f.global_batches, "--global-batch", 1, kMaxGlobalBatch);
  for (const Problems* p : {&model_names.problems, &cluster_names.problems, &gpus.problems, &batches.problems}) {
    problems.insert(problems.end(), p->begin(), p->end());
  }
  if (!lists) {
    const std::pair<const char*, std::size_t> counts[] = {{"--model", model_names.value.size()},
                                                          {"--cluster", cluster_names.value.size()},
                                                          {"--gpus", gpus.value.size()},
                                                          {"--global-batch", batches.value.size()}};
    for (const auto& [flag, count] : counts) {
      if (count > 1) problems.push_back({Severity::error, flag, "takes one value here; meshplan sweep takes comma lists"});
    }
  }
  if (f.seq < 0) problems.push_back({Severity::error, "--seq", "must be positive, got " + std::to_string(f.seq)});

  std::vector<ModelSpec> models;
  for (const auto& name : model_names.value) {
    auto model = load_model(name);
    add_prefixed(problems, model.problems, "--model");
    if (model.ok()) models.push_back(model.value);
  }
  std::vector<ClusterSpec> clusters;
  for (const auto& name : cluster_names.value) {
    auto cluster = load_cluster(name);
    add_prefixed(problems, cluster.problems, "--cluster");
    if (cluster.ok()) clusters.push_back(cluster.value);
  }
  if (has_errors(problems)) return result;

  // Whether each job can be planned at all (job_problems, model/validate.hpp).
  std::set<std::string> seen;
  const bool ep_asked = std::find(space.value.axes.begin(), space.value.axes.end(), Axis::ep) != space.value.axes.end();
  for (const ModelSpec& model : models) {
    const bool dense = !model.has_experts();
    if (ep_asked && dense) {
      // One model: a search that cannot use the axis asked for is bad input; a sweep searches it for the others.
      problems.push_back({lists ? Severity::warning : Severity::error, "--axes",
                          "ep splits a mixture of experts' experts, and " + model.name +
                              " has none: no plan with ep > 1 is valid for it"});
    }
    // Expert settings a dense model's plans cannot use: said, as validation says it of one plan.
    if (dense && trim(search.expert_tp) != SearchFlags{}.expert_tp) {
      problems.push_back({Severity::warning, "--expert-tp", "sets the routed experts' tensor parallelism, and " + model.name +
                                                                " has none: no effect on it"});
    }
    if (dense && space.value.ep_dispatch != SearchSpace{}.ep_dispatch) {
      problems.push_back({Severity::warning, "--ep-dispatch", "moves routed tokens between expert-parallel ranks, and " +
                                                                  model.name + " has no experts: no effect on it"});
    }
    const std::int64_t seq_len = f.seq > 0 ? f.seq : model.default_seq_len();
    const LayerGraph graph = build_layer_graph(model, seq_len);
    for (const ClusterSpec& cluster : clusters) {
      SearchSpace job_space = space.value;
      if (job_space.axes.empty()) job_space.axes = default_search_axes(model);
      if (job_space.precisions.empty()) {
        job_space.precisions = {cluster.device.peak_for(Dtype::bf16) ? Precision::bf16 : Precision::fp32};
      }
      for (std::int64_t world : gpus.value) {
        bool plannable = true;
        for (Precision precision : job_space.precisions) {
          for (const Problem& p : job_problems(model, graph, cluster, world, f.seq, precision, job_space.recompute_modules)) {
            const std::string flag = flag_for_field(p.where);
            plannable = false;
            std::string message = p.message;
            if (models.size() > 1) message += " (" + model.name + ")";  // which of the sweep's models
            if (seen.insert(flag + message).second) problems.push_back({Severity::error, flag, message});
          }
        }
        if (!plannable) continue;
        std::vector<std::int64_t> job_batches = batches.value;
        std::string batch_note;
        if (f.global_batches.empty()) {
          const DefaultBatch chosen = default_global_batch(model, graph.parameter_count(), seq_len, world);
          job_batches = {chosen.sequences};
          batch_note = "no --global-batch: using " + std::to_string(chosen.sequences) + " for " + model.name + " on " +
                       std::to_string(world) + " devices (" + chosen.rule + ")";
        }
        for (std::int64_t batch : job_batches) {
          Job job;
          job.batch_note = batch_note;
          job.model = model;
          job.cluster = cluster;
          job.world_size = world;
          job.global_batch = batch;
          job.seq_len = seq_len;
          job.seq_flag = f.seq;
          job.space = job_space;
          result.value.push_back(std::move(job));
        }
      }
    }
  }
  return result;
}

std::string describe_space(const SearchSpace& space) {
  std::vector<std::string> axes, zero, recompute, schedules, precisions, attentions;
  for (Attention a : space.attentions) attentions.push_back(to_string(a));
  for (Axis a : space.axes) axes.push_back(to_string(a));
  for (int z : space.zero_stages) zero.push_back(std::to_string(z));
  // What the search leaves out as another plan it tries (search_leaves_out): selective under fused attention.
  bool dropped_selective = false;
  for (Recompute r : space.recomputes) {
    std::size_t left_out = 0;
    for (Attention a : space.attentions) left_out += search_leaves_out(space, r, a) ? 1 : 0;
    if (left_out > 0 && left_out == space.attentions.size()) {
      dropped_selective = true;
      continue;
    }
    const bool modules = r == Recompute::selective && space.recompute_modules != kDefaultRecomputeModules;
    recompute.push_back(to_string(r) + (modules ? " (" + recompute_modules_text(space.recompute_modules) + ")" : "") +
                        (left_out > 0 ? " (unfused attention only)" : ""));
  }
  if (dropped_selective) recompute.back() += " (selective: the same plans as none with fused attention)";
  for (ScheduleKind k : space.schedules) {
    if (k == ScheduleKind::interleaved) {
      std::vector<std::string> vs;
      for (auto v : space.interleave) vs.push_back(std::to_string(v));
      schedules.push_back("interleaved:" + join(vs, "/"));
    } else {
      schedules.push_back(to_string(Schedule{k, 1}));
    }
  }
  for (Precision p : space.precisions) precisions.push_back(to_string(p));
  std::string micro = "1-64";
  if (!space.micro_batches.empty()) {
    std::vector<std::string> sizes;
    for (auto b : space.micro_batches) sizes.push_back(std::to_string(b));
    micro = join(sizes);
  }
  std::string limits;
  if (space.max_tp > 0) limits += ", tp <= " + std::to_string(space.max_tp);
  if (space.max_pp > 0) limits += ", pp <= " + std::to_string(space.max_pp);
  if (space.max_cp > 0) limits += ", cp <= " + std::to_string(space.max_cp);
  if (space.max_ep > 0) limits += ", ep <= " + std::to_string(space.max_ep);
  return "axes " + join(axes) + limits + "; micro-batch " + micro + "; zero " + join(zero) + "; recompute " +
         join(recompute) + "; attention " + join(attentions) + "; schedules " + join(schedules) + "; precision " +
         join(precisions) + (std::find(space.axes.begin(), space.axes.end(), Axis::cp) != space.axes.end()
                                 ? "; cp " + to_string(space.cp_comm)
                                 : "") +
         (space.fp32_gradients ? "; fp32 gradients" : "") + (space.bf16_moments ? "; bf16 moments" : "") + overlaps_searched(space.overlaps) + "; loss " + to_string(space.loss) +
         (space.ep_dispatch != EpDispatch::all_to_all ? "; ep dispatch " + to_string(space.ep_dispatch) : "") +
         (space.expert_tensor_parallel.size() == 1
              ? std::string("; expert tp ") + (space.expert_tensor_parallel[0] == 1 ? "1" : "tp")
              : "");
}

}  // namespace meshplan::cli
