// "Did you mean" for mistyped names (model/suggest.hpp): the distance on
// known pairs, which candidates count as close, the choice lists the flags'
// messages carry, and preset lookup suggesting the nearest preset of each
// kind. Also scale_decimal (model/text.hpp): unit conversions keep the
// decimal a preset wrote.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "model/cluster_spec.hpp"
#include "model/presets.hpp"
#include "model/suggest.hpp"
#include "model/text.hpp"

namespace {

using namespace meshplan;

TEST(Suggest, EditDistanceCountsInsertionsDeletionsSubstitutionsAndTranspositions) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("", "abc"), 3u);
  EXPECT_EQ(edit_distance("microbatch", "micro-batch"), 1u);  // insertion
  EXPECT_EQ(edit_distance("meshh", "mesh"), 1u);              // deletion
  EXPECT_EQ(edit_distance("gpt3-175c", "gpt3-175b"), 1u);     // substitution
  EXPECT_EQ(edit_distance("bf61", "bf16"), 1u);               // adjacent transposition
  EXPECT_EQ(edit_distance("expalin", "explain"), 1u);
  EXPECT_EQ(edit_distance("llama3-8B", "llama3-8b"), 0u);     // case does not count
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);          // Levenshtein's textbook pair
  EXPECT_EQ(edit_distance("ca", "abc"), 3u);                  // optimal string alignment, not full Damerau (2)
}

TEST(Suggest, NearestNameOnlyWhenClose) {
  const std::vector<std::string> flags = {"model", "cluster", "gpus", "mesh", "mesh-shape", "micro-batch",
                                          "global-batch", "seq", "zero", "recompute", "precision", "headroom"};
  EXPECT_EQ(nearest_name("microbatch", flags), "micro-batch");
  EXPECT_EQ(nearest_name("globalbatch", flags), "global-batch");
  EXPECT_EQ(nearest_name("meshh", flags), "mesh");
  EXPECT_EQ(nearest_name("percision", flags), "precision");
  EXPECT_EQ(nearest_name("clust", flags), "cluster");      // the start of exactly one name
  EXPECT_EQ(nearest_name("frobnicate", flags), std::nullopt);
  EXPECT_EQ(nearest_name("mesh", flags), std::nullopt);    // a known name is no typo
  EXPECT_EQ(nearest_name("", flags), std::nullopt);
  EXPECT_EQ(nearest_name("z", {"0", "1", "2", "3", "auto"}), std::nullopt);  // one letter is no typo of another
  EXPECT_EQ(did_you_mean("bf61", {"fp32", "bf16", "fp16", "fp8"}), " (did you mean bf16?)");
  EXPECT_EQ(did_you_mean("int4", {"fp32", "bf16", "fp16", "fp8"}), "");
}

TEST(Suggest, ChoiceWordsOfTheFlagsLists) {
  EXPECT_EQ(choice_words("none, selective, full"), (std::vector<std::string>{"none", "selective", "full"}));
  EXPECT_EQ(choice_words("fp32, bf16, fp16, fp8 (or auto)"),
            (std::vector<std::string>{"fp32", "bf16", "fp16", "fp8", "auto"}));
  EXPECT_EQ(choice_words("gpipe, 1f1b, interleaved:<v> (v >= 2), zb-h1"),
            (std::vector<std::string>{"gpipe", "1f1b", "zb-h1"}));
}

TEST(Suggest, UnknownPresetsOfEveryKindSuggestTheNearest) {
  const auto model = find_preset(PresetKind::model, "llama3-8B");
  ASSERT_FALSE(model.ok());
  EXPECT_NE(model.problems[0].message.find("did you mean llama3-8b?"), std::string::npos) << model.problems[0].message;
  const auto device = find_preset(PresetKind::device, "a100-80gb");
  ASSERT_FALSE(device.ok());
  EXPECT_NE(device.problems[0].message.find("did you mean a100-80g?"), std::string::npos) << device.problems[0].message;
  const auto cluster = find_preset(PresetKind::cluster, "dgx-a10");
  ASSERT_FALSE(cluster.ok());
  EXPECT_NE(cluster.problems[0].message.find("did you mean dgx-a100?"), std::string::npos) << cluster.problems[0].message;
  const auto far = find_preset(PresetKind::model, "gpt5");
  ASSERT_FALSE(far.ok());
  EXPECT_EQ(far.problems[0].message.find("did you mean"), std::string::npos) << far.problems[0].message;
  EXPECT_NE(far.problems[0].message.find("known: "), std::string::npos) << far.problems[0].message;
}

TEST(ScaleDecimal, KeepsTheDecimalThePresetWrote) {
  // 5 * 1e-6 is 4.9999999999999996e-06: 1e-6 has no exact double.
  EXPECT_EQ(scale_decimal(5.0, -6), 5e-6);
  EXPECT_EQ(scale_decimal(30.0, -6), 30e-6);
  EXPECT_EQ(scale_decimal(2.5, -6), 2.5e-6);
  EXPECT_EQ(scale_decimal(0.0853261, 12), 0.0853261e12);
  EXPECT_EQ(scale_decimal(1.41, 9), 1.41e9);
  EXPECT_EQ(scale_decimal(0.0, -6), 0.0);
  EXPECT_EQ(scale_decimal(123.45, 0), 123.45);
  // Every two-decimal value from 0.01 to 999.99 becomes the nearest double to its decimal.
  for (int hundredths = 1; hundredths < 100000; ++hundredths) {
    const std::string text = std::to_string(hundredths / 100) + "." + (hundredths % 100 < 10 ? "0" : "") +
                             std::to_string(hundredths % 100);
    ASSERT_EQ(scale_decimal(std::stod(text), -6), std::stod(text + "e-6")) << text;
  }
}

TEST(ScaleDecimal, PresetLatenciesReadAsWritten) {
  const auto cluster = load_cluster("dgx-a100");  // latency_us: 2.0 and 5.0
  ASSERT_TRUE(cluster.ok());
  EXPECT_EQ(nlohmann::json(cluster.value.inter_node.latency_s).dump(), "5e-06");
  EXPECT_EQ(nlohmann::json(cluster.value.intra_node.latency_s).dump(), "2e-06");
}

}  // namespace
