// The two small model kinds: a multi-layer perceptron (a plain classifier and a
// Fashion-MNIST classifier) and a ResNet with bottleneck blocks (He et al.
// 2016, Table 1; torchvision's v1.5 puts the stride on the 3x3 convolution).
//
// Tensor parallelism for the MLP alternates Megatron column- and
// row-parallel linears (even-numbered linears split their outputs, odd ones
// their inputs), so one all-reduce follows each pair. CNNs are data-parallel
// only (the validator says so); their ops still carry FLOPs and activations.
#include "model/layer_graph.hpp"

#include <optional>

namespace meshplan {
namespace {

// A classifier's softmax cross-entropy over `classes` logits: ~5 FLOPs a
// logit, the fp32 logits kept for the backward (or not, by the plan's loss:
// plan.hpp, Loss), three fp32 buffers of them at its peak. `split`: the
// logits are split over tp (the MLP's last layer column-parallel).
Op classification_loss(int head, double classes, bool split) {
  Op loss = make_op("head.loss", OpKind::cross_entropy, head);
  loss.forward_flops_per_sample = 5 * classes;
  loss.output_elements_per_sample = 1;
  SavedTensor logits{"logits (fp32)", classes, 4, split, false};
  logits.loss_logits = true;
  loss.saved = {logits};
  loss.memory_fixed_bytes_per_sample = 3 * 4 * classes;
  loss.tensor_parallel_region = split;
  return loss;
}

}  // namespace

LayerGraph build_mlp_graph(const MlpDims& dims) {
  LayerGraph g;
  g.seq_len = 1;
  std::optional<OpId> prev;
  const std::size_t linears = dims.layer_sizes.size() - 1;
  bool last_is_column = true;
  for (std::size_t i = 0; i < linears; ++i) {
    const double in = static_cast<double>(dims.layer_sizes[i]);
    const double out = static_cast<double>(dims.layer_sizes[i + 1]);
    const bool column = i % 2 == 0;
    last_is_column = column;
    const int block = static_cast<int>(g.blocks.size());
    const std::string name = "linear" + std::to_string(i);
    g.blocks.push_back({name, BlockKind::layer, {}});

    Op linear = make_op(name, OpKind::gemm, block);
    linear.tp_split_parameters = in * out + (column ? out : 0);
    linear.replicated_parameters = column ? 0 : out;  // a row-parallel bias is added after the all-reduce
    linear.forward_flops_per_sample = 2 * in * out;
    linear.output_elements_per_sample = out;
    linear.saved = {{name + " input", in, 0, !column, false}};
    linear.gemm = {1, dims.layer_sizes[i + 1], dims.layer_sizes[i], 1};
    linear.tp_split = column ? TpSplit::columns : TpSplit::rows;
    OpId id = g.add_op(linear);
    if (prev) g.connect(*prev, id);
    prev = id;

    if (i + 1 < linears) {
      Op act = make_op(name + "." + dims.activation, dims.activation == "gelu" ? OpKind::activation : OpKind::elementwise, block);
      act.forward_flops_per_sample = dims.activation == "gelu" ? 8 * out : out;
      act.output_elements_per_sample = out;
      act.saved = {{name + " activation output", out, 0, column, false}};
      act.memory_elements_per_sample = 2 * out;
      act.tensor_parallel_region = column;
      id = g.add_op(act);
      g.connect(*prev, id);
      prev = id;
    }
  }
  const int head = static_cast<int>(g.blocks.size());
  g.blocks.push_back({"head", BlockKind::head, {}});
  const OpId id = g.add_op(classification_loss(head, static_cast<double>(dims.layer_sizes.back()), last_is_column));
  if (prev) g.connect(*prev, id);
  g.index_boundaries();
  return g;
}

namespace {

// Adds conv + batch norm (+ ReLU) at the current resolution; returns the last op.
struct CnnBuilder {
  LayerGraph& g;
  int block = 0;
  std::string prefix;

  OpId conv_bn(std::optional<OpId> input, const std::string& name, std::int64_t in_channels,
               std::int64_t out_channels, std::int64_t kernel, std::int64_t in_size, std::int64_t out_size,
               bool relu) {
    const double cin = static_cast<double>(in_channels), cout = static_cast<double>(out_channels);
    const double k2 = static_cast<double>(kernel * kernel);
    const double in_pixels = static_cast<double>(in_size * in_size);
    const double out_pixels = static_cast<double>(out_size * out_size);
    Op conv = make_op(prefix + name, OpKind::conv, block);
    conv.tp_split_parameters = k2 * cin * cout;  // no bias: batch norm follows
    conv.forward_flops_per_sample = 2 * k2 * cin * cout * out_pixels;
    conv.output_elements_per_sample = cout * out_pixels;
    conv.saved = {{name + " input", cin * in_pixels, 0, false, false}};
    // As an implicit GEMM: (pixels x k^2 cin) . (k^2 cin x cout).
    conv.gemm = {out_pixels, out_channels, kernel * kernel * in_channels, 1};
    const OpId conv_id = g.add_op(conv);
    if (input) g.connect(*input, conv_id);

    Op bn = make_op(prefix + name + ".bn", OpKind::norm, block);
    bn.replicated_parameters = 2 * cout;
    bn.forward_flops_per_sample = 8 * cout * out_pixels;
    bn.output_elements_per_sample = cout * out_pixels;
    bn.saved = {{name + " batch-norm input", cout * out_pixels, 0, false, false}};
    bn.memory_elements_per_sample = 3 * cout * out_pixels;  // statistics pass + normalise pass
    OpId last = g.add_op(bn);
    g.connect(conv_id, last);
    if (relu) {
      Op act = make_op(prefix + name + ".relu", OpKind::elementwise, block);
      act.forward_flops_per_sample = cout * out_pixels;
      act.output_elements_per_sample = cout * out_pixels;
      act.saved = {{name + " relu output", cout * out_pixels, 0, false, false}};
      act.memory_elements_per_sample = 2 * cout * out_pixels;
      const OpId id = g.add_op(act);
      g.connect(last, id);
      last = id;
    }
    return last;
  }
};

}  // namespace

LayerGraph build_cnn_graph(const CnnDims& dims) {
  LayerGraph g;
  g.seq_len = 1;
  // Stem: 7x7/2 convolution and 3x3/2 max pool (He et al. 2016, Table 1).
  g.blocks.push_back({"stem", BlockKind::layer, {}});
  CnnBuilder b{g, 0, "stem."};
  std::int64_t size = dims.image_size;
  const std::int64_t after_conv = (size + 1) / 2;
  OpId prev = b.conv_bn(std::nullopt, "conv", dims.channels, dims.stem_channels, 7, size, after_conv, true);
  size = (after_conv + 1) / 2;
  Op pool = make_op("stem.maxpool", OpKind::pool, 0);
  const double stem_c = static_cast<double>(dims.stem_channels);
  pool.forward_flops_per_sample = 9 * stem_c * static_cast<double>(size * size);
  pool.output_elements_per_sample = stem_c * static_cast<double>(size * size);
  pool.saved = {{"max-pool argmax", stem_c * static_cast<double>(size * size), 8, false, false}};
  pool.memory_elements_per_sample = 5 * stem_c * static_cast<double>(size * size);  // 4 inputs per output
  OpId pool_id = g.add_op(pool);
  g.connect(prev, pool_id);
  prev = pool_id;

  std::int64_t channels = dims.stem_channels;
  for (std::size_t stage = 0; stage < dims.stage_blocks.size(); ++stage) {
    const std::int64_t width = dims.stage_channels[stage];
    const std::int64_t out_channels = width * dims.expansion;
    for (std::int64_t i = 0; i < dims.stage_blocks[stage]; ++i) {
      const std::int64_t stride = (stage > 0 && i == 0) ? 2 : 1;
      const std::int64_t out_size = (size + stride - 1) / stride;
      const std::string name = "stage" + std::to_string(stage + 1) + ".block" + std::to_string(i);
      b.block = static_cast<int>(g.blocks.size());
      b.prefix = name + ".";
      g.blocks.push_back({name, BlockKind::layer, {}});
      OpId x = b.conv_bn(prev, "conv1", channels, width, 1, size, size, true);
      x = b.conv_bn(x, "conv2", width, width, 3, size, out_size, true);
      x = b.conv_bn(x, "conv3", width, out_channels, 1, out_size, out_size, false);
      std::optional<OpId> shortcut;
      if (stride != 1 || channels != out_channels) {
        shortcut = b.conv_bn(prev, "downsample", channels, out_channels, 1, size, out_size, false);
      }
      const double out_elements = static_cast<double>(out_channels * out_size * out_size);
      Op add = make_op(name + ".add_relu", OpKind::elementwise, b.block);
      add.forward_flops_per_sample = 2 * out_elements;
      add.output_elements_per_sample = out_elements;
      add.saved = {{"block output relu", out_elements, 0, false, false}};
      add.memory_elements_per_sample = 3 * out_elements;
      const OpId add_id = g.add_op(add);
      g.connect(x, add_id);
      g.connect(shortcut ? *shortcut : prev, add_id);
      prev = add_id;
      channels = out_channels;
      size = out_size;
    }
  }

  const int head = static_cast<int>(g.blocks.size());
  g.blocks.push_back({"head", BlockKind::head, {}});
  const double features = static_cast<double>(channels);
  const double classes = static_cast<double>(dims.classes);
  Op avg = make_op("head.avgpool", OpKind::pool, head);
  avg.forward_flops_per_sample = features * static_cast<double>(size * size);
  avg.output_elements_per_sample = features;
  avg.memory_elements_per_sample = features * static_cast<double>(size * size) + features;
  const OpId avg_id = g.add_op(avg);
  g.connect(prev, avg_id);
  Op fc = make_op("head.fc", OpKind::gemm, head);
  fc.tp_split_parameters = features * classes;
  fc.replicated_parameters = classes;
  fc.forward_flops_per_sample = 2 * features * classes;
  fc.output_elements_per_sample = classes;
  fc.saved = {{"fc input", features, 0, false, false}};
  fc.gemm = {1, dims.classes, channels, 1};
  const OpId fc_id = g.add_op(fc);
  g.connect(avg_id, fc_id);
  const OpId loss_id = g.add_op(classification_loss(head, classes, false));
  g.connect(fc_id, loss_id);
  g.index_boundaries();
  return g;
}

}  // namespace meshplan
