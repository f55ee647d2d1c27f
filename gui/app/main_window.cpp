// MainWindow: composition of the panels, the linked candidate selection,
// exports, settings and the screenshot run.
#include "gui/app/main_window.hpp"

#include <QAction>
#include <QApplication>
#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHorizontalStackedBarSeries>
#include <QLabel>
#include <QLineEdit>
#include <QLineSeries>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScatterSeries>
#include <QScrollArea>
#include <QSettings>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTabWidget>
#include <QTableView>
#include <QTimer>
#include <QValueAxis>
#include <QVBoxLayout>

#include <algorithm>
#include <cmath>

#include "gui/app/charts.hpp"
#include "gui/app/launch_panel.hpp"
#include "gui/app/plan_views.hpp"
#include "gui/app/setup_panel.hpp"
#include "gui/app/timeline_view.hpp"
#include "gui/core/launch.hpp"
#include "gui/core/roofline.hpp"
#include "model/plan_file.hpp"

namespace meshplan::studio {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr std::size_t kMaxPlotted = 4000;  // fastest feasible plans on the scatter (plus the whole front)

QString plan_title(const Candidate& c, int rank) {
  QString text = QString::fromStdString(candidate_text(c));
  return rank > 0 ? QObject::tr("#%1 %2").arg(rank).arg(text) : text;
}

QTableView* make_table(QAbstractItemModel* model) {
  auto* view = new QTableView;
  view->setModel(model);
  view->setSelectionBehavior(QAbstractItemView::SelectRows);
  view->setSelectionMode(QAbstractItemView::SingleSelection);
  view->setAlternatingRowColors(true);
  view->verticalHeader()->setVisible(false);
  view->verticalHeader()->setDefaultSectionSize(22);
  view->horizontalHeader()->setStretchLastSection(true);
  return view;
}

}  // namespace

MainWindow::MainWindow(bool use_settings, QWidget* parent) : QMainWindow(parent), use_settings_(use_settings) {
  setWindowTitle(tr("meshplan studio"));
  worker_ = new PlannerWorker(this);
  candidates_ = new CandidatesModel(this);
  filter_ = new CandidatesFilter(this);
  filter_->setSourceModel(candidates_);

  setup_ = new SetupPanel;
  auto* scroll = new QScrollArea;
  scroll->setWidget(setup_);
  scroll->setWidgetResizable(true);
  scroll->setMinimumWidth(310);
  auto* dock = new QDockWidget(tr("Setup"), this);
  dock->setObjectName("setup_dock");
  dock->setWidget(scroll);
  dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  addDockWidget(Qt::LeftDockWidgetArea, dock);

  auto* central = new QWidget;
  auto* layout = new QVBoxLayout(central);
  layout->setContentsMargins(4, 4, 4, 4);
  selected_label_ = new QLabel(tr("No plan selected: run a search (Ctrl+R) and pick a candidate."));
  selected_label_->setStyleSheet("font-weight: bold; padding: 2px;");
  layout->addWidget(selected_label_);
  tabs_ = new QTabWidget;
  layout->addWidget(tabs_, 1);
  setCentralWidget(central);
  export_widget_.assign(TabCount, nullptr);
  export_model_.assign(TabCount, nullptr);
  buildCandidatesTab();
  buildPlanTabs();
  buildMenus();

  status_ = new QLabel(tr("Ready."));
  statusBar()->addWidget(status_, 1);

  connect(setup_, &SetupPanel::runRequested, this, &MainWindow::runSearch);
  connect(setup_, &SetupPanel::cancelRequested, this, &MainWindow::cancelSearch);
  connect(worker_, &PlannerWorker::started, this, [this](const QString& what) {
    setup_->setRunning(true);
    setStatus(tr("Searching plans: %1 ...").arg(what));
  });
  connect(worker_, &PlannerWorker::progress, this, [this](qint64 plans, qint64 done, qint64 total) {
    setup_->setProgress(done, total);
    setStatus(tr("Searching plans: %1 of %2 meshes, %3 candidates so far ...").arg(done).arg(total).arg(plans));
  });
  connect(worker_, &PlannerWorker::finished, this, &MainWindow::searchFinished);
  connect(worker_, &PlannerWorker::failed, this, [this](const QString& message) {
    setup_->setRunning(false);
    setStatus(tr("The search failed: %1").arg(message));
  });
  connect(launch_, &LaunchPanel::statusChanged, this, [this](const QString& text) { setStatus(tr("Launch: %1").arg(text)); });

  resize(1500, 950);
  if (use_settings_) {
    QSettings settings;
    restoreGeometry(settings.value("window/geometry").toByteArray());
    restoreState(settings.value("window/state").toByteArray());
    candidates_split_->restoreState(settings.value("window/candidates_split").toByteArray());
    setup_->restore(settings);
    tabs_->setCurrentIndex(settings.value("window/tab", 0).toInt());
  }
}

MainWindow::~MainWindow() = default;

void MainWindow::closeEvent(QCloseEvent* event) {
  if (use_settings_) {
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/state", saveState());
    settings.setValue("window/candidates_split", candidates_split_->saveState());
    settings.setValue("window/tab", tabs_->currentIndex());
    setup_->save(settings);
  }
  worker_->cancel();
  QMainWindow::closeEvent(event);
}

void MainWindow::setStatus(const QString& text) { status_->setText(text); }

// ---------------------------------------------------------------- tabs

void MainWindow::buildCandidatesTab() {
  auto* page = new QWidget;
  auto* layout = new QVBoxLayout(page);
  auto* bar = new QHBoxLayout;
  show_rejected_ = new QCheckBox(tr("Show rejected plans (with reasons)"));
  filter_text_ = new QLineEdit;
  filter_text_->setPlaceholderText(tr("Filter: mesh, schedule, recompute, reason... (Ctrl+F)"));
  filter_text_->setClearButtonEnabled(true);
  bar->addWidget(show_rejected_);
  bar->addWidget(filter_text_, 1);
  layout->addLayout(bar);
  summary_ = new QLabel(tr("No search yet."));
  summary_->setWordWrap(true);
  layout->addWidget(summary_);

  candidates_split_ = new QSplitter(Qt::Horizontal);
  table_ = make_table(filter_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(CandidatesModel::Rank, Qt::AscendingOrder);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  candidates_split_->addWidget(table_);

  auto* chart = new QChart;
  chart->setTitle(tr("Pareto: step time against memory per device"));
  all_points_ = new QScatterSeries;
  all_points_->setName(tr("feasible plans"));
  all_points_->setMarkerSize(5);
  all_points_->setColor(QColor(78, 121, 167, 110));
  all_points_->setBorderColor(Qt::transparent);
  front_ = new QLineSeries;
  front_->setName(tr("Pareto front"));
  front_->setPen(QPen(QColor(242, 142, 43), 2));
  front_->setPointsVisible(true);
  selected_point_ = new QScatterSeries;
  selected_point_->setName(tr("selected"));
  selected_point_->setMarkerSize(14);
  selected_point_->setColor(QColor(225, 87, 89));
  selected_point_->setBorderColor(Qt::black);
  chart->addSeries(all_points_);
  chart->addSeries(front_);
  chart->addSeries(selected_point_);
  pareto_x_ = new QValueAxis;
  pareto_x_->setTitleText(tr("GiB per device (worst stage)"));
  pareto_y_ = new QValueAxis;
  pareto_y_->setTitleText(tr("step time (s)"));
  chart->addAxis(pareto_x_, Qt::AlignBottom);
  chart->addAxis(pareto_y_, Qt::AlignLeft);
  for (auto* s : std::initializer_list<QXYSeries*>{all_points_, front_, selected_point_}) {
    s->attachAxis(pareto_x_);
    s->attachAxis(pareto_y_);
  }
  chart->legend()->setAlignment(Qt::AlignBottom);
  QFont legend_font = chart->legend()->font();
  legend_font.setPointSizeF(legend_font.pointSizeF() * 0.85);
  chart->legend()->setFont(legend_font);
  pareto_view_ = new QChartView(chart);
  pareto_view_->setRenderHint(QPainter::Antialiasing);
  pareto_view_->setMinimumWidth(340);
  candidates_split_->addWidget(pareto_view_);
  candidates_split_->setStretchFactor(0, 3);
  candidates_split_->setStretchFactor(1, 2);
  candidates_split_->setSizes({1080, 360});
  layout->addWidget(candidates_split_, 1);
  tabs_->addTab(page, tr("Candidates"));
  export_widget_[CandidatesTab] = pareto_view_;
  export_model_[CandidatesTab] = filter_;

  connect(show_rejected_, &QCheckBox::toggled, this, [this](bool on) { filter_->setShowRejected(on); });
  connect(filter_text_, &QLineEdit::textChanged, this, [this](const QString& text) { filter_->setText(text.trimmed()); });
  connect(table_->selectionModel(), &QItemSelectionModel::currentRowChanged, this, [this](const QModelIndex& current) {
    if (updating_selection_ || !current.isValid()) return;
    selectRow(filter_->mapToSource(current).row());
  });
  auto clicked = [this](const QPointF& value) { selectNearestParetoPoint(value); };
  connect(all_points_, &QScatterSeries::clicked, this, clicked);
  connect(front_, &QLineSeries::clicked, this, clicked);
}

void MainWindow::buildPlanTabs() {
  // Plan: the figures and the explanation's problems.
  auto* plan_page = new QWidget;
  auto* plan_layout = new QVBoxLayout(plan_page);
  figures_ = new FiguresModel(this);
  figures_table_ = make_table(figures_);
  figures_table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::ResizeToContents);
  plan_layout->addWidget(figures_table_, 3);
  problems_ = new QPlainTextEdit;
  problems_->setReadOnly(true);
  problems_->setMaximumHeight(120);
  plan_layout->addWidget(problems_, 1);
  tabs_->addTab(plan_page, tr("Plan"));
  export_model_[PlanTab] = figures_;

  mesh_ = new MeshPanel;
  tabs_->addTab(mesh_, tr("Mesh"));
  export_widget_[MeshTab] = mesh_->canvas();

  sharding_ = new ShardingPanel;
  tabs_->addTab(sharding_, tr("Sharding"));
  export_widget_[ShardingTab] = sharding_->canvas();

  auto* memory_page = new QSplitter(Qt::Vertical);
  memory_ = new MemoryCanvas;
  stage_memory_ = new StageMemoryModel(this);
  memory_page->addWidget(memory_);
  memory_page->addWidget(make_table(stage_memory_));
  memory_page->setStretchFactor(0, 3);
  memory_page->setStretchFactor(1, 1);
  tabs_->addTab(memory_page, tr("Memory"));
  export_widget_[MemoryTab] = memory_;
  export_model_[MemoryTab] = stage_memory_;

  roofline_tab_ = new QWidget;
  auto* roof_layout = new QHBoxLayout(roofline_tab_);
  roofline_ = new RooflineCanvas;
  roof_layout->addWidget(roofline_, 3);
  auto* comm_chart = new QChart;
  comm_chart->setTitle(tr("Compute and communication per step, by axis"));
  communication_view_ = new QChartView(comm_chart);
  communication_view_->setRenderHint(QPainter::Antialiasing);
  roof_layout->addWidget(communication_view_, 2);
  tabs_->addTab(roofline_tab_, tr("Roofline"));
  export_widget_[RooflineTab] = roofline_tab_;

  timeline_ = new TimelinePanel;
  tabs_->addTab(timeline_, tr("Timeline"));
  export_widget_[TimelineTab] = timeline_->canvas();
  connect(timeline_, &TimelinePanel::exportRequested, this, &MainWindow::exportTrace);

  auto* compare_page = new QWidget;
  auto* compare_layout = new QVBoxLayout(compare_page);
  auto* compare_bar = new QHBoxLayout;
  auto* set_a = new QPushButton(tr("Selected plan as A (Ctrl+1)"));
  auto* set_b = new QPushButton(tr("Selected plan as B (Ctrl+2)"));
  compare_label_ = new QLabel(tr("Pick two plans."));
  compare_label_->setWordWrap(true);
  compare_bar->addWidget(set_a);
  compare_bar->addWidget(set_b);
  compare_bar->addWidget(compare_label_, 1);
  compare_layout->addLayout(compare_bar);
  compare_ = new CompareModel(this);
  auto* compare_table = make_table(compare_);
  compare_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  compare_layout->addWidget(compare_table, 1);
  tabs_->addTab(compare_page, tr("Compare"));
  export_model_[CompareTab] = compare_;
  connect(set_a, &QPushButton::clicked, this, &MainWindow::setCompareA);
  connect(set_b, &QPushButton::clicked, this, &MainWindow::setCompareB);

  launch_ = new LaunchPanel;
#ifdef MESHPLAN_CLI_BINARY
  QString program = QStringLiteral(MESHPLAN_CLI_BINARY);
#else
  QString program;
#endif
  const QString beside = QDir(QApplication::applicationDirPath()).filePath("meshplan");
  if (QFileInfo(beside).isExecutable()) program = beside;
  if (program.isEmpty() || !QFileInfo(program).isExecutable()) program = QStandardPaths::findExecutable("meshplan");
  launch_->setProgram(program);
  tabs_->addTab(launch_, tr("Launch"));
  export_widget_[LaunchTab] = launch_->lossChart()->parentWidget();
}

void MainWindow::buildMenus() {
  auto add = [this](QMenu* menu, const QString& text, const QKeySequence& keys, auto slot) {
    QAction* action = menu->addAction(text);
    action->setShortcut(keys);
    connect(action, &QAction::triggered, this, slot);
    return action;
  };
  QMenu* file = menuBar()->addMenu(tr("&File"));
  add(file, tr("Export plan as plan JSON..."), QKeySequence(Qt::CTRL | Qt::Key_S), [this] { exportPlan(); });
  add(file, tr("Export chart as PNG..."), QKeySequence(Qt::CTRL | Qt::Key_E), [this] { exportChart(false); });
  add(file, tr("Export chart as SVG..."), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E), [this] { exportChart(true); });
  add(file, tr("Export table as CSV..."), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C), [this] { exportTable(); });
  add(file, tr("Export timeline as Trace Event JSON..."), QKeySequence(Qt::CTRL | Qt::Key_T), [this] { exportTrace(); });
  file->addSeparator();
  add(file, tr("Quit"), QKeySequence::Quit, [this] { close(); });
  QMenu* plan = menuBar()->addMenu(tr("&Plan"));
  add(plan, tr("Search plans"), QKeySequence(Qt::CTRL | Qt::Key_R), [this] { runSearch(); });
  add(plan, tr("Cancel search"), QKeySequence(Qt::Key_Escape), [this] { cancelSearch(); });
  add(plan, tr("Filter candidates"), QKeySequence(Qt::CTRL | Qt::Key_F), [this] {
    tabs_->setCurrentIndex(CandidatesTab);
    filter_text_->setFocus();
    filter_text_->selectAll();
  });
  add(plan, tr("Compare: selected plan as A"), QKeySequence(Qt::CTRL | Qt::Key_1), [this] { setCompareA(); });
  add(plan, tr("Compare: selected plan as B"), QKeySequence(Qt::CTRL | Qt::Key_2), [this] { setCompareB(); });
  add(plan, tr("Launch the selected plan"), QKeySequence(Qt::CTRL | Qt::Key_L), [this] {
    tabs_->setCurrentIndex(LaunchTab);
    launch_->start();
  });
  QMenu* view = menuBar()->addMenu(tr("&View"));
  for (int i = 0; i < TabCount; ++i) {
    add(view, tabs_->tabText(i), QKeySequence(Qt::ALT | static_cast<Qt::Key>(Qt::Key_1 + i)), [this, i] { tabs_->setCurrentIndex(i); });
  }
}

// ---------------------------------------------------------------- search

void MainWindow::runSearch() {
  if (worker_->isRunning()) return;
  auto job = resolve_setup(setup_->inputs());
  if (!job.ok()) {
    const int shown = setup_->showProblems(job.problems);
    // Spelled out: without a translation file, Qt's %n keeps a "(s)" as written.
    setStatus(shown == 1 ? tr("1 problem in the setup: see the field marked in red.")
                         : tr("%n problems in the setup: see the fields marked in red.", nullptr, shown));
    return;
  }
  setup_->showProblems(job.problems);  // warnings, if any
  search_clock_.start();
  worker_->start(job.value);
}

void MainWindow::cancelSearch() {
  if (!worker_->isRunning()) return;
  worker_->cancel();
  setStatus(tr("Cancelling the search..."));
}

void MainWindow::searchFinished(SearchOutcomePtr outcome) {
  setup_->setRunning(false);
  outcome_ = outcome;
  selected_row_ = -1;
  details_.reset();
  candidates_->setOutcome(outcome);
  for (int column = 0; column < CandidatesModel::ColumnCount; ++column) {
    table_->setColumnHidden(column, !candidates_->columnInformative(column));
  }
  table_->resizeColumnsToContents();
  const SearchStats& stats = outcome->result.stats;
  QString text = tr("%1: %2 feasible of %3 candidates (%4 meshes) in %5 s")
                     .arg(QString::fromStdString(describe_job(outcome->job)))
                     .arg(stats.feasible)
                     .arg(stats.plans)
                     .arg(stats.meshes)
                     .arg(outcome->wall_s, 0, 'f', 2);
  std::vector<std::pair<std::int64_t, Rejection>> counts;
  for (std::size_t r = 1; r < stats.rejected.size(); ++r) {
    if (stats.rejected[r] > 0) counts.push_back({stats.rejected[r], static_cast<Rejection>(r)});
  }
  std::stable_sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  const double usable = outcome->job.cluster.device.memory_bytes * (1 - outcome->job.space.memory_headroom);
  QStringList reasons;
  for (const auto& [count, rejection] : counts) {
    reasons << tr("%1 %2").arg(count).arg(QString::fromStdString(explain_rejection(rejection, outcome->job.model, usable)));
  }
  if (!reasons.isEmpty()) text += tr("; rejected: ") + reasons.join("; ");
  if (outcome->cancelled) text = tr("CANCELLED, partial: ") + text;
  summary_->setText(text);
  fillPareto();
  setStatus(outcome->cancelled ? tr("Search cancelled after %1 meshes; showing what was searched.").arg(stats.meshes)
                               : tr("Search done: %1 feasible plans of %2 in %3 s.").arg(stats.feasible).arg(stats.plans).arg(outcome->wall_s, 0, 'f', 2));
  emit candidatesShown();
  if (!outcome->result.ranked.empty()) {
    selectRow(0);
    if (!compare_a_ && outcome->result.ranked.size() > 1) {
      const Candidate& first = outcome->result.ranked[0];
      const Candidate& second = outcome->result.ranked[1];
      compare_a_ = {plan_title(first, 1), analyse_plan(*outcome, first.plan, false).figures};
      compare_b_ = {plan_title(second, 2), analyse_plan(*outcome, second.plan, false).figures};
      compare_->setPlans(tr("plan A"), compare_a_->second, tr("plan B"), compare_b_->second);
      compare_label_->setText(tr("A: %1\nB: %2").arg(compare_a_->first, compare_b_->first));
    }
  }
}

int MainWindow::paretoPointCount() const { return static_cast<int>(plotted_.size()); }

void MainWindow::fillPareto() {
  plotted_.clear();
  plotted_ranked_.clear();
  QList<QPointF> points, front;
  const auto& ranked = outcome_->result.ranked;
  std::vector<bool> on_front(ranked.size(), false);
  for (auto i : outcome_->result.pareto) on_front[i] = true;
  double max_gib = 1, max_s = 1e-3, min_s = 1e300;
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    if (i >= kMaxPlotted && !on_front[i]) continue;
    const QPointF p(ranked[i].estimate.worst_memory.total_bytes() / kGiB, ranked[i].estimate.time.step_s);
    plotted_.push_back(p);
    plotted_ranked_.push_back(static_cast<int>(i));
    points.append(p);
    max_gib = std::max(max_gib, p.x());
    max_s = std::max(max_s, p.y());
    min_s = std::min(min_s, p.y());
  }
  std::vector<QPointF> front_points;
  for (auto i : outcome_->result.pareto) {
    front_points.emplace_back(ranked[i].estimate.worst_memory.total_bytes() / kGiB, ranked[i].estimate.time.step_s);
  }
  std::sort(front_points.begin(), front_points.end(), [](const QPointF& a, const QPointF& b) { return a.x() < b.x(); });
  for (const auto& p : front_points) front.append(p);
  all_points_->replace(points);
  front_->replace(front);
  selected_point_->clear();
  const double capacity = outcome_->job.cluster.device.memory_bytes / kGiB;
  pareto_x_->setRange(0, nice_ceiling(std::max(max_gib, capacity) * 1.02));
  pareto_y_->setRange(0, nice_ceiling(max_s * 1.05));
  all_points_->setName(ranked.size() > kMaxPlotted ? tr("fastest %1 plans").arg(kMaxPlotted) : tr("feasible plans"));
  front_->setName(tr("Pareto front"));
  pareto_view_->chart()->setTitle(tr("Pareto: %1 feasible, %2 on the front")
                                      .arg(ranked.size())
                                      .arg(outcome_->result.pareto.size()));
}

void MainWindow::selectNearestParetoPoint(QPointF value) {
  if (plotted_.empty()) return;
  const QRectF area = pareto_view_->chart()->plotArea();
  const double x_scale = area.width() / std::max(1e-12, pareto_x_->max() - pareto_x_->min());
  const double y_scale = area.height() / std::max(1e-12, pareto_y_->max() - pareto_y_->min());
  const int i = nearest_point(plotted_, value, x_scale, y_scale);
  if (i >= 0) selectRow(candidates_->rowOfRanked(plotted_ranked_[static_cast<std::size_t>(i)]));
}

int MainWindow::findRanked(const QString& mesh) const {
  if (!outcome_) return -1;
  const auto wanted = parse_mesh(mesh.toStdString(), "--plan");
  if (!wanted.ok()) return -1;
  for (std::size_t i = 0; i < outcome_->result.ranked.size(); ++i) {
    const Mesh& m = outcome_->result.ranked[i].plan.mesh;
    bool same = true;
    for (Axis axis : all_axes) same = same && m.size(axis) == wanted.value.size(axis);
    if (same) return static_cast<int>(i);
  }
  return -1;
}

void MainWindow::selectRow(int source_row) {
  const Candidate* candidate = candidates_->candidate(source_row);
  if (!candidate) return;
  selected_row_ = source_row;
  // The table follows (unless the row is filtered out).
  updating_selection_ = true;
  const QModelIndex proxy = filter_->mapFromSource(candidates_->index(source_row, 0));
  if (proxy.isValid()) {
    table_->selectionModel()->setCurrentIndex(proxy, QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
    table_->scrollTo(proxy);
  } else {
    table_->selectionModel()->clearSelection();
  }
  updating_selection_ = false;
  // The chart follows.
  selected_point_->clear();
  if (candidate->rejection == Rejection::none || candidate->rejection == Rejection::out_of_memory) {
    selected_point_->append(candidate->estimate.worst_memory.total_bytes() / kGiB, candidate->estimate.time.step_s);
  }
  showDetails(*candidate);
}

void MainWindow::showDetails(const Candidate& candidate) {
  QElapsedTimer clock;
  clock.start();
  const bool timed = candidate.rejection == Rejection::none || candidate.rejection == Rejection::out_of_memory;
  details_ = analyse_plan(*outcome_, candidate.plan, timed);
  const PlanDetails& d = *details_;
  const int rank = candidate.rejection == Rejection::none ? selected_row_ + 1 : 0;
  const QString title = plan_title(candidate, rank);
  selected_label_->setText(tr("Selected: %1%2").arg(title, candidate.rejection == Rejection::none
                                                               ? tr(" (feasible)")
                                                               : tr(" (rejected: %1)").arg(QString::fromStdString(to_string(candidate.rejection)))));
  figures_->setFigures(d.figures);
  QStringList problems;
  for (const auto& p : d.explanation.problems) problems << QString::fromStdString((p.severity == Severity::error ? "error: " : "") + describe(p));
  problems_->setPlainText(problems.isEmpty() ? tr("No problems: the plan is valid and fits.") : problems.join("\n"));
  const PlanningJob& job = outcome_->job;
  mesh_->setMesh(candidate.plan.mesh, job.cluster.devices_per_node);
  sharding_->setPlan(job.model, candidate.plan);
  memory_->setMemory(candidate.plan, d.explanation.memory);
  stage_memory_->setPlan(candidate.plan, d.explanation.memory);
  if (d.explanation.time) {
    roofline_->setRoofline(plan_roofline(*outcome_->evaluator, candidate.plan),
                           QString::fromStdString(job.cluster.device.name + ", " + to_string(candidate.plan.precision)));
    updateCommunicationChart(*d.explanation.time);
  } else {
    roofline_->setRoofline({}, {});
  }
  std::shared_ptr<const sim::Simulation> simulation;
  if (d.simulation) simulation = std::make_shared<const sim::Simulation>(*d.simulation);
  timeline_->setSimulation(simulation, QString::fromStdString(d.simulation_problem));
  if (d.explanation.memory && work_dir_.isValid()) {
    const QString path = work_dir_.filePath("plan.json");
    QString error;
    if (!writePlanFile(candidate.plan, path, &error).isEmpty()) {
      launch_->setPlan(path, title, d.explanation.time ? d.explanation.time->step_s : 0, candidate.plan.mesh.world_size());
    }
  }
  setStatus(tr("Selected %1 (explained and simulated in %2 ms).").arg(title).arg(clock.elapsed()));
  emit planShown();
}

void MainWindow::updateCommunicationChart(const TimeEstimate& t) {
  auto* chart = new QChart;
  chart->setTitle(tr("Compute and communication per step, by axis"));
  QChart* previous = communication_view_->chart();
  communication_view_->setChart(chart);  // the view releases the previous chart
  delete previous;
  auto* critical = new QBarSet(tr("on the critical path"));
  auto* hidden = new QBarSet(tr("hidden under compute"));
  critical->setColor(QColor(225, 87, 89));
  hidden->setColor(QColor(118, 183, 178));
  QStringList categories;
  categories << tr("compute");
  *critical << t.compute_s;
  *hidden << 0;
  for (Axis axis : all_axes) {
    const auto a = static_cast<std::size_t>(axis);
    if (!(t.axis_communication_s[a] > 0)) continue;
    categories << tr("%1 comm").arg(QString::fromStdString(to_string(axis)));
    *critical << t.axis_exposed_s[a];
    *hidden << std::max(0.0, t.axis_communication_s[a] - t.axis_exposed_s[a]);
  }
  categories << tr("bubble") << tr("optimizer");
  *critical << t.bubble_s << t.optimizer_s;
  *hidden << 0 << 0;
  auto* series = new QHorizontalStackedBarSeries;
  series->append(critical);
  series->append(hidden);
  chart->addSeries(series);
  auto* y = new QBarCategoryAxis;
  y->append(categories);
  auto* x = new QValueAxis;
  x->setTitleText(tr("seconds per step (step %1 s)").arg(t.step_s, 0, 'f', 3));
  double top = t.compute_s;
  for (double v : t.axis_communication_s) top = std::max(top, v);
  top = std::max({top, t.bubble_s, t.optimizer_s});
  x->setRange(0, nice_ceiling(top * 1.05));
  chart->addAxis(y, Qt::AlignLeft);
  chart->addAxis(x, Qt::AlignBottom);
  series->attachAxis(y);
  series->attachAxis(x);
  chart->legend()->setAlignment(Qt::AlignBottom);
}

void MainWindow::setCompareA() {
  if (!details_ || selected_row_ < 0) return;
  const Candidate* c = candidates_->candidate(selected_row_);
  compare_a_ = {plan_title(*c, c->rejection == Rejection::none ? selected_row_ + 1 : 0), details_->figures};
  if (compare_b_) compare_->setPlans(tr("plan A"), compare_a_->second, tr("plan B"), compare_b_->second);
  compare_label_->setText(tr("A: %1\nB: %2").arg(compare_a_->first, compare_b_ ? compare_b_->first : tr("(pick one)")));
}

void MainWindow::setCompareB() {
  if (!details_ || selected_row_ < 0) return;
  const Candidate* c = candidates_->candidate(selected_row_);
  compare_b_ = {plan_title(*c, c->rejection == Rejection::none ? selected_row_ + 1 : 0), details_->figures};
  if (compare_a_) compare_->setPlans(tr("plan A"), compare_a_->second, tr("plan B"), compare_b_->second);
  compare_label_->setText(tr("A: %1\nB: %2").arg(compare_a_ ? compare_a_->first : tr("(pick one)"), compare_b_->first));
}

// ---------------------------------------------------------------- export

QString MainWindow::writePlanFile(const Plan& plan, const QString& path, QString* error) const {
  if (!details_ || !outcome_) return {};
  const PlanningJob& job = outcome_->job;
  const Problems problems = write_plan_file(path.toStdString(), job.model, job.cluster, job.world_size, plan, details_->explanation);
  if (has_errors(problems)) {
    if (error) *error = QString::fromStdString(describe(problems.front()));
    return {};
  }
  return path;
}

void MainWindow::exportPlan() {
  if (!details_) {
    setStatus(tr("Select a plan to export."));
    return;
  }
  const QString path = QFileDialog::getSaveFileName(this, tr("Export plan JSON"), "plan.json", tr("Plan JSON (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  if (writePlanFile(details_->plan, path, &error).isEmpty()) setStatus(tr("Export failed: %1").arg(error));
  else setStatus(tr("Wrote %1").arg(path));
}

void MainWindow::exportChart(bool svg) {
  QWidget* widget = export_widget_[static_cast<std::size_t>(tabs_->currentIndex())];
  if (!widget) {
    setStatus(tr("This tab has no chart; export its table as CSV (Ctrl+Shift+C)."));
    return;
  }
  const QString name = "meshplan-" + tabs_->tabText(tabs_->currentIndex()).toLower() + (svg ? ".svg" : ".png");
  const QString path = QFileDialog::getSaveFileName(this, svg ? tr("Export SVG") : tr("Export PNG"), name,
                                                    svg ? tr("SVG (*.svg)") : tr("PNG (*.png)"));
  if (path.isEmpty()) return;
  QString error;
  const bool ok = svg ? export_svg(widget, path, tabs_->tabText(tabs_->currentIndex()), &error) : export_png(widget, path, &error);
  setStatus(ok ? tr("Wrote %1").arg(path) : tr("Export failed: %1").arg(error));
}

void MainWindow::exportTable() {
  const QAbstractItemModel* model = export_model_[static_cast<std::size_t>(tabs_->currentIndex())];
  if (!model) {
    setStatus(tr("This tab has no table; export its chart as PNG or SVG."));
    return;
  }
  const QString path = QFileDialog::getSaveFileName(this, tr("Export CSV"), "meshplan-" + tabs_->tabText(tabs_->currentIndex()).toLower() + ".csv",
                                                    tr("CSV (*.csv)"));
  if (path.isEmpty()) return;
  QFile file(path);
  if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate) || file.write(model_to_csv(*model).toUtf8()) < 0) {
    setStatus(tr("Export failed: could not write %1").arg(path));
    return;
  }
  setStatus(tr("Wrote %1 (%2 rows)").arg(path).arg(model->rowCount()));
}

void MainWindow::exportTrace() {
  const QString path = QFileDialog::getSaveFileName(this, tr("Export Trace Event JSON"), "trace.json", tr("Trace Event JSON (*.json)"));
  if (path.isEmpty()) return;
  QString error;
  setStatus(timeline_->exportTrace(path, &error) ? tr("Wrote %1 (open it in ui.perfetto.dev)").arg(path) : tr("Export failed: %1").arg(error));
}

// ---------------------------------------------------------------- screenshots

void MainWindow::takeScreenshots(const QString& folder, const QString& mesh) {
  screenshot_folder_ = folder;
  screenshot_mesh_ = mesh;
  screenshot_step_ = 0;
  screenshot_ok_ = QDir().mkpath(folder);
  // First picture: the Setup with a problem shown at its field.
  SetupInputs bad = setup_->inputs();
  bad.hidden = 12300;  // not a multiple of the 96 heads
  setup_->setInputs(bad);
  runSearch();
  QTimer::singleShot(200, this, [this] { screenshotStep(); });
}

void MainWindow::screenshotStep() {
  auto save = [this](const QString& name, QWidget* widget) {
    QApplication::processEvents();
    const QString path = QDir(screenshot_folder_).filePath("studio-" + name + ".png");
    QString error;
    if (!export_png(widget, path, &error)) screenshot_ok_ = false;
    else qInfo("wrote %s", qPrintable(path));
  };
  switch (screenshot_step_++) {
    case 0: {
      save("setup-error", this);
      SetupInputs good = setup_->inputs();
      good.hidden = 0;
      setup_->setInputs(good);
      setup_->clearProblems();
      connect(this, &MainWindow::candidatesShown, this, [this] { QTimer::singleShot(100, this, [this] { screenshotStep(); }); },
              Qt::SingleShotConnection);
      runSearch();
      return;
    }
    case 1: {
      const int index = findRanked(screenshot_mesh_);
      if (index < 0) {
        qWarning("no feasible plan with mesh %s", qPrintable(screenshot_mesh_));
        screenshot_ok_ = false;
        emit screenshotsDone(false);
        return;
      }
      setCompareB();  // B: the fastest plan (selected after the search)
      selectRow(candidates_->rowOfRanked(index));
      setCompareA();  // A: the chosen plan
      tabs_->setCurrentIndex(CandidatesTab);
      save("candidates", this);
      for (int tab : {PlanTab, MeshTab}) {
        tabs_->setCurrentIndex(tab);
        save(tab == PlanTab ? "plan" : "mesh", this);
      }
      tabs_->setCurrentIndex(ShardingTab);
      sharding_->choose(3, "layer3.mlp.w_in", TensorRole::parameters);
      save("sharding", this);
      sharding_->choose(3, "layer3.mlp.w_in", TensorRole::optimizer_moment);
      save("sharding-optimizer", this);
      sharding_->choose(3, "layer3.attn.scores", TensorRole::activation);
      save("sharding-activation", this);
      sharding_->choose(3, "layer3.mlp.w_in", TensorRole::parameters);
      const std::pair<int, const char*> rest[] = {{MemoryTab, "memory"}, {RooflineTab, "roofline"}, {TimelineTab, "timeline"},
                                                  {CompareTab, "compare"}, {LaunchTab, "launch"}};
      for (const auto& [tab, name] : rest) {
        if (tab == LaunchTab) continue;  // taken below, on a plan this machine can train
        tabs_->setCurrentIndex(tab);
        save(name, this);
        if (tab == TimelineTab) {  // the pipeline's start, where the bubbles are
          TimelineCanvas* canvas = timeline_->canvas();
          canvas->axis().zoom(12, canvas->axis().x_of(0));
          canvas->update();
          save("timeline-zoom", this);
          canvas->axis().reset();
        }
      }
      // The Launch panel training a plan for real: an MLP on Fashion-MNIST, one CPU rank.
      SetupInputs small = setup_->inputs();
      small.model = "mlp-fashion";
      small.cluster = "local-cpu";
      small.devices_per_node = 1;
      small.nodes = 1;
      small.global_batch = 128;
      setup_->setInputs(small);
      connect(this, &MainWindow::candidatesShown, this, [this] { QTimer::singleShot(100, this, [this] { screenshotStep(); }); },
              Qt::SingleShotConnection);
      runSearch();
      return;
    }
    case 2: {
      tabs_->setCurrentIndex(LaunchTab);
      launch_->setData("fashion-mnist");
      launch_->setSteps(300);
      connect(launch_, &LaunchPanel::runFinished, this, [this] { QTimer::singleShot(700, this, [this] { screenshotStep(); }); },
              Qt::SingleShotConnection);
      launch_->start();
      if (!launch_->isRunning()) {
        qWarning("the launch did not start: %s", qPrintable(launch_->statusText()));
        save("launch", this);
        emit screenshotsDone(false);
      }
      return;
    }
    case 3: {
      save("launch", this);
      tabs_->setCurrentIndex(CandidatesTab);
      emit screenshotsDone(screenshot_ok_);
      return;
    }
    default: return;
  }
}

}  // namespace meshplan::studio
