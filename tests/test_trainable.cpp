// exec::trainable, asked before a plan file is written and before ranks
// start: the Llama family is accepted; each kind of refusal names its field
// (a mixture of experts, tp against the kv heads, a ResNet, an MLP on more than one device, the cp axis, tp against the heads),
// and the plans the executor trains pass. run_input_problems: a --data spec
// that cannot be read, and a --checkpoint-dir that cannot be written.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "executor/train/trainable.hpp"
#include "model/presets.hpp"
#include "temp_path.hpp"
#include "test_support.hpp"
#include "tiny_gpt.hpp"

namespace meshplan::exec {
namespace {

using testing_support::messages;
using testing_support::must;
using testing_support::plan_with;
using testing_support::temp_path;

// The error naming `field`, or null.
const Problem* error_on(const Problems& problems, const std::string& field) {
  for (const Problem& p : problems)
    if (p.severity == Severity::error && p.where == field) return &p;
  return nullptr;
}

ModelSpec tiny_gpt() { return testing_support::tiny_gpt_spec("gpt-trainable", 2, 32, 4, 128, 257, 16); }

TEST(Trainable, AcceptsGptPlansOnAMeshAndAnMlpOnOneDevice) {
  const ModelSpec gpt = tiny_gpt();
  for (const char* mesh : {"dp=1", "dp=2,tp=2", "fsdp=2,pp=2"}) {
    const Problems problems = trainable(gpt, plan_with(mesh, 2, 8), 16);
    EXPECT_FALSE(has_errors(problems)) << mesh << ": " << messages(problems);
  }
  const ModelSpec mlp = must(load_model("mlp-fashion"));
  const Plan one = plan_with("dp=1", 16, 16);
  EXPECT_FALSE(has_errors(trainable(mlp, one, training_seq_len(mlp, one)))) << messages(trainable(mlp, one, 1));
  // GPT-2's dropout is a warning (training runs without it), not a refusal.
  const ModelSpec gpt2 = must(load_model("gpt2-124m"));
  const Problems gpt2_problems = trainable(gpt2, one, training_seq_len(gpt2, one));
  EXPECT_FALSE(has_errors(gpt2_problems)) << messages(gpt2_problems);
}

TEST(Trainable, AcceptsLlamaAndNamesWhatItLacks) {
  const ModelSpec llama = must(load_model("llama3-8b"));  // 32 heads, 8 kv heads
  const Plan tp8 = plan_with("tp=8", 1, 1);
  const Problems accepted = trainable(llama, tp8, training_seq_len(llama, tp8));
  EXPECT_FALSE(has_errors(accepted)) << messages(accepted);
  // tp 16 does not divide the 8 kv heads: replicated over tp, trained all the same.
  const Plan tp16 = plan_with("tp=16", 1, 1);
  const Problems kv = trainable(llama, tp16, training_seq_len(llama, tp16));
  EXPECT_FALSE(has_errors(kv)) << messages(kv);
  // tp 64 does not divide the 32 query heads: refused.
  const Plan tp64 = plan_with("tp=64", 1, 1);
  const Problems heads = trainable(llama, tp64, training_seq_len(llama, tp64));
  ASSERT_NE(error_on(heads, "mesh.tp"), nullptr) << messages(heads);
  EXPECT_NE(error_on(heads, "mesh.tp")->message.find("must divide the heads"), std::string::npos) << messages(heads);

  const ModelSpec gemma = must(load_model("gemma3-1b"));  // GeGLU, one kv head, head_dim 256 != hidden / heads
  const Plan one = plan_with("dp=1", 1, 1);
  const Problems gemma_problems = trainable(gemma, one, training_seq_len(gemma, one));
  EXPECT_FALSE(has_errors(gemma_problems)) << messages(gemma_problems);

  ModelSpec moe = llama;
  moe.transformer.experts = 8;
  moe.transformer.top_k = 2;
  const Problems problems = trainable(moe, tp8, training_seq_len(moe, tp8));
  ASSERT_NE(error_on(problems, "model.experts"), nullptr) << messages(problems);
  EXPECT_NE(error_on(problems, "model.experts")->message.find("mixture of experts"), std::string::npos);
}

TEST(Trainable, RefusesACnn) {
  const ModelSpec resnet = must(load_model("resnet50"));
  const Plan plan = plan_with("dp=1", 32, 32);
  const Problems problems = trainable(resnet, plan, training_seq_len(resnet, plan));
  const Problem* kind = error_on(problems, "model.kind");
  ASSERT_NE(kind, nullptr) << messages(problems);
  EXPECT_EQ(kind->message, "ResNet/CNN models are planned but not trained by the executor");
}

// An MLP trains on dp, fsdp and tp meshes (data_parallel.hpp), any ZeRO
// stage; tp must divide every column-parallel linear's outputs; the other
// model-parallel axes are refused, naming the axis.
TEST(Trainable, AcceptsAnMlpOnDpFsdpAndTpMeshesOnly) {
  const ModelSpec mlp = must(load_model("mlp-fashion"));
  for (const char* mesh : {"dp=2", "fsdp=2", "dp=2,fsdp=2"}) {
    const Problems problems = trainable(mlp, plan_with(mesh, 16, 64), 1);
    EXPECT_FALSE(has_errors(problems)) << mesh << ": " << messages(problems);
  }
  Plan zero3 = plan_with("dp=2", 16, 32);
  zero3.zero_stage = 3;
  EXPECT_FALSE(has_errors(trainable(mlp, zero3, 1))) << messages(trainable(mlp, zero3, 1));
  for (const char* mesh : {"tp=2", "dp=2,tp=2", "fsdp=2,tp=2"}) {
    const Problems problems = trainable(mlp, plan_with(mesh, 16, 64), 1);
    EXPECT_FALSE(has_errors(problems)) << mesh << ": " << messages(problems);
  }
  const Problems tp = trainable(mlp, plan_with("tp=3", 16, 16), 1);  // [784, 256, 10]
  const Problem* tp_error = error_on(tp, "mesh.tp");
  ASSERT_NE(tp_error, nullptr) << messages(tp);
  EXPECT_NE(tp_error->message.find("tp 3 must divide the output size (256) of column-parallel linear0"), std::string::npos)
      << tp_error->message;
  const Problems pp = trainable(mlp, plan_with("dp=2,pp=2", 16, 32), 1);
  ASSERT_NE(error_on(pp, "mesh.pp"), nullptr) << messages(pp);
  EXPECT_NE(error_on(pp, "mesh.pp")->message.find("an MLP trains on dp, fsdp and tp meshes; pipeline parallelism"),
            std::string::npos)
      << messages(pp);
  Plan zero_and_fsdp = plan_with("dp=2,fsdp=2", 16, 64);
  zero_and_fsdp.zero_stage = 1;
  EXPECT_NE(error_on(trainable(mlp, zero_and_fsdp, 1), "zero"), nullptr);
}

TEST(Trainable, RefusesWhatTheParallelRuntimeCannotRun) {
  const ModelSpec gpt = tiny_gpt();
  const Problems cp = trainable(gpt, plan_with("dp=1,cp=2", 2, 4), 16);
  EXPECT_NE(error_on(cp, "mesh.cp"), nullptr) << messages(cp);
  const Problems tp = trainable(gpt, plan_with("tp=3", 2, 4), 16);  // 4 heads
  EXPECT_NE(error_on(tp, "mesh.tp"), nullptr) << messages(tp);
  const Problems seq = trainable(gpt, plan_with("dp=1", 2, 4), 17);  // the model has 16 positions
  EXPECT_NE(error_on(seq, "seq_len"), nullptr) << messages(seq);
}

TEST(TrainableInputs, APlanLargerThanThisHostIsRefusedOnlyThen) {
  constexpr double gib = 1024.0 * 1024 * 1024;
  EXPECT_TRUE(host_memory_problems(10 * gib, 3, 32 * gib).empty());
  const Problems refused = host_memory_problems(10 * gib, 4, 32 * gib);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].severity, Severity::error);
  EXPECT_EQ(refused[0].where, "memory");
  EXPECT_NE(refused[0].message.find("10.0 GiB per rank x 4 ranks here = 40.0 GiB"), std::string::npos) << refused[0].message;
  EXPECT_NE(refused[0].message.find("32.0 GiB"), std::string::npos) << refused[0].message;
  EXPECT_GT(host_memory_bytes(), 0);
}

// A transformer trains on token windows and an MLP on labelled vectors:
// the wrong kind is refused before any model is built, saying which fits.
TEST(TrainableInputs, DataMustBeWhatTheModelTrainsOn) {
  const ModelSpec gpt = must(load_model("gpt2-124m"));
  const ModelSpec mlp = must(load_model("mlp-fashion"));
  for (const char* data : {"synthetic", "fashion-mnist", "fashion-mnist:/data"}) {
    const Problems p = data_model_problems(data, gpt);
    ASSERT_EQ(p.size(), 1u) << data;
    EXPECT_EQ(p[0].where, "--data");
    EXPECT_NE(p[0].message.find("text:PATH"), std::string::npos) << p[0].message;
    EXPECT_NE(p[0].message.find("synthetic-text"), std::string::npos) << p[0].message;
  }
  EXPECT_TRUE(data_model_problems("text:corpus.txt", gpt).empty());
  EXPECT_TRUE(data_model_problems("synthetic-text", gpt).empty());
  // What a run takes without --data fits its model.
  EXPECT_EQ(default_data_spec(gpt), "synthetic-text");
  EXPECT_EQ(default_data_spec(mlp), "fashion-mnist");  // 784 inputs, 10 classes
  ModelSpec regression = mlp;
  regression.mlp.layer_sizes = {16, 32, 4};
  EXPECT_EQ(default_data_spec(regression), "synthetic");
  EXPECT_TRUE(data_model_problems(default_data_spec(gpt), gpt).empty());
  EXPECT_TRUE(data_model_problems(default_data_spec(mlp), mlp).empty());
  EXPECT_TRUE(data_model_problems(default_data_spec(regression), regression).empty());
  const Problems generated_for_mlp = data_model_problems("synthetic-text", mlp);
  ASSERT_EQ(generated_for_mlp.size(), 1u);
  EXPECT_NE(generated_for_mlp[0].message.find("synthetic-text gives token windows for transformers"), std::string::npos)
      << generated_for_mlp[0].message;
  EXPECT_TRUE(data_model_problems("synthetic", mlp).empty());
  EXPECT_TRUE(data_model_problems("fashion-mnist", mlp).empty());
  const Problems text_for_mlp = data_model_problems("text:corpus.txt", mlp);
  ASSERT_EQ(text_for_mlp.size(), 1u);
  EXPECT_NE(text_for_mlp[0].message.find("an MLP trains on"), std::string::npos) << text_for_mlp[0].message;
  ModelSpec small_vocab = gpt;
  small_vocab.transformer.vocab = 100;
  for (const char* data : {"text:corpus.txt", "synthetic-text"}) {
    const Problems bytes = data_model_problems(data, small_vocab);
    ASSERT_EQ(bytes.size(), 1u) << data;
    EXPECT_NE(bytes[0].message.find("vocabulary is 100"), std::string::npos) << bytes[0].message;
  }
}

TEST(TrainableInputs, DataThatCannotBeReadIsNamed) {
  EXPECT_TRUE(run_input_problems("synthetic", 1, "").empty());
  EXPECT_NE(error_on(run_input_problems("nonsense", 16, ""), "--data"), nullptr);
  const std::string missing = temp_path("no-such-corpus.txt").string();
  EXPECT_NE(error_on(run_input_problems("text:" + missing, 16, ""), missing), nullptr);
  const std::string folder = temp_path("no-fashion").string();
  const Problems fashion = run_input_problems("fashion-mnist:" + folder, 1, "");
  EXPECT_NE(error_on(fashion, folder + "/train-images-idx3-ubyte.gz"), nullptr) << messages(fashion);
  EXPECT_NE(error_on(fashion, folder + "/t10k-labels-idx1-ubyte.gz"), nullptr) << messages(fashion);

  // 100 bytes: the validation split (10) holds no window of 17.
  const std::string corpus = temp_path("short.txt").string();
  std::ofstream(corpus) << std::string(100, 'a');
  EXPECT_TRUE(run_input_problems("text:" + corpus, 8, "").empty());
  const Problems short_text = run_input_problems("text:" + corpus, 16, "");
  ASSERT_NE(error_on(short_text, corpus), nullptr) << messages(short_text);
  EXPECT_NE(error_on(short_text, corpus)->message.find("the validation split holds 10 bytes"), std::string::npos);
}

TEST(TrainableInputs, CheckpointFolderMustBeWritable) {
  const auto created = temp_path("ck-new") / "nested";
  EXPECT_TRUE(run_input_problems("synthetic", 1, created.string()).empty());
  EXPECT_TRUE(std::filesystem::is_directory(created));
  EXPECT_TRUE(std::filesystem::is_empty(created));  // the probe file is gone

  const auto file = temp_path("a-file");
  std::ofstream(file) << "not a folder";
  const Problems on_file = run_input_problems("synthetic", 1, file.string());
  EXPECT_NE(error_on(on_file, "--checkpoint-dir " + file.string()), nullptr) << messages(on_file);
  const auto under_file = (file / "ck").string();
  const Problems under = run_input_problems("synthetic", 1, under_file);
  const Problem* named = error_on(under, "--checkpoint-dir " + under_file);
  ASSERT_NE(named, nullptr) << messages(under);
  EXPECT_NE(named->message.find("cannot create the folder"), std::string::npos) << named->message;
}

}  // namespace
}  // namespace meshplan::exec
