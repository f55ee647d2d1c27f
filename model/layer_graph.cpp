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
  double largest = 0;
  const std::vector<int> layers = layer_blocks();
  for (std::size_t i = 0; i + 1 < layers.size(); ++i) largest = std::max(largest, boundary_elements_per_sample(layers[i]));
  return largest;
}

OpId LayerGraph::add_op(Op op) {
  const int block = op.block;
  const OpId id = boost::add_vertex(std::move(op), graph);
  blocks.at(static_cast<std::size_t>(block)).ops.push_back(id);
  return id;
}

void LayerGraph::connect(OpId from, OpId to) {
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
