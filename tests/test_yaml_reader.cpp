// Strict YAML reading: every kind of bad input becomes a problem naming the
// file, the line and the key.
#include <gtest/gtest.h>

#include "model/model_spec.hpp"
#include "model/yaml_reader.hpp"

namespace meshplan {
namespace {

std::string all_messages(const Problems& problems) {
  std::string text;
  for (const auto& p : problems) text += describe(p) + "\n";
  return text;
}

double must_ok_slots(const char* yaml);

const char* kGood = R"(name: tiny
kind: transformer
source: test
layers: 2
hidden: 64
heads: 4
ffn: 256
vocab: 100
seq_len: 32
mlp: gelu
tied_embeddings: true
)";

// A dense model's MLP runs each token once.
double must_ok_slots(const char* yaml) { return load_model_text(yaml, "dense.yaml").value.transformer.expert_slots_per_token(); }

TEST(YamlReader, GoodModelLoads) {
  auto model = load_model_text(kGood, "tiny.yaml");
  ASSERT_TRUE(model.ok()) << all_messages(model.problems);
  EXPECT_EQ(model.value.transformer.layers, 2);
  EXPECT_EQ(model.value.transformer.head_dim, 16);
  EXPECT_EQ(model.value.transformer.kv_heads, 4);
}

TEST(YamlReader, UnknownKeyNamesFileLineAndKey) {
  auto model = load_model_text(std::string(kGood) + "kv_haeds: 2\n", "tiny.yaml");
  ASSERT_FALSE(model.ok());
  const std::string text = all_messages(model.problems);
  EXPECT_NE(text.find("tiny.yaml:12 key 'kv_haeds'"), std::string::npos) << text;
  EXPECT_NE(text.find("unknown key"), std::string::npos) << text;
}

TEST(YamlReader, WrongTypeNamesLineAndKey) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("heads: 4"), 8, "heads: four");
  auto model = load_model_text(yaml, "tiny.yaml");
  ASSERT_FALSE(model.ok());
  const std::string text = all_messages(model.problems);
  EXPECT_NE(text.find("tiny.yaml:6 key 'heads': expected a whole number, got 'four'"), std::string::npos) << text;
}

TEST(YamlReader, FractionIsNotAWholeNumber) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("layers: 2"), 9, "layers: 2.5");
  auto model = load_model_text(yaml, "tiny.yaml");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(all_messages(model.problems).find("key 'layers': expected a whole number"), std::string::npos);
}

TEST(YamlReader, MissingRequiredKeyIsReported) {
  std::string yaml = kGood;
  yaml.erase(yaml.find("ffn: 256\n"), 9);
  auto model = load_model_text(yaml, "tiny.yaml");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(all_messages(model.problems).find("missing required key 'ffn'"), std::string::npos);
}

TEST(YamlReader, MalformedYamlNamesLine) {
  auto model = load_model_text("name: x\nkind: [transformer\nlayers: 2\n", "broken.yaml");
  ASSERT_FALSE(model.ok());
  const std::string text = all_messages(model.problems);
  EXPECT_NE(text.find("broken.yaml:"), std::string::npos) << text;
  EXPECT_NE(text.find("malformed YAML"), std::string::npos) << text;
}

TEST(YamlReader, WrongWordListsAllowedValues) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("mlp: gelu"), 9, "mlp: relu6");
  auto model = load_model_text(yaml, "tiny.yaml");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(all_messages(model.problems).find("'relu6' is not one of: gelu, swiglu, geglu"), std::string::npos);
}

TEST(YamlReader, OutOfRangeAndInconsistentDimensions) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("layers: 2"), 9, "layers: 0");
  yaml += "kv_heads: 3\n";
  auto model = load_model_text(yaml, "tiny.yaml");
  ASSERT_FALSE(model.ok());
  const std::string text = all_messages(model.problems);
  EXPECT_NE(text.find("key 'layers': must be between 1"), std::string::npos) << text;
  EXPECT_NE(text.find("key 'kv_heads': heads (4) must be a multiple of kv_heads (3)"), std::string::npos) << text;
}

// capacity_factor: drop-and-pad expert capacity, only for a mixture of
// experts, from 1 (no slack) to experts / top_k (every token fits anywhere);
// shared_expert_ffn, a width, only beside routed experts.
TEST(YamlReader, ExpertCapacityIsCheckedAgainstTheExperts) {
  auto moe = load_model_text(std::string(kGood) + "experts: 8\ntop_k: 2\ncapacity_factor: 1.25\n", "moe.yaml");
  ASSERT_TRUE(moe.ok()) << all_messages(moe.problems);
  EXPECT_EQ(moe.value.transformer.capacity_factor, 1.25);
  EXPECT_EQ(moe.value.transformer.expert_slots_per_token(), 2.5);
  EXPECT_EQ(must_ok_slots(kGood), 1.0);
  auto shared = load_model_text(std::string(kGood) + "experts: 8\ntop_k: 2\nshared_expert_ffn: 1024\n", "moe.yaml");
  ASSERT_TRUE(shared.ok()) << all_messages(shared.problems);
  EXPECT_EQ(shared.value.transformer.shared_expert_ffn, 1024);
  auto first_dense = load_model_text(std::string(kGood) + "experts: 8\ntop_k: 2\ndense_layers: [0]\ndense_ffn: 512\n", "moe.yaml");
  ASSERT_TRUE(first_dense.ok()) << all_messages(first_dense.problems);
  EXPECT_FALSE(first_dense.value.transformer.expert_layer(0));
  EXPECT_TRUE(first_dense.value.transformer.expert_layer(1));
  EXPECT_EQ(first_dense.value.transformer.dense_width(), 512);
  auto grouped = load_model_text(std::string(kGood) + "experts: 8\ntop_k: 2\nexpert_groups: 4\ngroup_top_k: 2\n", "moe.yaml");
  ASSERT_TRUE(grouped.ok()) << all_messages(grouped.problems);
  EXPECT_EQ(grouped.value.transformer.expert_groups, 4);
  EXPECT_EQ(grouped.value.transformer.group_top_k, 2);
  const std::pair<std::string, std::string> bad[] = {
      {"experts: 8\ntop_k: 2\nexpert_groups: 4\n", "key 'group_top_k': group-limited routing needs both"},
      {"experts: 8\ntop_k: 2\ngroup_top_k: 2\n", "key 'expert_groups': group-limited routing needs both"},
      {"expert_groups: 4\ngroup_top_k: 2\n", "key 'expert_groups': groups of experts need experts"},
      {"experts: 8\ntop_k: 2\nexpert_groups: 3\ngroup_top_k: 2\n", "expert_groups (3) must divide the experts (8)"},
      {"experts: 8\ntop_k: 2\nexpert_groups: 4\ngroup_top_k: 5\n", "group_top_k (5) exceeds expert_groups (4)"},
      {"experts: 8\ntop_k: 4\nexpert_groups: 4\ngroup_top_k: 1\n", "the 1 chosen groups hold 2 experts, fewer than top_k (4)"},
      {"capacity_factor: 1.25\n", "key 'capacity_factor': a capacity factor needs experts"},
      {"experts: 8\ntop_k: 2\ncapacity_factor: 0.5\n", "key 'capacity_factor': must be between 1"},
      {"experts: 8\ntop_k: 2\ncapacity_factor: 5\n", "capacity_factor x top_k (10) exceeds experts (8)"},
      {"shared_expert_ffn: 1024\n", "key 'shared_expert_ffn': shared experts need routed experts"},
      {"experts: 8\ntop_k: 2\nshared_expert_ffn: 0\n", "key 'shared_expert_ffn': must be between 1"},
      {"dense_layers: [0]\n", "key 'dense_layers': names dense layers among experts' ones, but this model has no experts"},
      {"experts: 8\ntop_k: 2\ndense_layers: [0, 0]\n", "key 'dense_layers': names a layer twice"},
      {"experts: 8\ntop_k: 2\ndense_layers: [2]\n", "key 'dense_layers': names layer 2; the layers are 0 to 1"},
      {"experts: 8\ntop_k: 2\ndense_layers: [1, 0]\n", "key 'dense_layers': names every layer"},
      {"experts: 8\ntop_k: 2\ndense_ffn: 512\n", "key 'dense_ffn': is the width of dense_layers' MLP"},
  };
  for (const auto& [tail, message] : bad) {
    auto model = load_model_text(std::string(kGood) + tail, "moe.yaml");
    EXPECT_FALSE(model.ok()) << tail;
    EXPECT_NE(all_messages(model.problems).find(message), std::string::npos) << all_messages(model.problems);
  }
}

// A depth the layer graph cannot build in reasonable time is refused when
// read (fuzz/fuzz_plan_file.cpp timed out on a plan file saying 2^20 layers;
// regression input fuzz/corpus/fuzz_plan_file/regression-layers-timeout.json).
TEST(YamlReader, DepthIsBounded) {
  std::string yaml = kGood;
  yaml.replace(yaml.find("layers: 2"), 9, "layers: 1048576");
  auto model = load_model_text(yaml, "deep.yaml");
  ASSERT_FALSE(model.ok());
  std::string text = all_messages(model.problems);
  EXPECT_NE(text.find("deep.yaml:4 key 'layers': must be between 1 and 4096"), std::string::npos) << text;

  const char* cnn = R"(name: wide
kind: cnn
source: test
architecture: resnet-bottleneck
image_size: 224
channels: 3
stem_channels: 64
stage_blocks: [4096, 4096]
stage_channels: [64, 128]
expansion: 4
classes: 1000
)";
  model = load_model_text(cnn, "wide.yaml");
  ASSERT_FALSE(model.ok());
  text = all_messages(model.problems);
  EXPECT_NE(text.find("wide.yaml:8 key 'stage_blocks': has 8192 blocks in all; at most 4096"), std::string::npos) << text;
}

TEST(YamlReader, TopLevelMustBeAMap) {
  auto model = load_model_text("- 1\n- 2\n", "list.yaml");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(all_messages(model.problems).find("list.yaml: expected a YAML map"), std::string::npos);
  // yaml-cpp's LoadAll never returns on this (a null document, again and again): the loader must.
  auto comma = load_model_text(",", "comma.yaml");
  ASSERT_FALSE(comma.ok());
  EXPECT_NE(all_messages(comma.problems).find("comma.yaml: expected a YAML map"), std::string::npos);
}

// yaml-cpp keeps a repeated key and reads the first, and loads only the first of several documents:
// both silently dropped what the file said. A required name that is empty named nothing.
TEST(YamlReader, RepeatedKeysSecondDocumentsAndEmptyNamesAreRefused) {
  const auto repeated = load_model_text(std::string(kGood) + "layers: 8\n", "tiny.yaml");
  ASSERT_FALSE(repeated.ok());
  EXPECT_NE(all_messages(repeated.problems).find("tiny.yaml:12 key 'layers': given twice (first on line 4)"), std::string::npos)
      << all_messages(repeated.problems);
  const auto nested = load_yaml_text("outer:\n  a: 1\n  a: 2\n", "n.yaml");
  ASSERT_TRUE(nested.ok());
  Problems problems;
  YamlMap root(nested.value, "n.yaml", "", problems);
  auto outer = root.map("outer", Need::required);
  ASSERT_TRUE(outer);
  outer->integer("a", Need::required, 0, 9);
  outer->finish();
  root.finish();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].where, "n.yaml:3 key 'outer.a'");
  const auto two = load_model_text(std::string(kGood) + "---\n" + kGood, "two.yaml");
  ASSERT_FALSE(two.ok());
  EXPECT_NE(all_messages(two.problems).find("two.yaml:12: a second YAML document ('---'): a preset file holds one"),
            std::string::npos)
      << all_messages(two.problems);
  std::string unnamed = kGood;
  unnamed.replace(0, unnamed.find('\n'), "name: ''");
  const auto empty = load_model_text(unnamed, "unnamed.yaml");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(all_messages(empty.problems).find("unnamed.yaml:1 key 'name': is empty"), std::string::npos)
      << all_messages(empty.problems);
}

// YAML 1.1 reads 010 as octal 8 and 0x10 as 16 (layers: 010 gave 8 layers,
// silently); a number is read as written in decimal or refused. A key given
// with no value is refused at its line, not taken as absent (bf16: null
// dropped the run to fp32) nor called missing at the map's line. A value out
// of range is quoted as written (1000000.5 printed as 1e+06, inside the range
// the message gave).
TEST(YamlReader, NonDecimalNumbersNullsAndOutOfRangeValuesAreNamedAsWritten) {
  const std::pair<std::string, std::string> cases[] = {
      {"layers: 010\n", "tiny.yaml:11 key 'layers': '010': write whole numbers in decimal digits without a leading zero"},
      {"layers: 0x10\n", "tiny.yaml:11 key 'layers': '0x10': write whole numbers in decimal digits"},
      {"layers: 0o10\n", "tiny.yaml:11 key 'layers'"},
      {"dropout: 00.1\n", "tiny.yaml:12 key 'dropout': '00.1': write numbers in decimal digits without a leading zero"},
      {"layers: ~\n", "tiny.yaml:11 key 'layers': has no value (empty, ~ or null)"},
      {"dropout:\n", "tiny.yaml:12 key 'dropout': has no value (empty, ~ or null)"},
      {"dropout: 1.0000001\n", "tiny.yaml:12 key 'dropout': must be between 0 and 0.999, got 1.0000001"},
      {"dropout: 1.50\n", "tiny.yaml:12 key 'dropout': must be between 0 and 0.999, got 1.50"},
      {"layers: 99999999999999999999\n", "tiny.yaml:11 key 'layers': must be between 1 and 4096, got 99999999999999999999"},
  };
  // kGood with `line` in place of its own line of the same key (at the end).
  const auto with = [](const std::string& line) {
    std::string text = kGood;
    const std::string key = line.substr(0, line.find(':') + 1);
    if (const auto at = text.find("\n" + key); at != std::string::npos) text.erase(at + 1, text.find('\n', at + 1) - at);
    return text + line;
  };
  for (const auto& [line, expected] : cases) {
    const auto model = load_model_text(with(line), "tiny.yaml");
    EXPECT_FALSE(model.ok()) << line;
    EXPECT_NE(all_messages(model.problems).find(expected), std::string::npos) << line << all_messages(model.problems);
  }
  for (const char* fine : {"layers: 10\n", "layers: +10\n", "dropout: 0.1\n", "dropout: 0\n", "dropout: .1\n", "dropout: 1e-1\n"}) {
    const auto model = load_model_text(with(fine), "tiny.yaml");
    EXPECT_TRUE(model.ok()) << fine << all_messages(model.problems);
  }
}

// A key that is refused is said once, at its key: the checks that depend on
// it do not read it as absent ("experts: 1048577" was followed by "this
// model's MLP is dense"; "kv_lora_rank: 0" by "does not state kv_lora_rank").
// A multi-layer perceptron has at most as many layers as a transformer (a
// 200,000-size list made plan search run for minutes).
TEST(YamlReader, ARefusedKeyIsNotAlsoReadAsAbsent) {
  const std::pair<std::string, std::string> cases[] = {
      {"experts: 1048577\ntop_k: 2\n", "key 'experts'"},
      {"experts: -1\nshared_expert_ffn: 64\ndense_layers: [0]\n", "key 'experts'"},
      {"kv_lora_rank: 0\nq_lora_rank: 8\nqk_nope_head_dim: 8\nqk_rope_head_dim: 8\nv_head_dim: 8\n", "key 'kv_lora_rank'"},
      {"experts: 4\ndense_layers: [-1]\ndense_ffn: 64\n", "key 'dense_layers'"},
  };
  for (const auto& [lines, key] : cases) {
    const auto model = load_model_text(std::string(kGood) + lines, "refused.yaml");
    ASSERT_FALSE(model.ok()) << lines;
    ASSERT_EQ(model.problems.size(), 1u) << lines << all_messages(model.problems);
    EXPECT_NE(model.problems.front().where.find(key), std::string::npos) << all_messages(model.problems);
  }
  std::string mlp = "name: deep\nkind: mlp\nsource: test\nlayer_sizes: [8";
  for (int i = 0; i < 4097; ++i) mlp += ", 8";
  const auto deep = load_model_text(mlp + "]\n", "deep.yaml");
  ASSERT_FALSE(deep.ok());
  EXPECT_NE(all_messages(deep.problems).find("key 'layer_sizes': has 4098 sizes, 4097 layers; at most 4096 layers are allowed"),
            std::string::npos)
      << all_messages(deep.problems);
}

// Rotary positions rotate pairs of a head's dimensions; top_k routes to experts a dense model lacks;
// a CNN stage list that is refused is not also called the wrong length.
TEST(YamlReader, RotaryHeadsTopKAndStageListsAreCheckedOnce) {
  const auto odd = load_model_text(std::string(kGood) + "head_dim: 7\n", "odd.yaml");
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(all_messages(odd.problems).find("odd.yaml:12 key 'head_dim': rotary positions rotate pairs of a head's 7"),
            std::string::npos)
      << all_messages(odd.problems);
  EXPECT_TRUE(load_model_text(std::string(kGood) + "head_dim: 7\npositions: learned\n", "odd.yaml").ok());
  const auto routed = load_model_text(std::string(kGood) + "top_k: 3\n", "dense.yaml");
  ASSERT_FALSE(routed.ok());
  EXPECT_NE(all_messages(routed.problems).find("key 'top_k': top_k 3 routes each token to experts; this model's MLP is dense"),
            std::string::npos)
      << all_messages(routed.problems);
  EXPECT_TRUE(load_model_text(std::string(kGood) + "top_k: 1\n", "dense.yaml").ok());  // what plan files write
  const std::string cnn = "name: c\nkind: cnn\nsource: t\narchitecture: resnet-bottleneck\nimage_size: 32\nchannels: 3\n"
                          "stem_channels: 8\nstage_blocks: [0, 0]\nstage_channels: [8, 16]\nexpansion: 4\nclasses: 10\n";
  const auto stages = load_model_text(cnn, "c.yaml");
  ASSERT_FALSE(stages.ok());
  const std::string text = all_messages(stages.problems);
  EXPECT_NE(text.find("key 'stage_blocks'"), std::string::npos) << text;
  EXPECT_EQ(text.find("must have one entry per stage"), std::string::npos) << text;
}

TEST(YamlReader, NestedKeysArePrefixed) {
  auto yaml = load_yaml_text("outer:\n  inner: x\n  typo: 1\n", "n.yaml");
  ASSERT_TRUE(yaml.ok());
  Problems problems;
  YamlMap root(yaml.value, "n.yaml", "", problems);
  auto outer = root.map("outer", Need::required);
  ASSERT_TRUE(outer);
  EXPECT_EQ(outer->text("inner", Need::required), "x");
  outer->finish();
  root.finish();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].where, "n.yaml:3 key 'outer.typo'");
}

}  // namespace
}  // namespace meshplan
