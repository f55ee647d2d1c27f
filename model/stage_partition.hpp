// Pipeline stage partition: the model's layer blocks cut into pp x v chunks
// (v = virtual stages of the interleaved schedule, 1 otherwise). Chunk c runs
// on pipeline stage c mod pp (Narayanan et al. 2021, Sec. 2.2.2), so stage r
// holds chunks r, r + pp, r + 2 pp, ... The embedding goes with chunk 0 and
// the head (final norm, output layer, loss) with the last chunk.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layer_graph.hpp"
#include "model/problem.hpp"

namespace meshplan {

struct StagePartition {
  std::int64_t stages = 1;            // pp
  std::int64_t chunks_per_stage = 1;  // v
  std::vector<std::vector<int>> chunk_blocks;  // layer block ids of each chunk, in order

  std::int64_t chunk_count() const { return stages * chunks_per_stage; }
  std::int64_t stage_of_chunk(std::int64_t chunk) const { return chunk % stages; }
  // Every block stage `stage` runs: its chunks' layers, plus the embedding on
  // stage 0 and the head on the last stage.
  std::vector<int> blocks_on_stage(const LayerGraph& graph, std::int64_t stage) const;
  std::int64_t layers_on_stage(std::int64_t stage) const;
};

// Even split when `layers_per_chunk` is empty (the layer count must divide by
// pp x v); otherwise one entry per chunk, summing to the layer count. Problems
// name the plan fields "mesh.pp", "schedule" and "stage_layers".
Loaded<StagePartition> partition_stages(const LayerGraph& graph, std::int64_t pp, std::int64_t v,
                                        const std::vector<std::int64_t>& layers_per_chunk);

}  // namespace meshplan
