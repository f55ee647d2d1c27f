// Mesh parsing (both spellings), axis aliases, rank coordinates, and the
// plan vocabulary's parsers.
#include <gtest/gtest.h>

#include "model/mesh.hpp"
#include "model/plan.hpp"
#include "test_support.hpp"

namespace meshplan {
namespace {
using namespace testing_support;

TEST(Mesh, ParsesAxesInOrderWithAliases) {
  const Mesh mesh = must(parse_mesh("data=16, pipeline=8, model=8", "--mesh"));
  ASSERT_EQ(mesh.axes.size(), 3u);
  EXPECT_EQ(mesh.axes[0].axis, Axis::dp);
  EXPECT_EQ(mesh.axes[1].axis, Axis::pp);
  EXPECT_EQ(mesh.axes[2].axis, Axis::tp);
  EXPECT_EQ(mesh.world_size(), 1024);
  EXPECT_EQ(mesh.to_string(), "dp=16,pp=8,tp=8");
  EXPECT_EQ(mesh.size(Axis::fsdp), 1);
  EXPECT_EQ(must(parse_mesh("tensor=2 fsdp:4", "--mesh")).to_string(), "tp=2,fsdp=4");
}

TEST(Mesh, SeedsMeshShapeSpelling) {
  const Mesh mesh = must(parse_mesh_shape(R"([[4, 2], ["fsdp", "tp"]])", "--mesh-shape"));
  EXPECT_EQ(mesh.to_string(), "fsdp=4,tp=2");
  EXPECT_EQ(must(parse_mesh_shape("[[4,1],['fsdp','tp']]", "--mesh-shape")).to_string(), "fsdp=4,tp=1");
  // Spaces separate items too, beside or instead of commas.
  EXPECT_EQ(must(parse_mesh(" dp=16, tp=8 ", "--mesh")).to_string(), "dp=16,tp=8");
  EXPECT_EQ(must(parse_mesh("dp=16  tp=8", "--mesh")).to_string(), "dp=16,tp=8");
}

TEST(Mesh, RejectsBadInputWithTheFlagName) {
  struct Case {
    const char* text;
    const char* expected;
  };
  for (const Case& c : {Case{"dp=0", "sizes must be between 1"}, Case{"dq=4", "unknown mesh axis 'dq'"},
                        Case{"dp=4,data=2", "axis dp is given twice"}, Case{"dp", "not of the form axis=size"},
                        Case{"dp=x", "not a whole number"}, Case{"", "empty mesh"},
                        Case{"dp=99999999999", "out of range (a mesh holds at most 1048576"},
                        Case{"dp=-8", "'-8', below 1"}, Case{"dp=8,", "has an empty item"},
                        Case{",dp=8", "has an empty item"}, Case{"dp=8,,tp=1", "has an empty item"}}) {
    auto mesh = parse_mesh(c.text, "--mesh");
    ASSERT_FALSE(mesh.ok()) << c.text;
    EXPECT_EQ(mesh.problems[0].where, "--mesh");
    EXPECT_NE(mesh.problems[0].message.find(c.expected), std::string::npos) << c.text << ": " << mesh.problems[0].message;
  }
  for (const char* text : {"[[4,2],[\"fsdp\"]]", "{}", "[[4],[7]]", "[[\"4\"],[\"dp\"]]", "not json"}) {
    EXPECT_FALSE(parse_mesh_shape(text, "--mesh-shape").ok()) << text;
  }
  // Which size, of which axis, with its value; and an empty shape said as such.
  const auto fraction = parse_mesh_shape("[[4.5, 2], ['dp', 'tp']]", "--mesh-shape");
  ASSERT_FALSE(fraction.ok());
  EXPECT_EQ(fraction.problems[0].message, "size 1 (of axis \"dp\"), 4.5, is not a whole number");
  const auto empty = parse_mesh_shape("[[], []]", "--mesh-shape");
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.problems[0].message.rfind("names no axes; ", 0), 0u) << empty.problems[0].message;
}

// Found by reading fuzz/fuzz_mesh.cpp's invariant (the world size must be
// computable): three axes of the allowed 2^24 each overflowed world_size()'s
// int64 product, undefined behaviour in `explain --mesh` and the planner.
// Regression input: fuzz/corpus/fuzz_mesh/regression-world-size-overflow.
TEST(Mesh, RejectsAMeshWhoseProductIsTooLarge) {
  for (const char* text : {"dp=1048576,tp=1048576,pp=1048576", "dp=1024,tp=1024,pp=2", "dp=1024,tp=1025"}) {
    auto mesh = parse_mesh(text, "--mesh");
    ASSERT_FALSE(mesh.ok()) << text;
    EXPECT_EQ(mesh.problems[0].where, "--mesh");
    EXPECT_NE(mesh.problems[0].message.find("a mesh has at most 1048576"), std::string::npos)
        << mesh.problems[0].message;
  }
  auto shape = parse_mesh_shape("[[1048576, 1048576, 1048576], ['dp', 'tp', 'pp']]", "--mesh-shape");
  ASSERT_FALSE(shape.ok());
  EXPECT_EQ(shape.problems[0].where, "--mesh-shape");
  // The limit itself is allowed.
  EXPECT_EQ(must(parse_mesh("dp=1024,tp=1024", "--mesh")).world_size(), kMaxMeshDevices);
  EXPECT_EQ(must(parse_mesh("pp=1048576", "--mesh")).world_size(), kMaxMeshDevices);
  // One axis above the limit is refused as an axis size.
  EXPECT_FALSE(parse_mesh("dp=1048577", "--mesh").ok());
}

TEST(Mesh, LastAxisVariesFastest) {
  const Mesh mesh = must(parse_mesh("dp=2,pp=3,tp=4", "--mesh"));
  EXPECT_EQ(mesh.coordinates(0), (std::vector<std::int64_t>{0, 0, 0}));
  EXPECT_EQ(mesh.coordinates(1), (std::vector<std::int64_t>{0, 0, 1}));
  EXPECT_EQ(mesh.coordinates(4), (std::vector<std::int64_t>{0, 1, 0}));
  EXPECT_EQ(mesh.coordinates(23), (std::vector<std::int64_t>{1, 2, 3}));
  EXPECT_EQ(mesh.coordinate(13, Axis::dp), 1);
  EXPECT_EQ(mesh.coordinate(13, Axis::pp), 0);
  EXPECT_EQ(mesh.coordinate(13, Axis::tp), 1);
  EXPECT_EQ(mesh.coordinate(13, Axis::ep), 0);
}

TEST(Plan, ScheduleRecomputePrecisionParsers) {
  EXPECT_EQ(to_string(*parse_schedule("interleaved:3")), "interleaved:3");
  EXPECT_EQ(parse_schedule("interleaved:3")->virtual_stages, 3);
  EXPECT_EQ(parse_schedule("zb-h1")->kind, ScheduleKind::zb_h1);
  EXPECT_EQ(parse_schedule("1f1b")->kind, ScheduleKind::one_f_one_b);
  EXPECT_EQ(parse_schedule("gpipe")->kind, ScheduleKind::gpipe);
  for (const char* bad : {"interleaved", "interleaved:1", "interleaved:x", "interleaved:", "2f2b", "", "ZB-H1"}) {
    EXPECT_FALSE(parse_schedule(bad)) << bad;
  }
  EXPECT_EQ(parse_recompute("selective"), Recompute::selective);
  EXPECT_FALSE(parse_recompute("some"));
  EXPECT_EQ(parse_precision("fp8"), Precision::fp8);
  EXPECT_FALSE(parse_precision("int4"));
}

TEST(Plan, MicroBatchesIsGradientAccumulation) {
  Plan plan = plan_with("dp=16,pp=8,tp=8", 2, 1536);
  EXPECT_EQ(plan.micro_batches(), 48);
  plan.global_batch = 1537;
  EXPECT_EQ(plan.micro_batches(), 0);
  plan = plan_with("dp=2,fsdp=2,ep=2", 1, 64);
  EXPECT_EQ(plan.micro_batches(), 8);  // ep ranks take their own data
  // micro_batch x dp past int64 (found with fuzz/fuzz_plan_file.cpp and
  // UBSan, where it wrapped to a product that divided the global batch)
  // divides nothing: here 2^43 + 1 on the largest world, 2^20 ranks.
  plan = plan_with("dp=1024,fsdp=1024", (std::int64_t{1} << 43) + 1, std::int64_t{1} << 20);
  EXPECT_EQ(plan.micro_batches(), 0);
}

}  // namespace
}  // namespace meshplan
