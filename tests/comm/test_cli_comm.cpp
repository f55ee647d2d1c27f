// `meshplan commbench` and `meshplan launch` as a user runs them: commbench
// under mpirun with 2 ranks (every collective present, every result checked,
// F_bus and algbw consistent) and alone (one rank, said so); --backend nccl
// where no GPU is visible (exit 2, why, once); launch's command
// line for 2- and 4-rank plans, the exact argument vector it execs (through a
// stand-in launcher that records it), a real 2-rank training run of a tiny
// GPT started by it, and its refusals.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "../cli_runner.hpp"

namespace {
using namespace meshplan::testing_support;

std::vector<std::string> mpirun(int ranks) {
  std::vector<std::string> prefix{MESHPLAN_MPIEXEC, "-n", std::to_string(ranks), "--oversubscribe"};
  if (geteuid() == 0) prefix.push_back("--allow-run-as-root");
  return prefix;
}

// A one-layer byte-level GPT (GPT-2's block, tiny): what multi-rank plans train.
std::string tiny_gpt_model() {
  const auto model = temp_path("gpt-launch-test.yaml");
  if (!std::filesystem::exists(model)) {
    std::ofstream out(model);
    out << "name: gpt-launch-test\nkind: transformer\nsource: \"test model: GPT-2's block, tiny\"\n"
           "layers: 1\nhidden: 32\nheads: 2\nffn: 64\nvocab: 256\nseq_len: 16\nmlp: gelu\nnorm: layernorm\n"
           "positions: learned\nbias: true\ntied_embeddings: true\ndropout: 0.0\n";
  }
  return model.string();
}

// The tiny GPT on `mesh` of `gpus` devices, micro-batch 1, one sequence per data-parallel rank.
std::string emit_plan(const std::string& name, const std::string& mesh, int gpus) {
  const auto path = temp_path(name).string();
  const CliRun r = run({"explain", "--model", tiny_gpt_model(), "--cluster", "local-cpu", "--gpus", std::to_string(gpus),
                        "--mesh", mesh, "--micro-batch", "1", "--global-batch", "2", "--emit-plan", path});
  EXPECT_EQ(r.status, 0) << r.err;
  return path;
}

TEST(CliCommbench, TwoRanksMeasureEveryCollectiveCorrectly) {
  const CliRun r = run_under(mpirun(2), {"commbench", "--min-bytes", "64", "--max-bytes", "64K", "--step-factor",
                                         "32", "--iters", "3", "--warmup", "1", "--json"});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  const auto j = nlohmann::json::parse(r.out);  // rank 0 alone prints: one document
  EXPECT_EQ(j["ranks"], 2);
  std::set<std::string> seen;
  for (const auto& row : j["results"]) {
    const std::string name = row["collective"];
    seen.insert(name);
    EXPECT_TRUE(row["correct"].get<bool>()) << row.dump();
    const double time_us = row["time_us"], algbw = row["algbw_GBps"], busbw = row["busbw_GBps"];
    ASSERT_GT(time_us, 0.0) << row.dump();
    EXPECT_LE(row["min_time_us"].get<double>(), time_us) << row.dump();
    EXPECT_NEAR(algbw, row["bytes"].get<double>() / (time_us * 1e-6) / 1e9, 1e-9 * (1 + algbw));
    // nccl-tests' factors at n = 2: all_reduce 2(n-1)/n = 1; (n-1)/n = 0.5; broadcast and send_recv 1.
    const double factor = name == "all_gather" || name == "reduce_scatter" || name == "all_to_all" ? 0.5 : 1.0;
    EXPECT_DOUBLE_EQ(row["bus_factor"].get<double>(), factor) << name;
    EXPECT_NEAR(busbw, algbw * factor, 1e-12 * (1 + algbw));
  }
  EXPECT_EQ(seen, (std::set<std::string>{"all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all",
                                         "send_recv"}));
  // 64 B and 2 KiB and 64 KiB for each of the six.
  EXPECT_EQ(j["results"].size(), 18u);
}

TEST(CliCommbench, TableWithoutMpirunSaysItMeasuresNothing) {
  const CliRun r = run({"commbench", "--max-bytes", "1K", "--step-factor", "4", "--iters", "2", "--warmup", "0"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("# meshplan commbench: 1 rank over"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measure no communication"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# all_reduce (F_bus = 2(n-1)/n = 0.000"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("# send_recv"), std::string::npos) << "send_recv needs 2 ranks:\n" << r.out;
  EXPECT_EQ(r.out.find("WRONG"), std::string::npos) << r.out;
  expect_no_crash_text(r);
}

TEST(CliCommbench, BadFlagsNameTheFlag) {
  CliRun r = run({"commbench", "--max-bytes", "12Q"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--max-bytes"), std::string::npos) << r.err;
  // (2^34 + 1) x 2^30 wraps int64 to 2^30: it was read as 1G.
  r = run({"commbench", "--max-bytes", "17179869185G"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--max-bytes: '17179869185G' is not a size from 1 to 2G"), std::string::npos) << r.err;
  // A --max-bytes below the default --min-bytes names both (it blamed --min-bytes, which was not given).
  r = run({"commbench", "--max-bytes", "7"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--min-bytes and --max-bytes: 8 to 7 is no range"), std::string::npos) << r.err;
  r = run({"commbench", "--collectives", "all_reduce,allgather"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("'allgather' is not one of"), std::string::npos) << r.err;
  expect_no_crash_text(r);
}

// --backend nccl where no GPU can be seen (CUDA_VISIBLE_DEVICES empty hides
// any, so this holds on a GPU machine too): exit 2, say why, measure nothing.
// Without a CUDA/NCCL build, meshplan itself says it was built without NCCL.
TEST(CliCommbench, NcclWithoutAGpuSaysWhyAndMeasuresNothing) {
  const CliRun r = run_under({"env", "CUDA_VISIBLE_DEVICES="}, {"commbench", "--backend", "nccl", "--max-bytes", "1K"});
  EXPECT_EQ(r.status, 2) << r.err << r.out;
  EXPECT_NE(r.err.find("meshplan commbench: --backend nccl"), std::string::npos) << r.err;
  const bool no_gpu = r.err.find("sees no CUDA device") != std::string::npos &&
                      r.err.find("NCCL needs a GPU per rank") != std::string::npos;
  const bool not_built = r.err.find("built without NCCL") != std::string::npos;
  EXPECT_TRUE(no_gpu || not_built) << r.err;
  EXPECT_NE(r.err.find("--backend mpi"), std::string::npos) << "names what to do instead:\n" << r.err;
  EXPECT_EQ(r.out.find("# all_reduce"), std::string::npos) << r.out;
  expect_no_crash_text(r);
}

// Under mpirun the ranks refuse together and one of them says why.
TEST(CliCommbench, NcclWithoutAGpuUnderMpirunSaysItOnce) {
  std::vector<std::string> prefix{"env", "CUDA_VISIBLE_DEVICES="};
  for (const auto& word : mpirun(2)) prefix.push_back(word);
  const CliRun r = run_under(prefix, {"commbench", "--backend", "nccl", "--max-bytes", "1K"});
  EXPECT_NE(r.status, 0) << r.err << r.out;
  const auto first = r.err.find("meshplan commbench: --backend nccl");
  ASSERT_NE(first, std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("meshplan commbench: --backend nccl", first + 1), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("# all_reduce"), std::string::npos) << r.out;
}

TEST(CliCommbench, BadBackendNamesTheChoices) {
  const CliRun r = run({"commbench", "--backend", "gloo"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--backend"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mpi,nccl"), std::string::npos) << r.err;
  expect_no_crash_text(r);
}

// A transformer trains on token windows: this file's own bytes.
const std::string kText = "text:" + std::string(__FILE__);

TEST(CliLaunch, DryRunPrintsTheMpirunCommandForThePlansRanks) {
  const std::string two = emit_plan("launch-two.json", "dp=2", 2);
  const CliRun r = run({"launch", "--plan", two, "--dry-run", "--steps", "3", "--data", kText});
  ASSERT_EQ(r.status, 0) << r.err;
  const bool root = geteuid() == 0;
  const auto threads = std::max(1u, std::thread::hardware_concurrency());
  std::string expected = "mpirun -np 2";
  if (threads < 2) expected += " --oversubscribe";
  if (root) expected += " --allow-run-as-root";
  EXPECT_EQ(r.out.rfind(expected + " ", 0), 0u) << r.out;
  EXPECT_NE(r.out.find(std::string(MESHPLAN_BINARY) + " train --plan " + two + " --steps 3 --data " + kText + "\n"),
            std::string::npos)
      << r.out;

  const std::string four = emit_plan("launch-four.json", "dp=2,tp=2", 4);
  const CliRun r4 = run({"launch", "--plan", four, "--dry-run", "--data", kText});
  ASSERT_EQ(r4.status, 0) << r4.err;
  EXPECT_EQ(r4.out.rfind("mpirun -np 4", 0), 0u) << r4.out;
  EXPECT_EQ(r4.out.find("--oversubscribe") != std::string::npos, threads < 4) << r4.out;
}

TEST(CliLaunch, ExecsTheLauncherWithTheExactArguments) {
  // A stand-in launcher that writes its argument vector, one per line.
  const auto script = temp_path("fake-mpirun.sh");
  const auto record = temp_path("fake-mpirun.args");
  {
    std::ofstream out(script);
    out << "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done > '" << record.string() << "'\n";
  }
  ::chmod(script.c_str(), 0755);
  const std::string two = emit_plan("launch-exec.json", "dp=2", 2);
  const CliRun r =
      run({"launch", "--plan", two, "--mpirun", script.string(), "--metrics", "a b'c", "--steps", "2", "--data", kText});
  ASSERT_EQ(r.status, 0) << r.err;
  std::vector<std::string> args;
  std::ifstream in(record);
  for (std::string line; std::getline(in, line);) args.push_back(line);
  ASSERT_GE(args.size(), 8u);
  EXPECT_EQ(args[0], "-np");
  EXPECT_EQ(args[1], "2");
  const std::vector<std::string> tail{MESHPLAN_BINARY, "train", "--plan", two,     "--metrics",
                                      "a b'c",         "--steps", "2",      "--data", kText};
  EXPECT_EQ(std::vector<std::string>(args.end() - static_cast<std::ptrdiff_t>(tail.size()), args.end()), tail);
}

TEST(CliLaunch, StartsThePlansRanksAndTrains) {
  // The one-layer GPT, dp=2: launch must start 2 ranks of `train`.
  const auto corpus = temp_path("launch-corpus.txt");
  {
    std::ofstream out(corpus);
    for (int i = 0; i < 400; ++i) out << "a mesh plan runs on ranks " << i << ". ";
  }
  const std::string plan = emit_plan("launch-gpt.json", "dp=2", 2);
  const CliRun r = run({"launch", "--plan", plan, "--steps", "2", "--data", "text:" + corpus.string()});
  ASSERT_EQ(r.status, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("on 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step 1 |"), std::string::npos) << r.out;
}

TEST(CliLaunch, RefusesAMissingLauncherOrPlan) {
  const std::string two = emit_plan("launch-missing.json", "dp=2", 2);
  CliRun r = run({"launch", "--plan", two, "--mpirun", "/nonexistent/mpirun", "--data", kText});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("'/nonexistent/mpirun' was not found"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("mpirun -np 2 meshplan train --plan"), std::string::npos) << r.err;
  // A launcher that fails by itself, silently, is named with its status (exit 1 said nothing).
  r = run({"launch", "--plan", two, "--mpirun", "/bin/false", "--data", kText});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.err.find("meshplan launch: /bin/false exited with status 1"), std::string::npos) << r.err;
  r = run({"launch", "--plan", temp_path("no-such-plan.json").string()});
  EXPECT_EQ(r.status, 2);
  expect_no_crash_text(r);
}

}  // namespace
