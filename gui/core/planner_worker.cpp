// PlannerWorker: the search runs in a QThread; everything it reports is
// posted back to the worker's own thread, so receivers (and QSignalSpy)
// only ever see the signals on the thread they live in.
#include "gui/core/planner_worker.hpp"

#include <QElapsedTimer>
#include <QMetaObject>
#include <QPointer>
#include <QThread>

#include <exception>

namespace meshplan::studio {

PlannerWorker::PlannerWorker(QObject* parent) : QObject(parent) {
  qRegisterMetaType<SearchOutcomePtr>("meshplan::studio::SearchOutcomePtr");
}

PlannerWorker::~PlannerWorker() {
  if (thread_) {
    if (cancel_) cancel_->store(true);
    thread_->wait();
    delete thread_;
  }
}

void PlannerWorker::cancel() {
  if (running_ && cancel_) cancel_->store(true);
}

bool PlannerWorker::start(const PlanningJob& job) {
  if (running_) return false;
  if (thread_) {  // the previous search's thread has finished (running_ is false)
    thread_->wait();
    delete thread_;
    thread_ = nullptr;
  }
  running_ = true;
  cancel_ = std::make_shared<std::atomic<bool>>(false);
  emit started(QString::fromStdString(describe_job(job)));

  QPointer<PlannerWorker> self(this);
  auto cancel = cancel_;
  thread_ = QThread::create([self, cancel, job]() {
    QElapsedTimer clock;
    clock.start();
    auto post = [self](auto function) {
      if (self) QMetaObject::invokeMethod(self.data(), function, Qt::QueuedConnection);
    };
    try {
      auto outcome = std::make_shared<SearchOutcome>();
      outcome->job = job;
      outcome->evaluator = std::make_shared<const Evaluator>(job.model, job.cluster, job.world_size, job.seq_len);
      SearchOptions options;
      options.threads = job.threads;
      options.cancel = cancel.get();
      qint64 last_post_ms = -1000;
      options.on_progress = [&](std::int64_t plans, std::int64_t done, std::int64_t total) {
        const qint64 now = clock.elapsed();
        if (now - last_post_ms < 50 && done < total) return;
        last_post_ms = now;
        post([self, plans, done, total]() {
          if (self) emit self->progress(plans, done, total);
        });
      };
      std::vector<Candidate>& rejected = outcome->rejected;
      options.on_candidate = [&rejected](const Candidate& c) {
        if (c.rejection != Rejection::none) rejected.push_back(c);
      };
      outcome->result = search(*outcome->evaluator, job.global_batch, job.space, options);
      outcome->cancelled = cancel->load();
      outcome->wall_s = static_cast<double>(clock.nsecsElapsed()) * 1e-9;
      SearchOutcomePtr done = outcome;
      post([self, done]() {
        if (!self) return;
        self->running_ = false;
        emit self->finished(done);
      });
    } catch (const std::exception& e) {
      const QString message = QString::fromUtf8(e.what());
      post([self, message]() {
        if (!self) return;
        self->running_ = false;
        emit self->failed(message);
      });
    }
  });
  thread_->start();
  return true;
}

}  // namespace meshplan::studio
