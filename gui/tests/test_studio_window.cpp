// The main window offscreen: a setup problem is shown at its field (no exit,
// no search), the GPT-3 175B / 1024 A100 search fills the table, and the
// table, the Pareto chart and the plan views follow one selection.
#include <QLabel>
#include <QSettings>
#include <QStatusBar>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTableView>
#include <QTabWidget>
#include <QtTest>

#include "gui/app/charts.hpp"
#include "gui/app/launch_panel.hpp"
#include "gui/app/main_window.hpp"
#include "gui/app/plan_views.hpp"
#include "gui/app/setup_panel.hpp"

using namespace meshplan;
using namespace meshplan::studio;

namespace {

// The setup of a plan this machine trains: mlp-fashion on one local-cpu rank.
void setUpOneRankMlp(MainWindow& window) {
  SetupInputs in = window.setupPanel()->inputs();
  in.model = "mlp-fashion";
  in.cluster = "local-cpu";
  in.devices_per_node = 1;
  in.nodes = 1;
  in.global_batch = 64;
  window.setupPanel()->setInputs(in);
}

}  // namespace

class StudioWindowTest : public QObject {
  Q_OBJECT
 private slots:
  void invalidInputIsShownAtTheField() {
    MainWindow window(false);
    window.show();
    SetupInputs in = window.setupPanel()->inputs();
    in.hidden = 1000;  // 96 heads do not divide it
    window.setupPanel()->setInputs(in);
    window.runSearch();
    QVERIFY(!window.worker()->isRunning());
    QVERIFY(window.setupPanel()->problemText("hidden").contains("multiple of heads"));
    QVERIFY(window.setupPanel()->problemText("nodes").isEmpty());
    // The status line counts the problem in words, not "1 problem(s)".
    QStringList status;
    for (const QLabel* label : window.statusBar()->findChildren<QLabel*>()) status << label->text();
    QVERIFY2(status.join("\n").contains("1 problem in the setup: see the field marked in red."), qPrintable(status.join("\n")));
  }

  void gpt3SearchFillsTheTableAndSelectionIsLinked() {
    MainWindow window(false);
    window.resize(1400, 900);
    window.show();
    QSignalSpy shown(&window, &MainWindow::candidatesShown);
    window.runSearch();
    QVERIFY(window.worker()->isRunning());
    QVERIFY(shown.wait(60000));
    const SearchOutcome* outcome = window.candidatesModel()->outcome();
    QVERIFY(outcome);
    const auto feasible = static_cast<int>(outcome->result.ranked.size());
    QVERIFY(feasible > 0);
    QCOMPARE(window.candidatesTable()->model()->rowCount(), feasible);  // feasible only by default
    QCOMPARE(static_cast<std::int64_t>(window.candidatesModel()->rowCount()), outcome->result.stats.plans);
    QVERIFY(window.paretoPointCount() > 0);
    QCOMPARE(window.selectedRow(), 0);  // the fastest plan is selected
    QVERIFY(window.details());

    // Table -> chart and views: pick the dp=16,pp=8,tp=8 plan.
    const int index = window.findRanked("dp=16,pp=8,tp=8");
    QVERIFY(index > 0);
    window.selectRow(index);
    QCOMPARE(window.candidatesTable()->currentIndex().row(), index);  // sorted by rank: proxy row = ranked index
    QCOMPARE(window.details()->plan.mesh.size(Axis::dp) * 100 + window.details()->plan.mesh.size(Axis::pp) * 10 + window.details()->plan.mesh.size(Axis::tp), std::int64_t{16 * 100 + 8 * 10 + 8});
    QVERIFY(window.details()->simulation);

    // Chart -> table: a click at the fastest plan's point selects it again.
    const Candidate& fastest = outcome->result.ranked.front();
    window.selectNearestParetoPoint(QPointF(fastest.estimate.worst_memory.total_bytes() / (1024.0 * 1024.0 * 1024.0),
                                            fastest.estimate.time.step_s));
    QCOMPARE(window.selectedRow(), 0);
    QCOMPARE(window.candidatesTable()->currentIndex().row(), 0);

    // The sharding view draws layer 3's mlp.w_in over the selected mesh.
    QVERIFY(window.shardingPanel()->choose(3, "layer3.mlp.w_in", TensorRole::parameters));
    const auto& grid = window.shardingPanel()->canvas()->grid();
    QCOMPARE(grid.rows * grid.columns, fastest.plan.mesh.size(Axis::tp) * (fastest.plan.mesh.size(Axis::fsdp)));
    // Every tab paints, and its view exports as PNG and SVG.
    QTemporaryDir dir;
    for (int tab = 0; tab < window.tabs()->count(); ++tab) {
      window.tabs()->setCurrentIndex(tab);
      QWidget* page = window.tabs()->currentWidget();
      QVERIFY(!page->grab().isNull());
      QString error;
      const QString png = dir.filePath(QString("tab%1.png").arg(tab)), svg = dir.filePath(QString("tab%1.svg").arg(tab));
      QVERIFY2(export_png(page, png, &error), qPrintable(error));
      QVERIFY2(export_svg(page, svg, "tab", &error), qPrintable(error));
      QFile file(svg);
      QVERIFY(file.open(QIODevice::ReadOnly));
      const QByteArray text = file.readAll();
      QVERIFY(text.contains("<svg"));
      QVERIFY(text.size() > 1000);
    }
  }

  void setupInputsRoundTripThroughSettings() {
    QTemporaryDir dir;
    QSettings settings(dir.filePath("studio.ini"), QSettings::IniFormat);
    SetupPanel panel;
    SetupInputs in;
    in.model = "llama2-7b";
    in.cluster = "dgx-h100";
    in.layers = 16;
    in.nodes = 4;
    in.global_batch = 256;
    in.axes = "dp,tp";
    in.headroom = 0.1;
    in.schedules = "1f1b";
    in.attention = "fused,unfused";  // the choice that searches both
    panel.setInputs(in);
    panel.save(settings);
    SetupPanel restored;
    restored.restore(settings);
    const SetupInputs out = restored.inputs();
    QCOMPARE(out.model, in.model);
    QCOMPARE(out.cluster, in.cluster);
    QCOMPARE(out.layers, in.layers);
    QCOMPARE(out.nodes, in.nodes);
    QCOMPARE(out.global_batch, in.global_batch);
    QCOMPARE(out.axes, in.axes);
    QCOMPARE(out.headroom, in.headroom);
    QCOMPARE(out.schedules, in.schedules);
    QCOMPARE(out.attention, in.attention);
    // A fresh panel offers the rule's batch ("by rule", 0) and fused attention, as the CLI's defaults.
    const SetupInputs fresh = SetupPanel().inputs();
    QCOMPARE(fresh.global_batch, std::int64_t{0});
    QCOMPARE(fresh.attention, std::string("fused"));
  }

  // A small plan the CPU executor trains: the Launch panel runs the CLI as a
  // child process and plots every step of its metrics.
  void launchTrainsASmallPlanAndPlotsItsMetrics() {
    MainWindow window(false);
    window.show();
    setUpOneRankMlp(window);
    QSignalSpy shown(&window, &MainWindow::candidatesShown);
    window.runSearch();
    QVERIFY(shown.wait(60000));
    QVERIFY(window.details());
    LaunchPanel* launch = window.launchPanel();
    launch->setProgram(MESHPLAN_BINARY);
    launch->setSteps(6);
    launch->setData("fashion-mnist");  // Debian's dataset-fashion-mnist
    launch->start();
    QVERIFY(launch->isRunning());
    QTRY_VERIFY_WITH_TIMEOUT(!launch->isRunning(), 60000);
    QVERIFY2(launch->statusText().startsWith("Finished"), qPrintable(launch->statusText() + "\n" + launch->logText()));
    QTRY_COMPARE_WITH_TIMEOUT(launch->stepTimePoints(), 6, 2000);
    QCOMPARE(launch->lossPoints(), 6);
    QVERIFY(launch->logText().contains("--plan"));
  }

  // Runs that cannot work are refused or reported with their exit status; nothing hangs.
  void launchReportsFailures() {
    MainWindow window(false);
    window.show();
    QSignalSpy shown(&window, &MainWindow::candidatesShown);
    window.runSearch();  // GPT-3 175B on 1024 GPUs: 1024 ranks, not for this machine
    QVERIFY(shown.wait(60000));
    LaunchPanel* launch = window.launchPanel();
    launch->setProgram(MESHPLAN_BINARY);
    launch->setSteps(1);
    launch->start();
    QVERIFY(!launch->isRunning());
    QVERIFY2(launch->statusText().contains("1024 ranks"), qPrintable(launch->statusText()));

    // A one-rank plan with data that does not fit it: the command exits with status 2.
    setUpOneRankMlp(window);
    window.runSearch();
    QVERIFY(shown.wait(60000));
    launch->setData("synthetic");  // 16 inputs, 4 targets: not the MLP's 784 and 10
    launch->start();
    QTRY_VERIFY_WITH_TIMEOUT(!launch->isRunning(), 60000);
    QVERIFY2(launch->statusText().contains("failed with exit status"), qPrintable(launch->statusText()));
    QVERIFY(launch->logText().contains("784"));
    QCOMPARE(launch->lossPoints(), 0);

    launch->setProgram("/nonexistent/meshplan");
    launch->start();
    QVERIFY(!launch->isRunning());
    QVERIFY(launch->statusText().contains("not an executable"));
  }
};

QTEST_MAIN(StudioWindowTest)
#include "test_studio_window.moc"
