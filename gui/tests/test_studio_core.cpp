// Studio core without widgets: Setup resolution (problems at fields), the
// item models under QAbstractItemModelTester, the ShardingSpec of named
// tensors, and the views' geometry with exact rectangles and pixels.
#include <QAbstractItemModelTester>
#include <QtTest>

#include <cmath>
#include <fstream>

#include "gui/core/candidates_model.hpp"
#include "gui/core/geometry.hpp"
#include "gui/core/launch.hpp"
#include "gui/core/plan_details.hpp"
#include "gui/core/plan_models.hpp"
#include "gui/core/roofline.hpp"
#include "gui/core/setup.hpp"
#include "model/default_batch.hpp"
#include "model/layer_graph.hpp"
#include "model/sharding_spec.hpp"
#include "model/stage_partition.hpp"

using namespace meshplan;
using namespace meshplan::studio;

namespace {

Plan plan_of(const char* mesh, std::int64_t micro_batch, std::int64_t global_batch, int zero) {
  Plan plan;
  plan.mesh = parse_mesh(mesh, "test").value;
  plan.micro_batch = micro_batch;
  plan.global_batch = global_batch;
  plan.zero_stage = zero;
  return plan;
}

ModelSpec load(const char* name) {
  auto model = load_model(name);
  if (!model.ok()) qFatal("preset %s missing", name);
  return model.value;
}

bool has_problem_at(const Problems& problems, const std::string& field) {
  return std::any_of(problems.begin(), problems.end(), [&](const Problem& p) { return p.where == field; });
}

// A small search, run synchronously: gpt2-124m on one DGX A100 node.
SearchOutcomePtr small_outcome() {
  SetupInputs in;
  in.model = "gpt2-124m";
  in.nodes = 1;
  in.global_batch = 64;
  in.threads = 1;
  in.zero = "0,1";  // a narrower space keeps QAbstractItemModelTester's full walks quick
  in.recompute = "none,full";
  in.schedules = "1f1b,zb-h1";
  auto job = resolve_setup(in);
  if (!job.ok()) qFatal("setup failed");
  auto outcome = std::make_shared<SearchOutcome>();
  outcome->job = job.value;
  outcome->evaluator = std::make_shared<const Evaluator>(job.value.model, job.value.cluster, job.value.world_size, job.value.seq_len);
  SearchOptions options;
  options.threads = 1;
  options.on_candidate = [&](const Candidate& c) {
    if (c.rejection != Rejection::none) outcome->rejected.push_back(c);
  };
  outcome->result = search(*outcome->evaluator, job.value.global_batch, job.value.space, options);
  return outcome;
}

}  // namespace

class StudioCoreTest : public QObject {
  Q_OBJECT
 private slots:
  void setupDefaultsAreGpt3On1024A100s() {
    auto job = resolve_setup(SetupInputs{});
    QVERIFY(job.ok());
    QCOMPARE(job.value.world_size, std::int64_t{1024});
    QCOMPARE(job.value.model.transformer.layers, std::int64_t{96});
    QCOMPARE(job.value.seq_len, std::int64_t{2048});
    QCOMPARE(job.value.space.precisions.size(), std::size_t{1});
    QVERIFY(job.value.space.precisions.front() == Precision::bf16);
    // The global batch comes from model/default_batch.hpp's rule, as the CLI's does: 1536 for GPT-3 175B.
    QCOMPARE(job.value.global_batch, std::int64_t{1536});
    QVERIFY(describe_job(job.value).starts_with(
        "gpt3-175b on 1024 x a100-80g (dgx-a100: 128 nodes of 8); global batch 1536 x 2048 tokens (default: 3.15M tokens"));
  }

  // Issue 15: the studio's default batch is the CLI's rule per model and GPU
  // count, not GPT-3's 1536 for every model; a given batch is kept as given.
  void setupDefaultBatchFollowsTheRule() {
    SetupInputs in;
    in.model = "gpt2-124m";
    in.nodes = 1;
    auto job = resolve_setup(in);
    QVERIFY(job.ok());
    const DefaultBatch rule = default_global_batch(job.value.model, build_layer_graph(job.value.model, 1024).parameter_count(),
                                                   1024, 8);
    QCOMPARE(job.value.global_batch, rule.sequences);
    QVERIFY(job.value.global_batch != 1536);
    QCOMPARE(job.value.global_batch_rule, rule.rule);
    in.global_batch = 96;
    auto given = resolve_setup(in);
    QCOMPARE(given.value.global_batch, std::int64_t{96});
    QVERIFY(given.value.global_batch_rule.empty());
    QVERIFY(describe_job(given.value).find("default") == std::string::npos);
  }

  // Axes left empty: the model's default search axes (model/plan_defaults.hpp), as the CLI's --axes;
  // ep joins for a mixture-of-experts model. Named axes are searched as named.
  void setupAxesDefaultToTheModels() {
    SetupInputs in;  // gpt2-124m, dense
    QCOMPARE(resolve_setup(in).value.space.axes, (std::vector<Axis>{Axis::dp, Axis::fsdp, Axis::tp, Axis::pp}));
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const std::string moe = dir.filePath("moe.yaml").toStdString();
    {
      std::ofstream out(moe);
      out << "name: moe-tiny\nkind: transformer\nsource: test\nlayers: 4\nhidden: 256\nheads: 4\nffn: 1024\n"
             "vocab: 1024\nseq_len: 256\nmlp: gelu\nnorm: layernorm\npositions: learned\nbias: true\n"
             "tied_embeddings: true\nexperts: 4\ntop_k: 2\n";
    }
    in.model = moe;
    auto job = resolve_setup(in);
    QVERIFY2(job.ok(), job.problems.empty() ? "" : job.problems.front().message.c_str());
    QCOMPARE(job.value.space.axes, (std::vector<Axis>{Axis::dp, Axis::fsdp, Axis::tp, Axis::pp, Axis::ep}));
    in.axes = "dp,tp";
    QCOMPARE(resolve_setup(in).value.space.axes, (std::vector<Axis>{Axis::dp, Axis::tp}));
    // Max cp and Max ep bound the search as the CLI's --max-cp and --max-ep; below 0 is an error at its field.
    in.axes = "";
    in.max_cp = 2;
    in.max_ep = 2;
    auto bounded = resolve_setup(in);
    QVERIFY(bounded.ok());
    QCOMPARE(bounded.value.space.max_cp, std::int64_t{2});
    QCOMPARE(bounded.value.space.max_ep, std::int64_t{2});
    for (const Mesh& m : enumerate_meshes(bounded.value.world_size, bounded.value.space, bounded.value.cluster.devices_per_node))
      QVERIFY(m.size(Axis::ep) <= 2);
    in.max_cp = -1;
    in.max_ep = -2;
    auto negative = resolve_setup(in);
    QVERIFY(has_problem_at(negative.problems, "max_cp"));
    QVERIFY(has_problem_at(negative.problems, "max_ep"));
  }

  void setupProblemsNameTheirField() {
    SetupInputs in;
    in.global_batch = -1;  // 0 is the default rule
    in.axes = "dp,xx";
    in.headroom = 1.5;
    in.schedules = "1f1b,,gpipe";
    auto job = resolve_setup(in);
    QVERIFY(!job.ok());
    QVERIFY(has_problem_at(job.problems, "global_batch"));
    QVERIFY(has_problem_at(job.problems, "axes"));
    QVERIFY(has_problem_at(job.problems, "headroom"));
    QVERIFY(has_problem_at(job.problems, "schedules"));

    SetupInputs attention;
    QCOMPARE(resolve_setup(attention).value.space.attentions, std::vector<Attention>{Attention::fused});
    attention.attention = "fused,unfused";
    QCOMPARE(resolve_setup(attention).value.space.attentions, (std::vector<Attention>{Attention::fused, Attention::unfused}));
    attention.attention = "flash";
    QVERIFY(has_problem_at(resolve_setup(attention).problems, "attention"));

    SetupInputs cp;
    QCOMPARE(resolve_setup(cp).value.space.cp_comm, CpComm::ring);
    cp.cp_comm = "all-gather";
    QCOMPARE(resolve_setup(cp).value.space.cp_comm, CpComm::all_gather);
    cp.cp_comm = "p2p";
    QVERIFY(has_problem_at(resolve_setup(cp).problems, "cp_comm"));
    cp.cp_comm = "ring";
    QCOMPARE(resolve_setup(cp).value.space.loss, Loss::fused);
    cp.loss = "eager";
    QCOMPARE(resolve_setup(cp).value.space.loss, Loss::eager);
    cp.loss = "liger";
    QVERIFY(has_problem_at(resolve_setup(cp).problems, "loss"));
    cp.loss = "fused";
    QVERIFY(!resolve_setup(cp).value.space.fp32_gradients);
    cp.fp32_gradients = true;
    QVERIFY(resolve_setup(cp).value.space.fp32_gradients);
    QVERIFY(!resolve_setup(cp).value.space.bf16_moments);
    cp.bf16_moments = true;
    QVERIFY(resolve_setup(cp).value.space.bf16_moments);
    for (const OverlapSwitch& s : kOverlapSwitches) {  // each overlap switch reaches the search space alone
      QVERIFY(!(resolve_setup(cp).value.space.overlaps.*s.wanted));
      cp.overlaps.*s.wanted = true;
      const OverlapWanted wanted = resolve_setup(cp).value.space.overlaps;
      for (const OverlapSwitch& other : kOverlapSwitches) QCOMPARE(wanted.*other.wanted, &other == &s);
      cp.overlaps.*s.wanted = false;
    }
    QCOMPARE(int(resolve_setup(cp).value.space.recompute_modules), int(kDefaultRecomputeModules));
    cp.recompute_modules = "layernorm, moe_act";
    QCOMPARE(int(resolve_setup(cp).value.space.recompute_modules),
             int(module_bit(RecomputeModule::layernorm) | module_bit(RecomputeModule::moe_act)));
    cp.recompute_modules = "attn";
    QVERIFY(!resolve_setup(cp).ok());
    // The experts' tp to search and the dispatch, as the CLI's --expert-tp and --ep-dispatch.
    QCOMPARE(resolve_setup(cp).value.space.expert_tensor_parallel, (std::vector<std::int64_t>{0, 1}));
    QCOMPARE(resolve_setup(cp).value.space.ep_dispatch, EpDispatch::all_to_all);
    cp.expert_tp = "1";
    cp.ep_dispatch = "deduplicated";
    QCOMPARE(resolve_setup(cp).value.space.expert_tensor_parallel, (std::vector<std::int64_t>{1}));
    QCOMPARE(resolve_setup(cp).value.space.ep_dispatch, EpDispatch::deduplicated);
    cp.expert_tp = "2";
    QVERIFY(has_problem_at(resolve_setup(cp).problems, "expert_tp"));
    cp.expert_tp = "tp,1";
    cp.ep_dispatch = "deepep";
    QVERIFY(has_problem_at(resolve_setup(cp).problems, "ep_dispatch"));
    cp.ep_dispatch = "all-to-all";

    SetupInputs bad_model;
    bad_model.model = "no-such-model";
    auto missing = resolve_setup(bad_model);
    QVERIFY(has_problem_at(missing.problems, "model"));

    SetupInputs heads;
    heads.hidden = 1000;  // 96 heads do not divide it
    auto uneven = resolve_setup(heads);
    QVERIFY(has_problem_at(uneven.problems, "hidden"));

    SetupInputs seq;
    seq.seq = 4096;  // learned positions cover 2048
    QVERIFY(has_problem_at(resolve_setup(seq).problems, "seq"));

    SetupInputs overridden;
    overridden.layers = 48;
    overridden.hidden = 6144;
    auto ok = resolve_setup(overridden);
    QVERIFY(ok.ok());
    QCOMPARE(ok.value.model.transformer.layers, std::int64_t{48});
    QCOMPARE(ok.value.model.transformer.head_dim, std::int64_t{64});
  }

  void candidatesModelHoldsEveryCandidate() {
    auto outcome = small_outcome();
    CandidatesModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    model.setOutcome(outcome);
    const auto& stats = outcome->result.stats;
    QVERIFY(stats.feasible > 0);
    QVERIFY(stats.plans > stats.feasible);
    QCOMPARE(static_cast<std::int64_t>(model.rowCount()), stats.plans);
    QCOMPARE(static_cast<std::int64_t>(model.feasibleCount()), stats.feasible);
    QCOMPARE(model.data(model.index(0, CandidatesModel::Rank)).toInt(), 1);
    QCOMPARE(model.data(model.index(0, CandidatesModel::Status)).toString(), QString("feasible"));
    const Candidate& fastest = outcome->result.ranked.front();
    QCOMPARE(model.data(model.index(0, CandidatesModel::StepS), CandidatesModel::SortRole).toDouble(), fastest.estimate.time.step_s);
    QCOMPARE(model.data(model.index(0, CandidatesModel::StepS)).toString(), QString::number(fastest.estimate.time.step_s, 'f', 3));
    const int last = model.rowCount() - 1;
    QCOMPARE(model.data(model.index(last, CandidatesModel::Status)).toString(),
             QString::fromStdString(to_string(outcome->rejected.back().rejection)));
    QVERIFY(!model.data(model.index(last, 0), CandidatesModel::FeasibleRole).toBool());
  }

  // Issue 15: the attention column says which attention a plan uses, and is
  // worth showing only when both were searched; the stage-layers column shows
  // an uneven pipeline split (gpt2-124m's 12 layers over pp = 8).
  void candidatesShowAttentionAndStageLayers() {
    auto outcome = small_outcome();
    CandidatesModel model;
    model.setOutcome(outcome);
    QVERIFY(!model.columnInformative(CandidatesModel::Attention));
    QCOMPARE(model.data(model.index(0, CandidatesModel::Attention)).toString(), QString("fused"));
    int uneven_row = -1;
    for (int r = 0; r < model.rowCount() && uneven_row < 0; ++r) {
      if (!model.candidate(r)->plan.stage_layers.empty()) uneven_row = r;
    }
    QVERIFY(uneven_row >= 0);
    QVERIFY(model.columnInformative(CandidatesModel::StageLayers));
    QCOMPARE(model.data(model.index(uneven_row, CandidatesModel::StageLayers)).toString(),
             QString::fromStdString(stage_layers_text(model.candidate(uneven_row)->plan.stage_layers)));
    QCOMPARE(model.headerData(CandidatesModel::StageLayers, Qt::Horizontal).toString(), QString("stage layers"));

    SetupInputs in;
    in.model = "gpt2-124m";
    in.nodes = 1;
    in.global_batch = 64;
    in.threads = 1;
    in.axes = "dp";
    in.zero = "0";
    in.recompute = "none";
    in.schedules = "1f1b";
    in.attention = "fused,unfused";
    auto job = resolve_setup(in);
    QVERIFY(job.ok());
    auto both = std::make_shared<SearchOutcome>();
    both->job = job.value;
    both->evaluator = std::make_shared<const Evaluator>(job.value.model, job.value.cluster, job.value.world_size, job.value.seq_len);
    SearchOptions options;
    options.threads = 1;
    both->result = search(*both->evaluator, job.value.global_batch, job.value.space, options);
    CandidatesModel searched;
    QAbstractItemModelTester tester(&searched, QAbstractItemModelTester::FailureReportingMode::QtTest);
    searched.setOutcome(both);
    QVERIFY(searched.columnInformative(CandidatesModel::Attention));
    QVERIFY(!searched.columnInformative(CandidatesModel::StageLayers));
    QSet<QString> attentions;
    for (int r = 0; r < searched.rowCount(); ++r) attentions.insert(searched.data(searched.index(r, CandidatesModel::Attention)).toString());
    QCOMPARE(attentions, (QSet<QString>{"fused", "unfused"}));
  }

  void filterShowsFeasibleOrAllAndSortsOnNumbers() {
    auto outcome = small_outcome();
    CandidatesModel model;
    model.setOutcome(outcome);
    CandidatesFilter filter;
    QAbstractItemModelTester tester(&filter, QAbstractItemModelTester::FailureReportingMode::QtTest);
    filter.setSourceModel(&model);
    QCOMPARE(static_cast<std::int64_t>(filter.rowCount()), outcome->result.stats.feasible);
    filter.setShowRejected(true);
    QCOMPARE(static_cast<std::int64_t>(filter.rowCount()), outcome->result.stats.plans);
    filter.setShowRejected(false);

    std::int64_t zb = 0;
    for (const auto& c : outcome->result.ranked) zb += to_string(c.plan.schedule) == "zb-h1" ? 1 : 0;
    filter.setText("ZB-H1");
    QCOMPARE(static_cast<std::int64_t>(filter.rowCount()), zb);
    filter.setText("");

    filter.sort(CandidatesModel::MemoryGiB, Qt::AscendingOrder);
    double previous = -1;
    for (int r = 0; r < filter.rowCount(); ++r) {
      const double gib = filter.data(filter.index(r, CandidatesModel::MemoryGiB), CandidatesModel::SortRole).toDouble();
      QVERIFY(gib >= previous);
      previous = gib;
    }
    // Mesh text sorts as text; micro-batch by size, then count.
    filter.sort(CandidatesModel::MicroBatch, Qt::DescendingOrder);
    const auto* top = model.candidate(filter.mapToSource(filter.index(0, 0)).row());
    for (const auto& c : outcome->result.ranked) QVERIFY(c.plan.micro_batch <= top->plan.micro_batch);
  }

  void planModelsAndCompare() {
    auto outcome = small_outcome();
    const Plan& a = outcome->result.ranked.front().plan;
    const Plan& b = outcome->result.ranked.back().plan;
    const PlanDetails da = analyse_plan(*outcome, a, false), db = analyse_plan(*outcome, b, false);
    QVERIFY(da.explanation.feasible());

    FiguresModel figures;
    QAbstractItemModelTester t1(&figures, QAbstractItemModelTester::FailureReportingMode::QtTest);
    figures.setFigures(da.figures);
    QCOMPARE(figures.rowCount(), static_cast<int>(da.figures.size()));
    QCOMPARE(figures.data(figures.index(0, 1)).toString(), QString::fromStdString(a.mesh.to_string()));

    StageMemoryModel memory;
    QAbstractItemModelTester t2(&memory, QAbstractItemModelTester::FailureReportingMode::QtTest);
    memory.setPlan(a, da.explanation.memory);
    QCOMPARE(static_cast<std::int64_t>(memory.rowCount()), a.mesh.size(Axis::pp));
    const double total = memory.data(memory.index(0, StageMemoryModel::Total), Qt::UserRole).toDouble();
    QCOMPARE(total, da.explanation.memory->stages[0].memory.total_bytes());

    for (int column = StageMemoryModel::LossTransient; column <= StageMemoryModel::AllocatedPeak; ++column) {
      QVERIFY(memory.data(memory.index(0, column), Qt::UserRole).isValid());
    }
    QCOMPARE(memory.data(memory.index(0, StageMemoryModel::AllocatedPeak), Qt::UserRole).toDouble(),
             da.explanation.memory->stages[0].memory.allocated_peak_bytes());

    CompareModel compare;
    QAbstractItemModelTester t3(&compare, QAbstractItemModelTester::FailureReportingMode::QtTest);
    compare.setPlans("A", da.figures, "B", db.figures);
    QVERIFY(compare.rowCount() >= static_cast<int>(da.figures.size()));
    for (int r = 0; r < compare.rowCount(); ++r) {
      if (compare.data(compare.index(r, 0)).toString() == "step time") {
        QVERIFY(compare.data(compare.index(r, CompareModel::Difference)).toString().startsWith("+"));
      }
    }
    Figure x{"step time", "s", 1.0, "1.000", true}, y{"step time", "s", 1.5, "1.500", true};
    QCOMPARE(CompareModel::difference(&x, &y), QString("+0.500 s (+50.0%)"));
    QCOMPARE(CompareModel::difference(&y, &x), QString("-0.500 s (-33.3%)"));
    Figure s1{"schedule", "", 0, "1f1b", false}, s2{"schedule", "", 0, "gpipe", false};
    QCOMPARE(CompareModel::difference(&s1, &s2), QString("differs"));
    QCOMPARE(CompareModel::difference(&s1, &s1), QString("same"));
    QCOMPARE(CompareModel::difference(&s1, nullptr), QString("only in one plan"));

    QCOMPARE(stage_ranks(parse_mesh("dp=2,pp=2,tp=2", "t").value, 1), (std::vector<std::int64_t>{2, 3, 6, 7}));
  }

  // Issue 15, item 2: the memory view shows the peak rows `meshplan explain`
  // prints (H100: a CUDA context and cuBLAS workspaces are in its preset);
  // what is stacked sums to the total, and the transient not at the peak is not.
  void memoryViewShowsThePeakRows() {
    const auto model = load_model("gpt2-124m");
    const auto cluster = load_cluster("dgx-h100");
    QVERIFY(model.ok() && cluster.ok());
    Plan plan;
    plan.mesh = parse_mesh("dp=8", "t").value;
    plan.micro_batch = 8;
    plan.global_batch = 64;
    const Explanation ex = explain_plan(model.value, cluster.value, Deployment{8, 0}, plan);
    QVERIFY(ex.memory);
    const MemoryBreakdown& m = ex.memory->stages[0].memory;
    QVERIFY(m.runtime_context_bytes > 0 && m.workspace_bytes > 0 && m.loss_transient_bytes > 0);
    const auto rows = memory_rows(m);
    QCOMPARE(rows.size(), kMemoryRowCount);
    double stacked = 0;
    int transients_at_peak = 0;
    for (const auto& row : rows) {
      if (row.at_peak) stacked += row.bytes;
      if ((row.name == "loss transient" || row.name == "activation gradients") && row.at_peak) ++transients_at_peak;
    }
    QCOMPARE(transients_at_peak, 1);
    QVERIFY(std::abs(stacked - m.total_bytes()) <= 1e-6 * m.total_bytes());

    StageMemoryModel table;
    QAbstractItemModelTester tester(&table, QAbstractItemModelTester::FailureReportingMode::QtTest);
    table.setPlan(plan, ex.memory);
    auto bytes = [&](int column) { return table.data(table.index(0, column), Qt::UserRole).toDouble(); };
    QCOMPARE(bytes(StageMemoryModel::LossTransient), m.loss_transient_bytes);
    QCOMPARE(bytes(StageMemoryModel::ActivationGradients), m.activation_gradient_bytes);
    QCOMPARE(bytes(StageMemoryModel::Workspaces), m.workspace_bytes);
    QCOMPARE(bytes(StageMemoryModel::RuntimeContext), m.runtime_context_bytes);
    QCOMPARE(bytes(StageMemoryModel::AllocatorReserve), m.allocator_reserve_bytes);
    QCOMPARE(bytes(StageMemoryModel::AllocatedPeak), m.allocated_peak_bytes());
    QCOMPARE(table.headerData(StageMemoryModel::AllocatedPeak, Qt::Horizontal).toString(), QString("allocated peak GiB"));

    bool context = false, peak = false;
    double by_kind = 0, compute = 0;
    for (const Figure& f : plan_figures(model.value, plan, ex)) {
      context = context || (f.name == "memory: runtime context" && std::abs(f.value - m.runtime_context_bytes / (1024.0 * 1024 * 1024)) < 1e-9);
      peak = peak || f.name == "memory: allocated peak";
      if (f.name.rfind("compute: ", 0) == 0) by_kind += f.value;  // compute by kind, as explain prints it
      if (f.name == "compute") compute = f.value;
    }
    QVERIFY(context && peak);
    QVERIFY(compute > 0);
    QVERIFY(std::abs(by_kind - compute) <= 1e-9 * compute);
  }

  // Issue 13, item 4: the plan details say which link each axis rides, and
  // warn (with the faster order) when tp leaves the node for no reason.
  void planDetailsShowTheLinkEachAxisRides() {
    SetupInputs in;
    in.model = "gpt2-124m";
    in.nodes = 2;
    in.global_batch = 64;
    in.threads = 1;
    auto job = resolve_setup(in);
    QVERIFY(job.ok());
    auto outcome = std::make_shared<SearchOutcome>();
    outcome->job = job.value;
    Plan crossing = plan_of("tp=4,dp=4", 1, 64, 1);  // gpt2-124m has 12 heads: tp 4
    crossing.sequence_parallel = true;
    const PlanDetails details = analyse_plan(*outcome, crossing, false);
    QVERIFY(details.explanation.valid);
    auto figure = [&](const std::string& name) -> const Figure* {
      for (const auto& f : details.figures) {
        if (f.name == name) return &f;
      }
      return nullptr;
    };
    QVERIFY(figure("link tp") && figure("link dp"));
    QCOMPARE(figure("link tp")->text, std::string("InfiniBand across 2 nodes, 2 per node"));
    QCOMPARE(figure("link dp")->text, std::string("NVLink inside a node, 4 per node"));
    QVERIFY(figure("link tp bandwidth")->value < figure("link dp bandwidth")->value);
    QVERIFY(!figure("link tp all-to-all bandwidth"));  // tp runs no all-to-all
    // Ulysses cp over 2 nodes, 2 members per node: its all-to-all cannot aggregate the NICs, and the
    // details say at what rate it runs (docs/cost-model.md, "All-to-all across nodes"); ring cp runs none.
    Plan ulysses = plan_of("cp=4,dp=4", 1, 64, 1);
    ulysses.cp_comm = CpComm::all_to_all;
    auto cp_figure = [](const PlanDetails& d, const std::string& name) -> const Figure* {
      for (const auto& f : d.figures) {
        if (f.name == name) return &f;
      }
      return nullptr;
    };
    const PlanDetails cp_details = analyse_plan(*outcome, ulysses, false);
    QVERIFY(cp_details.explanation.valid);
    QVERIFY(cp_figure(cp_details, "link cp all-to-all bandwidth"));
    QVERIFY(cp_figure(cp_details, "link cp all-to-all bandwidth")->value < cp_figure(cp_details, "link cp bandwidth")->value);
    ulysses.cp_comm = CpComm::ring;
    QVERIFY(!cp_figure(analyse_plan(*outcome, ulysses, false), "link cp all-to-all bandwidth"));
    QVERIFY(figure("faster mesh order"));
    QCOMPARE(figure("faster mesh order")->text, std::string("dp=4,tp=4"));
    const auto& problems = details.explanation.problems;
    QVERIFY(std::any_of(problems.begin(), problems.end(), [](const Problem& p) {
      return p.severity == Severity::warning && p.where == "mesh" && p.message.find("--mesh dp=4,tp=4") != std::string::npos;
    }));

    // The order the warning names keeps tp inside a node, and is not warned about.
    Plan inside = crossing;
    inside.mesh = parse_mesh("dp=4,tp=4", "test").value;
    const PlanDetails better = analyse_plan(*outcome, inside, false);
    QVERIFY(!better.explanation.reordering);
    QVERIFY(better.explanation.time->step_s < details.explanation.time->step_s);
    QCOMPARE(better.explanation.time->step_s, details.explanation.reordering->reordered_step_s);
  }

  void shardingOfAColumnParallelWeight() {
    // GPT-3 175B, dp=16,pp=8,tp=8: layer 3 is on stage 0 (96 layers, 12 per stage).
    const ModelSpec gpt3 = load("gpt3-175b");
    Plan plan = plan_of("dp=16,pp=8,tp=8", 1, 1536, 1);
    auto spec = sharding_spec(gpt3, plan, "layer3.mlp.w_in", TensorRole::parameters);
    QVERIFY(spec.ok());
    QCOMPARE(spec.value.partition_text(), std::string("P(None, 'tp')"));
    QCOMPARE(spec.value.stages, (std::vector<std::int64_t>{0}));
    QCOMPARE(spec.value.replicated_over, (std::vector<Axis>{Axis::dp}));
    ShardingGrid grid = sharding_grid(spec.value, plan.mesh);
    QCOMPARE(grid.rows, std::int64_t{1});
    QCOMPARE(grid.columns, std::int64_t{8});
    QCOMPARE(grid.column_extents, std::vector<std::int64_t>(8, 6144));
    // Block column 3: the tp rank 3 of stage 0 in each of the 16 dp replicas (rank = dp x 64 + pp x 8 + tp).
    std::vector<std::int64_t> expected;
    for (std::int64_t dp = 0; dp < 16; ++dp) expected.push_back(dp * 64 + 3);
    QCOMPARE(grid.cells[3].devices, expected);
    layout_sharding_grid(grid, QRectF(0, 0, 800, 400));
    QCOMPARE(grid.cells[0].rect, QRectF(0, 0, 100, 400));
    QCOMPARE(grid.cells[3].rect, QRectF(300, 0, 100, 400));
    QCOMPARE(describe_devices(grid.cells[3].devices), std::string("3, 67, ..., 963 (16 devices)"));

    // Layer 95 lives on the last stage; a device of stage 0 holds none of it.
    auto last = sharding_spec(gpt3, plan, "layer95.mlp.w_out", TensorRole::parameters);
    QCOMPARE(last.value.stages, (std::vector<std::int64_t>{7}));
    QCOMPARE(last.value.partition_text(), std::string("P('tp', None)"));
    QVERIFY(!block_of_device(last.value, plan.mesh, 0));
    QCOMPARE(*block_of_device(last.value, plan.mesh, 7 * 8 + 5), (std::vector<std::int64_t>{5, 0}));

    // ZeRO-1 shards the Adam moments over dp: 16 x 8 blocks, one device each.
    auto moment = sharding_spec(gpt3, plan, "layer3.mlp.w_in", TensorRole::optimizer_moment);
    QCOMPARE(moment.value.partition_text(), std::string("P('dp', 'tp')"));
    ShardingGrid moments = sharding_grid(moment.value, plan.mesh);
    QCOMPARE(moments.rows * moments.columns, std::int64_t{128});
    QCOMPARE(moments.row_extents, std::vector<std::int64_t>(16, 768));
    QCOMPARE(moments.cells[static_cast<std::size_t>(2 * 8 + 5)].devices, (std::vector<std::int64_t>{2 * 64 + 5}));
    // ... but not the gradients (ZeRO-2) nor the weights (ZeRO-3).
    QCOMPARE(sharding_spec(gpt3, plan, "layer3.mlp.w_in", TensorRole::gradients).value.partition_text(), std::string("P(None, 'tp')"));
  }

  void shardingWithFsdpEmbeddingsAndActivations() {
    const ModelSpec gpt2 = load("gpt2-124m");
    Plan plan = plan_of("fsdp=4,tp=2", 2, 64, 0);
    auto w_in = sharding_spec(gpt2, plan, "layer0.mlp.w_in", TensorRole::parameters);
    QCOMPARE(w_in.value.partition_text(), std::string("P('fsdp', 'tp')"));
    ShardingGrid grid = sharding_grid(w_in.value, plan.mesh);
    QCOMPARE(grid.rows, std::int64_t{4});
    QCOMPARE(grid.columns, std::int64_t{2});
    for (const auto& cell : grid.cells) QCOMPARE(cell.devices, (std::vector<std::int64_t>{cell.row * 2 + cell.column}));
    layout_sharding_grid(grid, QRectF(10, 20, 200, 400));
    QCOMPARE(grid.cells[5].rect, QRectF(110, 220, 100, 100));

    // Vocabulary-parallel embedding, tied: 50257 rows in 2 blocks, hidden over fsdp.
    auto embedding = sharding_spec(gpt2, plan, "embedding.tokens", TensorRole::parameters);
    QCOMPARE(embedding.value.partition_text(), std::string("P('tp', 'fsdp')"));
    QCOMPARE(sharding_grid(embedding.value, plan.mesh).row_extents, (std::vector<std::int64_t>{25129, 25128}));
    QCOMPARE(split_extents(50257, 8), (std::vector<std::int64_t>{6283, 6283, 6283, 6283, 6283, 6283, 6283, 6276}));
    QCOMPARE(split_extents(3, 4), (std::vector<std::int64_t>{1, 1, 1, 0}));

    // A 1-D norm weight: whole over tp, split over fsdp; one row of 4 blocks, each on both tp ranks.
    auto norm = sharding_spec(gpt2, plan, "layer0.ln1", TensorRole::parameters);
    ShardingGrid norms = sharding_grid(norm.value, plan.mesh);
    QCOMPARE(norms.rows, std::int64_t{1});
    QCOMPARE(norms.columns, std::int64_t{4});
    QCOMPARE(norms.cells[1].devices, (std::vector<std::int64_t>{2, 3}));
    QCOMPARE(norm.value.replicated_over, (std::vector<Axis>{Axis::tp}));

    // Activations: [batch 2 x 4, seq, hidden]; batch over fsdp; sequence over tp only under sequence parallelism.
    auto input = sharding_spec(gpt2, plan, "layer0.input", TensorRole::activation);
    QCOMPARE(input.value.dims[0].size, std::int64_t{8});
    QCOMPARE(input.value.partition_text(), std::string("P('fsdp', None, None)"));
    plan.sequence_parallel = true;
    QCOMPARE(sharding_spec(gpt2, plan, "layer0.input", TensorRole::activation).value.partition_text(), std::string("P('fsdp', 'tp', None)"));
    auto scores = sharding_spec(gpt2, plan, "layer0.attn.scores", TensorRole::activation);
    QCOMPARE(scores.value.partition_text(), std::string("P('fsdp', 'tp', None, None)"));
    ShardingGrid score_grid = sharding_grid(scores.value, plan.mesh);  // rows: batch; columns: heads x query x key
    QCOMPARE(score_grid.rows, std::int64_t{4});
    QCOMPARE(score_grid.columns, std::int64_t{2});
    QCOMPARE(score_grid.column_extents[0], std::int64_t{6} * 1024 * 1024);

    // Wrong role or name: a problem at "tensor".
    QVERIFY(!sharding_spec(gpt2, plan, "layer0.input", TensorRole::parameters).ok());
    QVERIFY(!sharding_spec(gpt2, plan, "layer12.mlp.w_in", TensorRole::parameters).ok());
    QCOMPARE(sharding_spec(gpt2, plan, "nonsense", TensorRole::parameters).problems.front().where, std::string("tensor"));
    QCOMPARE(stage_of_layer(12, plan_of("pp=4,dp=2", 1, 8, 0), 5), std::int64_t{1});
    Plan interleaved = plan_of("pp=4,dp=2", 1, 8, 0);
    interleaved.schedule = {ScheduleKind::interleaved, 3};
    QCOMPARE(stage_of_layer(12, interleaved, 5), std::int64_t{1});  // chunk 5 of 12 runs on stage 5 mod 4
    QCOMPARE(stage_of_layer(12, interleaved, 4), std::int64_t{0});
  }

  void meshLayoutRectangles() {
    // 4 nodes of 8 in 400 x 100: one row of nodes; devices 4 x 2 inside each.
    const MeshLayout layout = mesh_layout(32, 8, 400, 100);
    QCOMPARE(layout.node_columns, std::int64_t{4});
    QCOMPARE(layout.node_rows, std::int64_t{1});
    QCOMPARE(layout.device_columns, std::int64_t{4});
    QCOMPARE(layout.device_rows, std::int64_t{2});
    const QRectF area(0, 0, 400, 100);
    QCOMPARE(node_rect(layout, area, 1), QRectF(100, 0, 100, 100));
    QCOMPARE(device_rect(layout, area, 13), QRectF(126.5, 50, 23.5, 47));
    QCOMPARE(device_at(layout, area, QPointF(130, 60)), std::int64_t{13});
    QCOMPARE(device_at(layout, area, QPointF(101, 1)), std::int64_t{-1});  // in a node's padding
    // 1024 devices in a wide area: 128 nodes laid out to make devices largest.
    const MeshLayout big = mesh_layout(1024, 8, 1600, 800);
    QVERIFY(big.node_columns * big.node_rows >= 128);
    QVERIFY((big.node_columns - 1) * big.node_rows < 128);
  }

  void memoryBarsAgainstCapacity() {
    const QRectF plot(40, 0, 400, 200);
    QCOMPARE(bar_y(0, 100, plot), 200.0);
    QCOMPARE(bar_y(100, 100, plot), 0.0);
    const auto bars = stacked_bar({10, 20, 0, 30}, 100, plot, 50, 20);
    QCOMPARE(bars.size(), std::size_t{4});
    QCOMPARE(bars[0], QRectF(50, 180, 20, 20));
    QCOMPARE(bars[1], QRectF(50, 140, 20, 40));
    QCOMPARE(bars[2], QRectF(50, 140, 20, 0));
    QCOMPARE(bars[3], QRectF(50, 80, 20, 60));
    QCOMPARE(nice_ceiling(73), 100.0);
    QCOMPARE(nice_ceiling(0.15), 0.2);
    QCOMPARE(nice_ceiling(5), 5.0);
    QCOMPARE(nice_ceiling(81.6), 100.0);
  }

  void rooflineMapping() {
    LogLogMap map{1, 1e4, 1e9, 1e15, QRectF(0, 0, 400, 600)};
    QCOMPARE(map.x_of(100), 200.0);
    QCOMPARE(map.y_of(1e12), 300.0);
    QCOMPARE(map.x_of(1), 0.0);
    QCOMPARE(map.y_of(1e15), 0.0);
    QVERIFY(std::fabs(map.x_value(300) - 1000) < 1e-9);
    QCOMPARE(roofline_ceiling(10, 312e12, 2e12), 20e12);
    QCOMPARE(roofline_ceiling(1000, 312e12, 2e12), 312e12);
    QCOMPARE(decades(3, 2000), (std::vector<double>{1, 10, 100, 1000, 10000}));

    // GPT-3's mlp.w_in on one device of dp=16,pp=8,tp=8, micro-batch 1: 2048 x 6144 x 12288.
    auto job = resolve_setup(SetupInputs{});
    const Evaluator evaluator(job.value.model, job.value.cluster, job.value.world_size, job.value.seq_len);
    Plan plan = plan_of("dp=16,pp=8,tp=8", 1, 1536, 1);
    plan.seq_len = 2048;
    const Roofline roofline = plan_roofline(evaluator, plan);
    QCOMPARE(roofline.peak_flops_per_s, 312e12);
    const auto it = std::find_if(roofline.points.begin(), roofline.points.end(),
                                 [](const RooflinePoint& p) { return p.name == "layer0.mlp.w_in"; });
    QVERIFY(it != roofline.points.end());
    QVERIFY(it->gemm);
    QCOMPARE(it->flops, 2.0 * 2048 * 6144 * 12288);
    QCOMPARE(it->bytes, (2048.0 * 12288 + 12288.0 * 6144 + 2048.0 * 6144) * 2);
    QVERIFY(it->achieved_flops_per_s() <= roofline.achievable_flops_per_s * (1 + 1e-12));
    for (const auto& p : roofline.points) {
      QVERIFY(p.achieved_flops_per_s() <= roofline_ceiling(p.intensity(), roofline.peak_flops_per_s, roofline.memory_bytes_per_s) * (1 + 1e-9));
    }

    // fp8 on H100s (gemm_in_fp8): a layer's weight GEMMs move 1-byte operands at the fp8 peak; the LM head
    // keeps bf16's bytes and time.
    SetupInputs h100;
    h100.cluster = "dgx-h100";
    auto h100_job = resolve_setup(h100);
    const Evaluator hopper(h100_job.value.model, h100_job.value.cluster, h100_job.value.world_size, h100_job.value.seq_len);
    auto point = [&](Precision precision, const std::string& name) {
      plan.precision = precision;
      const Roofline r = plan_roofline(hopper, plan);
      const auto found = std::find_if(r.points.begin(), r.points.end(), [&](const RooflinePoint& p) { return p.name == name; });
      return found == r.points.end() ? RooflinePoint{} : *found;
    };
    QCOMPARE(point(Precision::fp8, "layer0.mlp.w_in").bytes, 2048.0 * 12288 + 12288.0 * 6144 + 2048.0 * 6144);
    QVERIFY(point(Precision::fp8, "layer0.mlp.w_in").time_s < point(Precision::bf16, "layer0.mlp.w_in").time_s);
    const RooflinePoint head8 = point(Precision::fp8, "head.output"), head16 = point(Precision::bf16, "head.output");
    QVERIFY(head16.time_s > 0);
    QCOMPARE(head8.bytes, head16.bytes);
    QCOMPARE(head8.time_s, head16.time_s);
  }

  void timelineZoomAndPan() {
    TimeAxis axis(10, 100, 1000);
    QCOMPARE(axis.x_of(5), 600.0);
    QCOMPARE(axis.t_of(100), 0.0);
    axis.zoom(2, 600);  // the time under x = 600 stays there
    QCOMPARE(axis.span_s(), 5.0);
    QCOMPARE(axis.start_s(), 2.5);
    QCOMPARE(axis.x_of(5), 600.0);
    axis.pan(100);  // drag right 100 px = 0.5 s earlier
    QCOMPARE(axis.start_s(), 2.0);
    axis.pan(10000);
    QCOMPARE(axis.start_s(), 0.0);
    axis.pan(-1e6);
    QCOMPARE(axis.start_s(), 5.0);  // clamped at the end
    axis.zoom(0.1, 600);
    QCOMPARE(axis.span_s(), 10.0);
    QCOMPARE(axis.start_s(), 0.0);
    axis.resize(0, 500);
    QCOMPARE(axis.x_of(10), 500.0);
  }

  void bubblesAreTheIdleGaps() {
    QCOMPARE(idle_intervals({{1, 2}, {1.5, 3}, {5, 6}}, 0, 8),
             (std::vector<std::pair<double, double>>{{0, 1}, {3, 5}, {6, 8}}));
    QCOMPARE(idle_intervals({}, 0, 2), (std::vector<std::pair<double, double>>{{0, 2}}));
    // 1F1B, 4 uniform stages, 8 micro-batches, forward 1 s, backward 2 s: each
    // stage idles (p - 1)(f + b) = 9 s of the (m + p - 1)(f + b) = 33 s step.
    const sim::Simulation simulation =
        sim::simulate_work(sim::uniform_step_work(Schedule{ScheduleKind::one_f_one_b, 1}, 4, 8, 1.0, 2.0, 0.0), {});
    const auto lanes = timeline_lanes(simulation.timeline);
    QCOMPARE(lanes.size(), std::size_t{4});
    for (const auto& lane : lanes) {
      QCOMPARE(lane.events.size(), std::size_t{16});
      std::vector<std::pair<double, double>> busy;
      for (auto e : lane.events) busy.emplace_back(simulation.timeline.events[static_cast<std::size_t>(e)].start_s,
                                                   simulation.timeline.events[static_cast<std::size_t>(e)].end_s);
      double idle = 0;
      for (const auto& [a, b] : idle_intervals(busy, 0, simulation.summary.step_s)) idle += b - a;
      QVERIFY(std::fabs(idle - 9.0) < 1e-9);
    }
    QVERIFY(std::fabs(simulation.summary.step_s - 33.0) < 1e-9);
  }

  void nearestPointPicksByPixels() {
    const std::vector<QPointF> points{{1, 100}, {2, 10}, {10, 50}};
    QCOMPARE(nearest_point(points, QPointF(2.2, 12), 1, 1), 1);
    // y differences dominate when y is scaled up
    QCOMPARE(nearest_point(points, QPointF(9, 95), 1, 1), 0);
    QCOMPARE(nearest_point(points, QPointF(9, 95), 100, 1), 2);
    QCOMPARE(nearest_point({}, QPointF(0, 0), 1, 1), -1);
  }

  void launchArgumentsMetricsAndCsv() {
    LaunchRequest request;
    request.plan_path = "/tmp/p.json";
    request.metrics_path = "/tmp/m.jsonl";
    request.steps = 5;
    QCOMPARE(launch_arguments(request), (QStringList{"launch", "--plan", "/tmp/p.json", "--metrics", "/tmp/m.jsonl", "--steps", "5"}));
    request.data = "synthetic-text";
    QCOMPARE(launch_arguments(request), (QStringList{"launch", "--plan", "/tmp/p.json", "--metrics", "/tmp/m.jsonl", "--steps", "5",
                                                     "--data", "synthetic-text"}));
    request.has_launch = false;
    request.shrink = true;  // train has no --shrink
    QCOMPARE(launch_arguments(request).front(), QString("train"));
    QVERIFY(!launch_arguments(request).contains("--shrink"));

    const auto p = parse_metrics_line(R"({"kind":"train","step":7,"loss":2.5,"lr":0.001,"step_s":0.125})");
    QVERIFY(p);
    QCOMPARE(p->step, qint64{7});
    QCOMPARE(p->loss, 2.5);
    QCOMPARE(p->step_s, 0.125);
    QVERIFY(std::isnan(parse_metrics_line(R"({"kind":"train","step":8,"loss":null,"step_s":0.1})")->loss));
    QVERIFY(!parse_metrics_line(R"({"kind":"eval","step":7,"eval_loss":2.5})"));
    QVERIFY(!parse_metrics_line("not json"));
    // Not a step count: skipped, not cast (1e300 to qint64 was undefined behaviour;
    // regression inputs in fuzz/corpus/fuzz_metrics_jsonl/regression-*).
    for (const char* step : {"1e300", "9223372036854775808", "-5", "2.5", "-1e300"}) {
      QVERIFY2(!parse_metrics_line(QByteArray(R"({"kind":"train","step":)") + step + "}"), step);
    }

    QTemporaryDir dir;
    const QString path = dir.filePath("m.jsonl");
    MetricsTail tail(path);
    QVERIFY(tail.readNewLines().isEmpty());
    QFile file(path);
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("{\"a\":1}\n{\"b\":");
    file.flush();
    QCOMPARE(tail.readNewLines(), (QList<QByteArray>{"{\"a\":1}"}));
    file.write("2}\n");
    file.flush();
    QCOMPARE(tail.readNewLines(), (QList<QByteArray>{"{\"b\":2}"}));

    FiguresModel figures;
    figures.setFigures({{"mesh", "", 0, "dp=2,tp=4", false}, {"step time", "s", 1.5, "1.500", true}, {"say \"hi\"", "", 0, "x", false}});
    QCOMPARE(model_to_csv(figures), QString("figure,value\r\nmesh,\"dp=2,tp=4\"\r\nstep time,1.500 s\r\n\"say \"\"hi\"\"\",x\r\n"));
  }
};

QTEST_GUILESS_MAIN(StudioCoreTest)
#include "test_studio_core.moc"
