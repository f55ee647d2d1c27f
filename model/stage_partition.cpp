#include "model/stage_partition.hpp"

#include <algorithm>
#include <limits>
#include <functional>
#include <numeric>
#include <queue>
#include <utility>

namespace meshplan {
namespace {

// Time outside the layers that stage `stage` of `pp` carries.
double stage_extra_s(std::int64_t stage, std::int64_t pp, double embedding_s, double head_s) {
  return (stage == 0 ? embedding_s : 0.0) + (stage == pp - 1 ? head_s : 0.0);
}

// Layer counts per stage for identical layers of `layer_s` each: every stage
// starts with `minimum` layers, then each further layer goes to the stage
// whose time after taking it is least (the lowest stage on a tie). Adding
// identical items one at a time where they raise the maximum least minimises
// the maximum (an exchange argument: any allocation with a smaller maximum
// would have to leave some greedy step a cheaper stage to choose).
std::vector<std::int64_t> fill_stage_counts(std::int64_t layers, double layer_s, double embedding_s, double head_s,
                                            std::int64_t pp, std::int64_t minimum) {
  std::vector<std::int64_t> count(static_cast<std::size_t>(pp), minimum);
  auto after_s = [&](std::int64_t r) {
    return stage_extra_s(r, pp, embedding_s, head_s) + layer_s * static_cast<double>(count[static_cast<std::size_t>(r)] + 1);
  };
  // The stages by (time after one more layer, stage): the least first, the
  // lowest stage on a tie, so O(layers log pp) rather than a scan per layer.
  using Next = std::pair<double, std::int64_t>;
  std::priority_queue<Next, std::vector<Next>, std::greater<Next>> next;
  for (std::int64_t r = 0; r < pp; ++r) next.push({after_s(r), r});
  for (std::int64_t left = layers - pp * minimum; left > 0; --left) {
    const std::int64_t pick = next.top().second;
    next.pop();
    ++count[static_cast<std::size_t>(pick)];
    next.push({after_s(pick), pick});
  }
  return count;
}

// Contiguous split of the layers into pp stages of at least one layer each
// minimising the slowest stage: best[r][i] is the least possible slowest
// stage when stages 0..r hold layers [0, i). Stage r's candidate starts j are
// walked downwards and the walk stops once stage r alone is no faster than
// the best found, so the work is about pp x layers x (layers per stage).
std::vector<std::int64_t> split_contiguous(std::span<const double> layer_s, double embedding_s, double head_s,
                                           std::int64_t pp) {
  const auto layers = static_cast<std::int64_t>(layer_s.size());
  const auto width = static_cast<std::size_t>(layers + 1);
  std::vector<double> prefix_s(width, 0.0);
  for (std::size_t i = 0; i < layer_s.size(); ++i) prefix_s[i + 1] = prefix_s[i] + layer_s[i];
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> best(static_cast<std::size_t>(pp) * width, inf);
  std::vector<std::int64_t> start(static_cast<std::size_t>(pp) * width, 0);
  auto at = [&](std::int64_t r, std::int64_t i) { return static_cast<std::size_t>(r) * width + static_cast<std::size_t>(i); };
  for (std::int64_t i = 1; i <= layers - (pp - 1); ++i) {
    best[at(0, i)] = stage_extra_s(0, pp, embedding_s, head_s) + prefix_s[static_cast<std::size_t>(i)];
  }
  for (std::int64_t r = 1; r < pp; ++r) {
    const double extra_s = stage_extra_s(r, pp, embedding_s, head_s);
    for (std::int64_t i = r + 1; i <= layers - (pp - 1 - r); ++i) {
      double best_s = inf;
      std::int64_t best_start = i - 1;
      for (std::int64_t j = i - 1; j >= r; --j) {
        const double stage_s = extra_s + prefix_s[static_cast<std::size_t>(i)] - prefix_s[static_cast<std::size_t>(j)];
        if (stage_s >= best_s) break;  // earlier starts only make stage r slower
        const double slowest_s = std::max(best[at(r - 1, j)], stage_s);
        if (slowest_s < best_s) {
          best_s = slowest_s;
          best_start = j;
        }
      }
      best[at(r, i)] = best_s;
      start[at(r, i)] = best_start;
    }
  }
  std::vector<std::int64_t> count(static_cast<std::size_t>(pp), 0);
  std::int64_t end = layers;
  for (std::int64_t r = pp - 1; r > 0; --r) {
    const std::int64_t begin = start[at(r, end)];
    count[static_cast<std::size_t>(r)] = end - begin;
    end = begin;
  }
  count[0] = end;
  return count;
}

}  // namespace

std::int64_t chunk_layers(std::int64_t layer_count, std::int64_t chunks,
                          const std::vector<std::int64_t>& layers_per_chunk, std::int64_t chunk) {
  if (!layers_per_chunk.empty()) return layers_per_chunk[static_cast<std::size_t>(chunk)];
  return (chunk + 1) * layer_count / chunks - chunk * layer_count / chunks;
}

std::int64_t stage_of_layer(std::int64_t layer_count, std::int64_t pp, std::int64_t v,
                            const std::vector<std::int64_t>& layers_per_chunk, std::int64_t layer) {
  pp = std::max<std::int64_t>(pp, 1);
  // Walks the given counts when there are any (a plan validation refuses may have the wrong number).
  const std::int64_t chunks = layers_per_chunk.empty() ? pp * std::max<std::int64_t>(v, 1)
                                                       : static_cast<std::int64_t>(layers_per_chunk.size());
  std::int64_t end = 0;
  for (std::int64_t c = 0; c < chunks; ++c) {
    end += chunk_layers(layer_count, chunks, layers_per_chunk, c);
    if (layer < end) return c % pp;
  }
  return (chunks - 1) % pp;
}

std::int64_t stage_of_layer(std::int64_t layer_count, const Plan& plan, std::int64_t layer) {
  return stage_of_layer(layer_count, plan.mesh.size(Axis::pp), plan.schedule.virtual_stages, plan.stage_layers, layer);
}

std::vector<int> StagePartition::blocks_on_stage(const LayerGraph& graph, std::int64_t stage) const {
  std::vector<int> out;
  for (std::size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].kind == BlockKind::embedding && stage == 0) out.push_back(static_cast<int>(b));
  }
  for (std::int64_t c = stage; c < chunk_count(); c += stages) {
    const auto& blocks = chunk_blocks[static_cast<std::size_t>(c)];
    out.insert(out.end(), blocks.begin(), blocks.end());
  }
  for (std::size_t b = 0; b < graph.blocks.size(); ++b) {
    if (graph.blocks[b].kind == BlockKind::head && stage == stages - 1) out.push_back(static_cast<int>(b));
  }
  return out;
}

std::int64_t StagePartition::layers_on_stage(std::int64_t stage) const {
  std::int64_t count = 0;
  for (std::int64_t c = stage; c < chunk_count(); c += stages) {
    count += static_cast<std::int64_t>(chunk_blocks[static_cast<std::size_t>(c)].size());
  }
  return count;
}

Loaded<StagePartition> partition_stages(const LayerGraph& graph, std::int64_t pp, std::int64_t v,
                                        const std::vector<std::int64_t>& layers_per_chunk) {
  Loaded<StagePartition> result;
  const std::vector<int> layers = graph.layer_blocks();
  const auto layer_count = static_cast<std::int64_t>(layers.size());
  if (pp < 1 || v < 1) {
    result.problems.push_back({Severity::error, "mesh.pp", "pipeline size and virtual stages must be at least 1"});
    return result;
  }
  const std::int64_t chunks = pp * v;
  std::vector<std::int64_t> sizes = layers_per_chunk;
  if (sizes.empty()) {
    if (chunks > layer_count) {
      result.problems.push_back({Severity::error, v > 1 ? "schedule" : "mesh.pp",
                                 "pp x v = " + std::to_string(chunks) + " pipeline chunks but the model has only " +
                                     std::to_string(layer_count) + " layers"});
      return result;
    }
    if (layer_count % chunks != 0) {
      result.problems.push_back(
          {Severity::error, v > 1 ? "schedule" : "mesh.pp",
           std::to_string(layer_count) + " layers do not divide evenly into pp x v = " + std::to_string(chunks) +
               " chunks; choose pp (x v) dividing " + std::to_string(layer_count) +
               " or state the partition with stage_layers (" + std::to_string(chunks) + " counts summing to " +
               std::to_string(layer_count) + ")"});
      return result;
    }
    for (std::int64_t c = 0; c < chunks; ++c) sizes.push_back(chunk_layers(layer_count, chunks, {}, c));
  } else {
    if (static_cast<std::int64_t>(sizes.size()) != chunks) {
      result.problems.push_back({Severity::error, "stage_layers",
                                 "has " + std::to_string(sizes.size()) + " entries; needs pp x v = " +
                                     std::to_string(chunks)});
      return result;
    }
    bool positive = true;
    for (auto n : sizes) positive = positive && n >= 1;
    const std::int64_t sum = std::accumulate(sizes.begin(), sizes.end(), std::int64_t{0});
    if (!positive || sum != layer_count) {
      result.problems.push_back({Severity::error, "stage_layers",
                                 "entries must be at least 1 and sum to the model's " + std::to_string(layer_count) +
                                     " layers (they sum to " + std::to_string(sum) + ")"});
      return result;
    }
  }
  result.value.stages = pp;
  result.value.chunks_per_stage = v;
  std::size_t next = 0;
  for (auto n : sizes) {
    std::vector<int> chunk(layers.begin() + static_cast<std::ptrdiff_t>(next),
                           layers.begin() + static_cast<std::ptrdiff_t>(next + static_cast<std::size_t>(n)));
    next += static_cast<std::size_t>(n);
    result.value.chunk_blocks.push_back(std::move(chunk));
  }
  return result;
}

std::vector<std::int64_t> balanced_stage_layers(std::span<const double> layer_s, double embedding_s, double head_s,
                                                std::int64_t pp, std::int64_t v) {
  const auto layers = static_cast<std::int64_t>(layer_s.size());
  if (pp < 1 || v < 1 || pp * v > layers) return {};
  const bool uniform = std::all_of(layer_s.begin(), layer_s.end(), [&](double s) { return s == layer_s.front(); });
  if (v == 1 && !uniform) return split_contiguous(layer_s, embedding_s, head_s, pp);
  const double mean_s = std::accumulate(layer_s.begin(), layer_s.end(), 0.0) / static_cast<double>(layers);
  const std::vector<std::int64_t> per_stage = fill_stage_counts(layers, mean_s, embedding_s, head_s, pp, v);
  std::vector<std::int64_t> per_chunk(static_cast<std::size_t>(pp * v), 0);
  for (std::int64_t r = 0; r < pp; ++r) {
    const std::int64_t n = per_stage[static_cast<std::size_t>(r)];
    for (std::int64_t j = 0; j < v; ++j) {
      // Stage 0 hands its extra layers to its last chunks (chunk 0 has the
      // embedding); the others to their first (the last chunk has the head).
      const std::int64_t rank = r == 0 ? v - 1 - j : j;
      per_chunk[static_cast<std::size_t>(r + j * pp)] = n / v + (rank < n % v ? 1 : 0);
    }
  }
  return per_chunk;
}

std::string stage_layers_text(const std::vector<std::int64_t>& layers_per_chunk) {
  std::string text;
  for (std::size_t i = 0; i < layers_per_chunk.size();) {
    std::size_t run = 1;
    while (i + run < layers_per_chunk.size() && layers_per_chunk[i + run] == layers_per_chunk[i]) ++run;
    const std::string value = std::to_string(layers_per_chunk[i]);
    if (!text.empty()) text += ",";
    if (run >= 3) {
      text += value + "x" + std::to_string(run);
    } else {
      text += value;
      if (run == 2) text += "," + value;
    }
    i += run;
  }
  return text;
}

}  // namespace meshplan
