// The planner worker: the search runs off the calling thread, reports
// progress, finishes with the candidates (the same as a direct search), and
// a cancel stops it early. Observed with QSignalSpy.
#include <QSignalSpy>
#include <QtTest>

#include "gui/core/planner_worker.hpp"

using namespace meshplan;
using namespace meshplan::studio;

class StudioWorkerTest : public QObject {
  Q_OBJECT
 private slots:
  void searchFinishesWithCandidates() {
    auto job = resolve_setup(SetupInputs{});  // GPT-3 175B on 1024 A100s, global batch 1536
    QVERIFY(job.ok());
    PlannerWorker worker;
    QSignalSpy started(&worker, &PlannerWorker::started);
    QSignalSpy progress(&worker, &PlannerWorker::progress);
    QSignalSpy finished(&worker, &PlannerWorker::finished);
    QSignalSpy failed(&worker, &PlannerWorker::failed);
    QVERIFY(worker.start(job.value));
    QVERIFY(worker.isRunning());
    QVERIFY(!worker.start(job.value));  // one search at a time
    QCOMPARE(started.count(), 1);
    QVERIFY(finished.wait(60000));
    QVERIFY(!worker.isRunning());
    QCOMPARE(failed.count(), 0);
    QVERIFY(progress.count() >= 1);
    // The last progress report: every mesh done.
    const auto last = progress.takeLast();
    QCOMPARE(last.at(1).toLongLong(), last.at(2).toLongLong());
    const auto outcome = finished.takeFirst().at(0).value<SearchOutcomePtr>();
    QVERIFY(outcome);
    QVERIFY(!outcome->cancelled);
    const auto& stats = outcome->result.stats;
    QVERIFY(stats.feasible > 0);
    QCOMPARE(static_cast<std::int64_t>(outcome->result.ranked.size()), stats.feasible);
    QCOMPARE(static_cast<std::int64_t>(outcome->rejected.size()), stats.plans - stats.feasible);
    QCOMPARE(last.at(0).toLongLong(), stats.plans);
    // The same ranking as a direct search.
    const SearchResult direct = search(*outcome->evaluator, job.value.global_batch, job.value.space);
    QCOMPARE(direct.ranked.size(), outcome->result.ranked.size());
    QCOMPARE(direct.ranked.front().plan.mesh.to_string(), outcome->result.ranked.front().plan.mesh.to_string());
    QCOMPARE(direct.ranked.front().estimate.time.step_s, outcome->result.ranked.front().estimate.time.step_s);
  }

  void cancelStopsEarly() {
    SetupInputs inputs;
    inputs.threads = 1;  // one search thread: meshes finish one by one
    auto job = resolve_setup(inputs);
    QVERIFY(job.ok());
    const auto meshes = enumerate_meshes(job.value.world_size, job.value.space, job.value.cluster.devices_per_node);
    PlannerWorker worker;
    QSignalSpy finished(&worker, &PlannerWorker::finished);
    QVERIFY(worker.start(job.value));
    worker.cancel();
    QVERIFY(finished.wait(60000));
    const auto outcome = finished.takeFirst().at(0).value<SearchOutcomePtr>();
    QVERIFY(outcome->cancelled);
    QVERIFY(outcome->result.stats.meshes < static_cast<std::int64_t>(meshes.size()));
    // A new search can start after a cancelled one.
    QVERIFY(worker.start(job.value));
    QVERIFY(finished.wait(60000));
    QCOMPARE(finished.takeFirst().at(0).value<SearchOutcomePtr>()->result.stats.meshes, static_cast<std::int64_t>(meshes.size()));
  }

  void destroyingAWorkerMidSearchWaitsForIt() {
    auto job = resolve_setup(SetupInputs{});
    auto worker = std::make_unique<PlannerWorker>();
    QVERIFY(worker->start(job.value));
    worker.reset();  // cancels and joins; must neither crash nor deliver to a dead object
    QTest::qWait(50);
  }
};

QTEST_GUILESS_MAIN(StudioWorkerTest)
#include "test_studio_worker.moc"
