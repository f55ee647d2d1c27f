#include "model/stage_partition.hpp"

#include <numeric>

namespace meshplan {

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
    sizes.assign(static_cast<std::size_t>(chunks), layer_count / chunks);
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

}  // namespace meshplan
