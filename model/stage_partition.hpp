// Pipeline stage partition: the model's layer blocks cut into pp x v chunks
// (v = virtual stages of the interleaved schedule, 1 otherwise). Chunk c runs
// on pipeline stage c mod pp (Narayanan et al. 2021, Sec. 2.2.2), so stage r
// holds chunks r, r + pp, r + 2 pp, ... The embedding goes with chunk 0 and
// the head (final norm, output layer, loss) with the last chunk.
// balanced_stage_layers chooses the layer counts when pp x v does not divide
// the layers, or when the embedding and head make an even split lopsided:
// the search minimises the slowest stage, as Megatron-LM's
// --decoder-first/last-pipeline-num-layers let a user do by hand.
// chunk_layers and stage_of_layer are the one answer to "which stage holds
// layer l": the partition, the sharding spec (model/sharding_spec.hpp) and
// the evaluator all cut the layers with them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
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

// Layers in chunk `chunk` of `chunks` (pp x v): layers_per_chunk[chunk] when
// given, else an even split, chunk c holding layers [c L / n, (c + 1) L / n)
// of L = layer_count, n = chunks (L / n each when n divides L, which
// partition_stages requires; the rule only keeps every layer placed for a
// plan that validation refuses). Allocation-free: the search calls it.
std::int64_t chunk_layers(std::int64_t layer_count, std::int64_t chunks,
                          const std::vector<std::int64_t>& layers_per_chunk, std::int64_t chunk);

// The pipeline stage that runs layer `layer` (0-based) of `layer_count`: the
// stage of the chunk holding it, chunk c on stage c mod pp. The Plan form
// reads pp, v (schedule.virtual_stages) and stage_layers from the plan.
std::int64_t stage_of_layer(std::int64_t layer_count, std::int64_t pp, std::int64_t v,
                            const std::vector<std::int64_t>& layers_per_chunk, std::int64_t layer);
std::int64_t stage_of_layer(std::int64_t layer_count, const Plan& plan, std::int64_t layer);

// Even split when `layers_per_chunk` is empty (the layer count must divide by
// pp x v); otherwise one entry per chunk, summing to the layer count. Problems
// name the plan fields "mesh.pp", "schedule" and "stage_layers".
Loaded<StagePartition> partition_stages(const LayerGraph& graph, std::int64_t pp, std::int64_t v,
                                        const std::vector<std::int64_t>& layers_per_chunk);

// Layers per chunk (pp x v entries, chunk order, each >= 1, summing to
// layer_s.size()) that minimise the slowest stage's time, where stage r's time
// is the sum of its layers' `layer_s` plus `embedding_s` on stage 0 and
// `head_s` on stage pp - 1 (any consistent unit). Empty when pp x v exceeds
// the layer count. Exact for v = 1 (dynamic programme over contiguous
// splits). For v > 1 a stage's chunks are not adjacent: stages get layer
// counts by water-filling at the mean layer time (exact when all layers cost
// the same), and each stage's count is cut into v near-equal chunks, the
// extra layers kept off the embedding's and the head's chunks.
// docs/cost-model.md, "Balanced uneven partition".
std::vector<std::int64_t> balanced_stage_layers(std::span<const double> layer_s, double embedding_s, double head_s,
                                                std::int64_t pp, std::int64_t v);

// "15,16x6,15": chunk layer counts with runs folded, for tables.
std::string stage_layers_text(const std::vector<std::int64_t>& layers_per_chunk);

}  // namespace meshplan
