#include "model/layer_graph.hpp"

#include <algorithm>
#include <set>

namespace meshplan {

std::string to_string(OpKind kind) {
  switch (kind) {
    case OpKind::gemm: return "gemm";
    case OpKind::attention_scores: return "attention_scores";
    case OpKind::attention_values: return "attention_values";
    case OpKind::softmax: return "softmax";
    case OpKind::norm: return "norm";
    case OpKind::elementwise: return "elementwise";
    case OpKind::activation: return "activation";
    case OpKind::embedding: return "embedding";
    case OpKind::cross_entropy: return "cross_entropy";
    case OpKind::conv: return "conv";
    case OpKind::pool: return "pool";
  }
  return "?";
}

std::vector<int> LayerGraph::layer_blocks() const {
  std::vector<int> out;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    if (blocks[i].kind == BlockKind::layer) out.push_back(static_cast<int>(i));
  }
  return out;
}

double LayerGraph::parameter_count() const {
  double total = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(graph))) {
    total += graph[v].tp_split_parameters + graph[v].kv_parameters + graph[v].replicated_parameters;
  }
  return total;
}

double LayerGraph::boundary_elements_per_sample(int block) const {
  if (block < 0) return 0;  // before the first block nothing has been made
  if (boundary_index.size() == blocks.size() && static_cast<std::size_t>(block) < boundary_index.size()) {
    return boundary_index[static_cast<std::size_t>(block)];
  }
  double total = 0;
  for (auto v : boost::make_iterator_range(boost::vertices(graph))) {
    if (graph[v].block > block) continue;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, graph))) {
      if (graph[boost::target(e, graph)].block > block) {
        total += graph[v].output_elements_per_sample;  // one tensor, sent once however many read it
        break;
      }
    }
  }
  return total;
}

double LayerGraph::largest_stage_boundary_elements_per_sample() const {
  if (boundary_index.size() == blocks.size()) return largest_boundary_index;
  double largest = 0;
  const std::vector<int> layers = layer_blocks();
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) largest = std::max(largest, boundary_elements_per_sample(layers[i]));
  return largest;
}

void LayerGraph::index_boundaries() {
  boundary_index.clear();
  // A tensor made in block b and last read in block c > b crosses the
  // boundaries after blocks b .. c - 1: add it over that range. Summed per
  // block in vertex order, as the unindexed walk sums it.
  const std::size_t n = blocks.size();
  std::vector<std::vector<std::pair<int, double>>> starting(n);  // per first block: (last block, elements)
  for (auto v : boost::make_iterator_range(boost::vertices(graph))) {
    int last = graph[v].block;
    for (auto e : boost::make_iterator_range(boost::out_edges(v, graph))) last = std::max(last, graph[boost::target(e, graph)].block);
    if (last > graph[v].block) starting.at(static_cast<std::size_t>(graph[v].block)).push_back({last, graph[v].output_elements_per_sample});
  }
  std::vector<double> index(n, 0.0);
  std::vector<std::pair<int, double>> open;  // tensors crossing the current boundary, in vertex order
  for (std::size_t b = 0; b < n; ++b) {
    std::erase_if(open, [&](const auto& t) { return static_cast<std::size_t>(t.first) <= b; });
    open.insert(open.end(), starting[b].begin(), starting[b].end());
    double total = 0;
    for (const auto& t : open) total += t.second;
    index[b] = total;
  }
  double largest = 0;
  const std::vector<int> layers = layer_blocks();
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) largest = std::max(largest, index[static_cast<std::size_t>(layers[i])]);
  boundary_index = std::move(index);
  largest_boundary_index = largest;
}

OpId LayerGraph::add_op(Op op) {
  boundary_index.clear();
  const int block = op.block;
  const OpId id = boost::add_vertex(std::move(op), graph);
  blocks.at(static_cast<std::size_t>(block)).ops.push_back(id);
  return id;
}

void LayerGraph::connect(OpId from, OpId to) {
  boundary_index.clear();
  boost::add_edge(from, to, TensorEdge{graph[from].output_elements_per_sample}, graph);
}

LayerGraph build_layer_graph(const ModelSpec& model, std::int64_t seq_len) {
  switch (model.kind) {
    case ModelKind::transformer: return build_transformer_graph(model.transformer, seq_len);
    case ModelKind::mlp: return build_mlp_graph(model.mlp);
    case ModelKind::cnn: return build_cnn_graph(model.cnn);
  }
  return {};
}

}  // namespace meshplan
