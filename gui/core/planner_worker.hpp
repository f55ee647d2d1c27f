// The plan search, off the UI thread. One PlannerWorker runs one search at a
// time on its own QThread (model/search.hpp's search(), which itself fans out
// over threads) and reports back on the thread that owns the worker:
// started, progress (throttled to ~20 per second), finished with the whole
// outcome (also after a cancel: what was searched until then), or failed
// with a message. Cancelling sets the search's atomic flag; the search stops
// at the next mesh.
//
// Defines: SearchOutcome, PlannerWorker.
#pragma once

#include <QObject>
#include <QString>

#include <atomic>
#include <memory>
#include <vector>

#include "gui/core/setup.hpp"
#include "model/evaluate.hpp"
#include "model/search.hpp"

class QThread;

namespace meshplan::studio {

struct SearchOutcome {
  PlanningJob job;
  std::shared_ptr<const Evaluator> evaluator;  // for the plan views (explain, simulate)
  SearchResult result;                         // feasible plans ranked, the Pareto front, counts
  std::vector<Candidate> rejected;             // every turned-down candidate, in enumeration order
  bool cancelled = false;
  double wall_s = 0;                           // building the evaluator and searching
};

using SearchOutcomePtr = std::shared_ptr<const SearchOutcome>;

class PlannerWorker : public QObject {
  Q_OBJECT
 public:
  explicit PlannerWorker(QObject* parent = nullptr);
  ~PlannerWorker() override;  // cancels a running search and waits for it

  // Starts a search; false (and nothing happens) while one is running.
  bool start(const PlanningJob& job);
  void cancel();
  bool isRunning() const { return running_; }

 signals:
  void started(const QString& description);
  void progress(qint64 plans, qint64 meshesDone, qint64 meshesTotal);
  void finished(meshplan::studio::SearchOutcomePtr outcome);
  void failed(const QString& message);

 private:
  QThread* thread_ = nullptr;
  std::shared_ptr<std::atomic<bool>> cancel_;
  bool running_ = false;
};

}  // namespace meshplan::studio

Q_DECLARE_METATYPE(meshplan::studio::SearchOutcomePtr)
