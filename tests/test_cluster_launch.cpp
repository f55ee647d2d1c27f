// Hostfiles and Slurm jobs of `meshplan launch` (executor/train/cluster_launch.hpp):
// Open MPI's hostfile grammar with line-numbered errors, and the job a plan
// becomes: nodes and tasks from the plan's cluster, GPUs on GPU clusters only,
// refusals naming the option.
#include <gtest/gtest.h>

#include "executor/train/cluster_launch.hpp"
#include "model/cluster_spec.hpp"
#include "model/model_spec.hpp"
#include "test_support.hpp"

namespace meshplan::exec {
namespace {
using namespace testing_support;

TEST(Hostfile, SlotsCommentsAndLineNumberedErrors) {
  const auto hosts = parse_hostfile("# cluster\n\nnode01 slots=8 max_slots=8\nnode02   slots=4 # half\nnode03\n", "hf");
  ASSERT_TRUE(hosts.ok()) << messages(hosts.problems);
  ASSERT_EQ(hosts.value.size(), 3u);
  EXPECT_EQ(hosts.value[0].host, "node01");
  EXPECT_EQ(hosts.value[0].slots, 8);
  EXPECT_EQ(hosts.value[1].slots, 4);
  EXPECT_EQ(hosts.value[2].slots, std::nullopt) << "no slots=: Open MPI counts the host's cores";
  EXPECT_EQ(hostfile_slots(hosts.value), std::nullopt);
  EXPECT_EQ(hostfile_slots({hosts.value[0], hosts.value[1]}), 12);

  for (const auto& [text, where] : std::vector<std::pair<std::string, std::string>>{
           {"a slots=0\n", "hf:1"}, {"a\nb slots=two\n", "hf:2"}, {"a cpus=2\n", "hf:1"}, {"slots=2\n", "hf:1"},
           {"a slots=1000001\n", "hf:1"}}) {
    const auto bad = parse_hostfile(text, "hf");
    EXPECT_FALSE(bad.ok()) << text;
    ASSERT_FALSE(bad.problems.empty()) << text;
    EXPECT_EQ(bad.problems.front().where, where) << text;
  }
  EXPECT_FALSE(parse_hostfile("# nothing\n", "hf").ok());
  EXPECT_FALSE(read_hostfile("/nonexistent/hostfile").ok());
  // A binary file's escape sequences are quoted as \xNN, not sent to the terminal.
  const auto binary = parse_hostfile("node01 \x1b[2J\x7f=1\n", "hf");
  ASSERT_FALSE(binary.ok());
  EXPECT_EQ(describe(binary.problems.front()),
            "hf:1: '\\x1b[2J\\x7f=1': an Open MPI hostfile line is 'host [slots=N] [max_slots=N]'");
  // A device is no hostfile (/dev/zero was read until memory ran out).
  const auto device = read_hostfile("/dev/zero");
  ASSERT_FALSE(device.ok());
  EXPECT_EQ(device.problems.front().message, "is a device or a socket, not a file");
  // Bytes that are not UTF-8 are escaped too; UTF-8 (a name in another script) is kept.
  const auto latin1 = parse_hostfile("node01 caf\xe9=1 \xc3\xa9t\xc3\xa9\n", "hf");
  ASSERT_FALSE(latin1.ok());
  EXPECT_NE(describe(latin1.problems.front()).find("caf\\xe9=1"), std::string::npos) << describe(latin1.problems.front());
  EXPECT_EQ(describe({Severity::error, "x", "\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xe2\x82"}),
            "x: \xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \\xe2\\x82");
}

PlanFile plan_on(const std::string& cluster, const std::string& mesh) {
  PlanFile file;
  file.model = must(load_model("gpt2-124m"));
  file.cluster = must(load_cluster(cluster));
  file.plan = plan_with(mesh, 1, 64);
  file.world_size = file.plan.mesh.world_size();
  return file;
}

TEST(SlurmJob, NodesTasksAndGpusFromThePlansCluster) {
  const auto job = slurm_job(plan_on("dgx-h100", "dp=4,tp=8"), "runs/p.json", {}, {"/bin/meshplan", "train"});
  ASSERT_TRUE(job.ok()) << messages(job.problems);
  EXPECT_EQ(job.value.ranks, 32);
  EXPECT_EQ(job.value.options.nodes, 4);
  EXPECT_EQ(job.value.options.tasks_per_node, 8);
  EXPECT_EQ(job.value.options.gpus_per_node, 8) << "NVLink nodes: one GPU per rank";
  EXPECT_EQ(job.value.options.job_name, "meshplan-p");
  const std::string script = sbatch_script(job.value);
  EXPECT_NE(script.find("#SBATCH --gpus-per-node=8\n"), std::string::npos) << script;
  EXPECT_NE(script.find("\nsrun --mpi=pmix /bin/meshplan train\n"), std::string::npos) << script;

  SlurmOptions given;
  given.nodes = 8;
  const auto spread = slurm_job(plan_on("dgx-h100", "dp=4,tp=8"), "p.json", given, {"x"});
  ASSERT_TRUE(spread.ok()) << messages(spread.problems);
  EXPECT_EQ(spread.value.options.tasks_per_node, 4) << "--nodes alone: the ranks spread over them";

  const auto cpu = slurm_job(plan_on("local-cpu", "dp=2"), "p.json", {}, {"x"});
  ASSERT_TRUE(cpu.ok());
  EXPECT_EQ(cpu.value.options.gpus_per_node, 0) << "CPU ranks ask for no GPUs";
  EXPECT_EQ(cpu.value.options.tasks_per_node, 2);

  SlurmOptions odd;
  odd.tasks_per_node = 3;
  const auto refused = slurm_job(plan_on("dgx-h100", "dp=4,tp=8"), "p.json", odd, {"x"});
  EXPECT_FALSE(refused.ok());
  ASSERT_FALSE(refused.problems.empty());
  EXPECT_EQ(refused.problems.front().where, "--tasks-per-node");
}

// What goes on an #SBATCH line is one word: a space or a line break in a
// flag's value would end the option or inject another line, so it is refused
// naming the flag; a job name taken from the plan's file name is made one word.
TEST(SlurmJob, SbatchValuesAreOneWord) {
  const PlanFile plan = plan_on("local-cpu", "dp=2");
  for (const auto& [flag, field] : std::vector<std::pair<std::string, std::string SlurmOptions::*>>{
           {"--job-name", &SlurmOptions::job_name}, {"--partition", &SlurmOptions::partition},
           {"--time", &SlurmOptions::time}, {"--output", &SlurmOptions::output}, {"--srun-mpi", &SlurmOptions::srun_mpi}}) {
    for (const std::string bad : {"two words", "a\n#SBATCH --exclusive", "it's", "tab\there"}) {
      SlurmOptions o;
      o.*field = bad;
      const auto job = slurm_job(plan, "p.json", o, {"x"});
      EXPECT_FALSE(job.ok()) << flag << " " << bad;
      ASSERT_FALSE(job.problems.empty());
      EXPECT_EQ(job.problems.front().where, flag);
    }
  }
  const auto named = slurm_job(plan, "runs/my plan#1.json", {}, {"x"});
  ASSERT_TRUE(named.ok()) << messages(named.problems);
  EXPECT_EQ(named.value.options.job_name, "meshplan-my_plan_1");

  SlurmOptions spaced;
  spaced.working_directory = "/home/me/my runs";
  const auto job = slurm_job(plan, "p.json", spaced, {"x"});
  ASSERT_TRUE(job.ok());
  const std::string script = sbatch_script(job.value);
  EXPECT_EQ(script.find("--chdir"), std::string::npos) << script;
  EXPECT_NE(script.find("\ncd '/home/me/my runs'\n"), std::string::npos) << script;
}

// --time takes Slurm's forms only; anything else would be written into the
// script and refused by sbatch at submission, after the fact.
TEST(SlurmJob, TimeLimitInSlurmsForms) {
  const PlanFile plan = plan_on("local-cpu", "dp=2");
  for (const std::string good : {"30", "30:00", "02:00:00", "1-12", "1-12:30", "2-00:00:00", "UNLIMITED", "0"}) {
    SlurmOptions o;
    o.time = good;
    const auto job = slurm_job(plan, "p.json", o, {"x"});
    EXPECT_TRUE(job.ok()) << good << ": " << messages(job.problems);
  }
  for (const std::string bad : {"bogus", "2h", "1:2:3:4", "1-2-3", "-5", "5-", ":30", "30:", "1.5", "1-a:00", "1::2"}) {
    SlurmOptions o;
    o.time = bad;
    const auto job = slurm_job(plan, "p.json", o, {"x"});
    EXPECT_FALSE(job.ok()) << bad;
    ASSERT_EQ(job.problems.size(), 1u) << bad << ": " << messages(job.problems);
    EXPECT_EQ(job.problems.front().where, "--time");
    EXPECT_NE(job.problems.front().message.find("is not a Slurm time limit"), std::string::npos);
  }
}

TEST(SlurmJob, ShellQuotingKeepsArgumentsWhole) {
  EXPECT_EQ(shell_quoted("text:/data/corpus.txt"), "text:/data/corpus.txt");
  EXPECT_EQ(shell_quoted("a b"), "'a b'");
  EXPECT_EQ(shell_quoted("it's"), "'it'\\''s'");
  EXPECT_EQ(shell_quoted(""), "''");
}

}  // namespace
}  // namespace meshplan::exec
