// A cluster link from nccl-tests output (model/nccl_tests.hpp): the rows of
// a hand-made all_reduce_perf table (tests/data/nccl-tests-all-reduce-8xh100.txt,
// times made from known figures with +-3% noise) give back the latency and
// bus bandwidth they were made from; bad rows name their line; garbage lines
// are errors, never a crash.
#include <gtest/gtest.h>

#include <fstream>
#include <random>
#include <sstream>

#include "model/nccl_tests.hpp"
#include "model/presets.hpp"
#include "model/topology.hpp"
#include "read_text.hpp"

namespace meshplan {
namespace {

using testing_support::read_text;

const std::string kSample = std::string(MESHPLAN_TEST_DATA) + "/nccl-tests-all-reduce-8xh100.txt";

// The first problem of fitting the sample's header with `rows` in place of its table (which must parse);
// an empty problem when the fit is accepted, which the callers' checks then fail on.
Problem fit_refusal(const std::string& rows, const std::string& file) {
  const std::string text = read_text(kSample);
  const auto run = parse_nccl_tests(text.substr(0, text.find("           8 ")) + rows, file);
  EXPECT_TRUE(run.ok()) << describe(run.problems.front());
  const auto link = fit_nccl_link(run.value);
  EXPECT_FALSE(link.ok());
  return link.problems.empty() ? Problem{} : link.problems.front();
}

TEST(NcclTests, ReadsTheTableAndItsHeader) {
  const auto run = parse_nccl_tests(read_text(kSample), "sample.txt");
  ASSERT_TRUE(run.ok()) << describe(run.problems.front());
  ASSERT_TRUE(run.value.collective);
  EXPECT_EQ(*run.value.collective, Collective::all_reduce);
  EXPECT_EQ(run.value.ranks, 8);
  EXPECT_EQ(run.value.hosts.size(), 1u);
  EXPECT_EQ(run.value.device, "NVIDIA H100 80GB HBM3");
  ASSERT_EQ(run.value.rows.size(), 31u);  // 8 B to 8 GiB, doubling
  EXPECT_DOUBLE_EQ(run.value.rows.back().bytes, 8589934592.0);
  EXPECT_NEAR(run.value.rows.back().out_of_place_s, 42309.34e-6, 1e-12);
  EXPECT_NEAR(run.value.rows.back().busbw_bytes_per_s, 355.30e9, 1e3);
}

TEST(NcclTests, FitRecoversTheFiguresTheTimesWereMadeFrom) {
  const auto run = parse_nccl_tests(read_text(kSample), "sample.txt");
  const auto link = fit_nccl_link(run.value);
  ASSERT_TRUE(link.ok());
  EXPECT_FALSE(link.value.inter_node);
  EXPECT_EQ(link.value.samples, 62);
  EXPECT_NEAR(link.value.fit.latency_s, 1.2e-6, 0.05 * 1.2e-6);      // the noise is +-3%
  EXPECT_NEAR(link.value.fit.bandwidth_bytes_per_s, 360e9, 0.05 * 360e9);
  EXPECT_LT(link.value.fit.worst_relative_error, 0.06);
}

// Times that barely grow with the size fit a bus bandwidth beyond any link,
// which no cluster preset holds: refused naming the file, not written as a
// preset that then fails to load (fuzz_nccl_tests found it: 5.9e6 GB/s).
TEST(NcclTests, RefusesAFitThatNoClusterPresetHolds) {
  const Problem refused = fit_refusal(
      "        1024           256     float     sum      -1    10.00    0.10    0.18      0    10.00    0.10    0.18      0\n"
      "  1073741824     268435456     float     sum      -1    10.01 107267 187718      0    10.01 107267 187718      0\n",
      "flat.txt");
  EXPECT_EQ(refused.where, "flat.txt");
  EXPECT_NE(refused.message.find("beyond any link"), std::string::npos) << refused.message;
}

// One message size (its out-of-place and in-place times) cannot separate the latency from the
// bandwidth: refused, not fitted to a latency of 0 and a bandwidth of a few kB/s.
TEST(NcclTests, RefusesOneMessageSize) {
  const Problem refused = fit_refusal(
      "           8             2     float     sum      -1    10.00    0.00    0.00      0     9.50    0.00    0.00      0\n",
      "one.txt");
  EXPECT_EQ(refused.where, "one.txt");
  EXPECT_NE(refused.message.find("two or more message sizes"), std::string::npos) << refused.message;
}

// Two runs in one file (the same one twice: its ranks counted twice changed the bus bandwidth factor and
// the fit, 383 GB/s instead of 357), two programs' outputs, or rows whose results were wrong: refused.
TEST(NcclTests, RefusesTwoRunsInOneFileAndWrongResults) {
  const std::string text = read_text(kSample);
  const auto twice = parse_nccl_tests(text + text, "twice.txt");
  EXPECT_FALSE(twice.ok());
  EXPECT_NE(describe(twice.problems.front()).find("rank 0 is listed twice"), std::string::npos)
      << describe(twice.problems.front());
  const auto mixed = parse_nccl_tests(text + "# Collective test starting: all_gather_perf\n", "mixed.txt");
  EXPECT_FALSE(mixed.ok());
  bool named = false;
  for (const auto& p : mixed.problems) named = named || p.message.find("names all_gather_perf after all_reduce") != std::string::npos;
  EXPECT_TRUE(named);
  std::string wrong = text;
  const auto row = wrong.find("           8 ");
  const auto end = wrong.find('\n', row);
  std::string line = wrong.substr(row, end - row);
  const auto last_zero = line.rfind('0');
  line[last_zero] = '5';  // the in-place #wrong column
  wrong.replace(row, end - row, line);
  const auto bad = parse_nccl_tests(wrong, "wrong.txt");
  EXPECT_FALSE(bad.ok());
  EXPECT_NE(describe(bad.problems.front()).find("the collective returned wrong results"), std::string::npos)
      << describe(bad.problems.front());
  EXPECT_TRUE(parse_nccl_tests(text, "sample.txt").ok());
}

TEST(NcclTests, WritesTheIntraNodeLinkOfABaseCluster) {
  const auto run = parse_nccl_tests(read_text(kSample), "sample.txt");
  const auto link = fit_nccl_link(run.value);
  const auto base = load_cluster("dgx-h100");
  ASSERT_TRUE(base.ok() && link.ok());
  const ClusterSpec fitted = apply_link_fit(base.value, link.value);
  EXPECT_NEAR(fitted.intra_node.bandwidth_bytes_per_s, link.value.fit.bandwidth_bytes_per_s, 1e-5 * 360e9);  // 6 digits, as written
  EXPECT_DOUBLE_EQ(fitted.intra_node.achievable_fraction, 1.0);
  EXPECT_DOUBLE_EQ(fitted.inter_node.bandwidth_bytes_per_s, base.value.inter_node.bandwidth_bytes_per_s);
  const std::string yaml = measured_cluster_yaml(fitted, run.value, link.value, "--base dgx-h100", "meshplan calibrate ...");
  const auto loaded = load_cluster_text(yaml, "written.yaml");
  ASSERT_TRUE(loaded.ok()) << describe(loaded.problems.front()) << "\n" << yaml;
  EXPECT_NEAR(loaded.value.intra_node.bandwidth_bytes_per_s, fitted.intra_node.bandwidth_bytes_per_s, 1e3);
  EXPECT_NEAR(loaded.value.intra_node.latency_s, fitted.intra_node.latency_s, 1e-12);
  EXPECT_DOUBLE_EQ(loaded.value.inter_node.bandwidth_bytes_per_s, base.value.inter_node.bandwidth_bytes_per_s);
  EXPECT_DOUBLE_EQ(loaded.value.inter_node.achievable_fraction, base.value.inter_node.achievable_fraction);
  EXPECT_EQ(loaded.value.devices_per_node, 8);
}

TEST(NcclTests, AcrossHostsTheInterNodeLinkPerNic) {
  std::string text = read_text(kSample);
  const std::size_t at = text.find("#  Rank  7 Group  0 Pid  41207 on  node-a01");
  ASSERT_NE(at, std::string::npos);
  text.replace(text.find("node-a01", at), 8, "node-a02");
  const auto run = parse_nccl_tests(text, "two-hosts.txt");
  const auto link = fit_nccl_link(run.value);
  ASSERT_TRUE(link.ok());
  EXPECT_TRUE(link.value.inter_node);
  const auto base = load_cluster("dgx-h100");
  const ClusterSpec fitted = apply_link_fit(base.value, link.value);
  EXPECT_NEAR(fitted.inter_node.bandwidth_bytes_per_s * 8, link.value.fit.bandwidth_bytes_per_s, 1e-5 * 360e9);  // 8 NICs
  EXPECT_DOUBLE_EQ(fitted.intra_node.bandwidth_bytes_per_s, base.value.intra_node.bandwidth_bytes_per_s);
}

// alltoall_perf on two hosts of 8 ranks, timed as the cost model says an all-to-all across nodes runs
// (each rank's 8/16 of bytes for the other host through its own NIC: the rate 15 B_node / 64) on a
// DGX H100 base: the fit gives that rate, the link is written as the NICs' aggregate it implies,
// and the preset then prices ep=16 across the two nodes at the measured rate (a round trip).
TEST(NcclTests, AllToAllAcrossHostsGivesTheNicsItCouldNotAggregate) {
  const auto base = load_cluster("dgx-h100");
  ASSERT_TRUE(base.ok());
  const double node_nics = 8 * 40e9, latency = 10e-6;  // B_node of the link to recover, per direction
  const double rate = 15.0 * node_nics / 64.0;          // all_to_all_bus_bandwidth(16, 8, NVLink, B_node)
  std::ostringstream text;
  text << "# Collective test starting: alltoall_perf\n";
  for (int r = 0; r < 16; ++r)
    text << "#  Rank " << r << " Group  0 Pid " << 100 + r << " on node-" << (r < 8 ? "a" : "b") << " device  " << r % 8
         << " [0000:18:00] NVIDIA H100 80GB HBM3\n";
  for (double bytes = 1 << 20; bytes <= 1ull << 32; bytes *= 4) {
    const double t_us = (15 * latency + bytes * 15.0 / 16.0 / rate) * 1e6;
    text << "  " << static_cast<long long>(bytes) << "  " << static_cast<long long>(bytes / 4) << "  float  none  -1  " << t_us
         << "  0  0  0  " << t_us << "  0  0  0\n";
  }
  const auto run = parse_nccl_tests(text.str(), "alltoall.txt");
  ASSERT_TRUE(run.ok()) << describe(run.problems.front());
  const auto link = fit_nccl_link(run.value);
  ASSERT_TRUE(link.ok()) << describe(link.problems.front());
  EXPECT_TRUE(link.value.inter_node);
  EXPECT_NEAR(link.value.fit.bandwidth_bytes_per_s, rate, 1e-6 * rate);
  EXPECT_NEAR(link.value.link_bandwidth_bytes_per_s, node_nics, 1e-6 * node_nics);
  ClusterSpec fitted = apply_link_fit(base.value, link.value);
  EXPECT_NEAR(fitted.inter_node.bandwidth_bytes_per_s * 8, node_nics, 1e-5 * node_nics);  // per NIC, 8 NICs
  const std::string yaml = measured_cluster_yaml(fitted, run.value, link.value, "--base dgx-h100", "meshplan calibrate ...");
  EXPECT_NE(yaml.find("all-to-all across hosts, 8 ranks on each"), std::string::npos) << yaml;
  const auto loaded = load_cluster_text(yaml, "written.yaml");
  ASSERT_TRUE(loaded.ok()) << describe(loaded.problems.front());
  Mesh ep;
  ep.axes = {{Axis::ep, 16}};
  const AxisPlacement placed = place_axes(build_topology(loaded.value, 16), ep).front();
  EXPECT_NEAR(placed.all_to_all_bandwidth_bytes_per_s, rate, 1e-5 * rate);
}

TEST(NcclTests, BadRowsAndGarbageNameTheirLine) {
  const std::string text =
      "#  Rank  0 Group  0 Pid 1 on a device  0 [0000:18:00] GPU\n"
      "#  Rank  1 Group  0 Pid 2 on a device  1 [0000:2a:00] GPU\n"
      "        1024           256     float     sum      -1    16.95    0.06    0.11      0    16.45    0.06    0.11      0\n"
      "a01:123:456 [0] NCCL INFO Channel 00/32 : 0 1\n"
      "this line is garbage\n"
      "        2048           512     float     sum      -1    fast    0.12    0.21      0    17.18    0.12    0.21      0\n"
      "\x01\x02\xff\n";
  const auto run = parse_nccl_tests(text, "bad.txt");
  ASSERT_EQ(run.problems.size(), 3u);
  EXPECT_EQ(run.problems[0].where, "bad.txt:5");
  EXPECT_EQ(run.problems[1].where, "bad.txt:6");
  EXPECT_NE(run.problems[1].message.find("out-of-place time"), std::string::npos);
  EXPECT_EQ(run.problems[2].where, "bad.txt:7");
  EXPECT_EQ(run.value.rows.size(), 1u);
  // Which collective: neither named nor given.
  const auto link = fit_nccl_link(run.value);
  ASSERT_FALSE(link.ok());
  EXPECT_NE(link.problems[0].message.find("--collective"), std::string::npos);
  EXPECT_FALSE(parse_nccl_tests(read_text(kSample), "x", "all_sum").ok());
}

TEST(NcclTests, MutatedTablesNeverCrash) {
  const std::string original = read_text(kSample);
  std::mt19937 rng(212);
  int refused = 0;
  for (int i = 0; i < 300; ++i) {
    std::string text = original;
    for (int e = 0; e < 1 + static_cast<int>(rng() % 6); ++e) {
      const std::size_t at = rng() % text.size();
      if (rng() % 2) {
        text[at] = static_cast<char>(rng() % 256);
      } else {
        text.insert(at, std::string(1 + rng() % 4, "0.-e# \n9x"[rng() % 9]));
      }
    }
    Loaded<NcclTestsRun> run;
    ASSERT_NO_THROW(run = parse_nccl_tests(text, "fuzz.txt"));
    if (!run.ok()) {
      ++refused;
      continue;
    }
    Loaded<NcclLinkFit> link;
    ASSERT_NO_THROW(link = fit_nccl_link(run.value));
    if (link.ok()) {
      EXPECT_GT(link.value.fit.bandwidth_bytes_per_s, 0);
    }
  }
  EXPECT_GT(refused, 50);
}

}  // namespace
}  // namespace meshplan
