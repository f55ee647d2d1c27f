// The studio's main window: Setup on the left; tabs for the candidates
// (table + Pareto scatter, linked both ways) and the plan views of the
// selected candidate (figures, mesh, sharding, memory, roofline, timeline,
// compare, launch); menus and shortcuts for the common actions; a status bar
// saying what runs. The search runs in a PlannerWorker (gui/core).
//
// Defines: MainWindow.
#pragma once

#include <QElapsedTimer>
#include <QMainWindow>
#include <QTemporaryDir>

#include <memory>
#include <optional>
#include <vector>

#include "gui/core/candidates_model.hpp"
#include "gui/core/plan_details.hpp"
#include "gui/core/plan_models.hpp"
#include "gui/core/planner_worker.hpp"

class QChartView;
class QCheckBox;
class QLabel;
class QLineEdit;
class QLineSeries;
class QPlainTextEdit;
class QScatterSeries;
class QSplitter;
class QTabWidget;
class QTableView;
class QValueAxis;
class QHorizontalStackedBarSeries;

namespace meshplan::studio {

class SetupPanel;
class MeshPanel;
class ShardingPanel;
class MemoryCanvas;
class RooflineCanvas;
class TimelinePanel;
class LaunchPanel;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // `use_settings` false: neither restore nor save QSettings (screenshots, tests, timing).
  explicit MainWindow(bool use_settings = true, QWidget* parent = nullptr);
  ~MainWindow() override;

  enum Tab { CandidatesTab, PlanTab, MeshTab, ShardingTab, MemoryTab, RooflineTab, TimelineTab, CompareTab, LaunchTab, TabCount };

  SetupPanel* setupPanel() const { return setup_; }
  CandidatesModel* candidatesModel() const { return candidates_; }
  CandidatesFilter* candidatesFilter() const { return filter_; }
  QTableView* candidatesTable() const { return table_; }
  QTabWidget* tabs() const { return tabs_; }
  ShardingPanel* shardingPanel() const { return sharding_; }
  LaunchPanel* launchPanel() const { return launch_; }
  PlannerWorker* worker() const { return worker_; }
  int selectedRow() const { return selected_row_; }
  int paretoPointCount() const;
  const std::optional<PlanDetails>& details() const { return details_; }

  // Selects the candidate at a source row of the candidates model (table, chart and plan views follow).
  void selectRow(int source_row);
  // What a click at (memory GiB, step s) on the Pareto chart selects: the nearest plotted plan.
  void selectNearestParetoPoint(QPointF value);
  // The ranked index of the fastest feasible plan with these axis sizes ("dp=16,pp=8,tp=8", any order), or -1.
  int findRanked(const QString& mesh) const;
  void setCompareA();
  void setCompareB();

  // Runs the search and, once the candidates are shown, saves a PNG of each
  // view to `folder` (the plan `mesh` selected), then emits screenshotsDone.
  void takeScreenshots(const QString& folder, const QString& mesh);

 public slots:
  void runSearch();
  void cancelSearch();

 signals:
  void candidatesShown();
  void planShown();
  void screenshotsDone(bool ok);

 protected:
  void closeEvent(QCloseEvent* event) override;

 private:
  QTemporaryDir work_dir_;  // the selected plan's file for the Launch panel, removed with the window
  void buildCandidatesTab();
  void buildPlanTabs();
  void buildMenus();
  void searchFinished(SearchOutcomePtr outcome);
  void fillPareto();
  void showDetails(const Candidate& candidate);
  void updateCommunicationChart(const TimeEstimate& time);
  void exportChart(bool svg);
  void exportTable();
  void exportPlan();
  void exportTrace();
  void setStatus(const QString& text);
  QString writePlanFile(const Plan& plan, const QString& path, QString* error) const;
  void screenshotStep();

  bool use_settings_;
  SetupPanel* setup_ = nullptr;
  PlannerWorker* worker_ = nullptr;
  CandidatesModel* candidates_ = nullptr;
  CandidatesFilter* filter_ = nullptr;
  QTableView* table_ = nullptr;
  QChartView* pareto_view_ = nullptr;
  QScatterSeries* all_points_ = nullptr;
  QLineSeries* front_ = nullptr;
  QScatterSeries* selected_point_ = nullptr;
  QValueAxis* pareto_x_ = nullptr;
  QValueAxis* pareto_y_ = nullptr;
  std::vector<QPointF> plotted_;        // (GiB, s) of each plotted plan
  std::vector<int> plotted_ranked_;     // its ranked index
  QLabel* summary_ = nullptr;
  QCheckBox* show_rejected_ = nullptr;
  QLineEdit* filter_text_ = nullptr;
  QLabel* selected_label_ = nullptr;
  QTabWidget* tabs_ = nullptr;
  QSplitter* candidates_split_ = nullptr;
  FiguresModel* figures_ = nullptr;
  QTableView* figures_table_ = nullptr;
  QPlainTextEdit* problems_ = nullptr;
  MeshPanel* mesh_ = nullptr;
  ShardingPanel* sharding_ = nullptr;
  MemoryCanvas* memory_ = nullptr;
  StageMemoryModel* stage_memory_ = nullptr;
  RooflineCanvas* roofline_ = nullptr;
  QChartView* communication_view_ = nullptr;
  QWidget* roofline_tab_ = nullptr;
  TimelinePanel* timeline_ = nullptr;
  CompareModel* compare_ = nullptr;
  QLabel* compare_label_ = nullptr;
  LaunchPanel* launch_ = nullptr;
  QLabel* status_ = nullptr;
  std::vector<QWidget*> export_widget_;                  // per tab: what "export chart" renders
  std::vector<const QAbstractItemModel*> export_model_;  // per tab: what "export CSV" writes

  SearchOutcomePtr outcome_;
  int selected_row_ = -1;
  bool updating_selection_ = false;
  std::optional<PlanDetails> details_;
  std::optional<std::pair<QString, std::vector<Figure>>> compare_a_, compare_b_;
  QElapsedTimer search_clock_;

  // Screenshot run.
  QString screenshot_folder_, screenshot_mesh_;
  int screenshot_step_ = -1;
  bool screenshot_ok_ = true;
};

}  // namespace meshplan::studio
