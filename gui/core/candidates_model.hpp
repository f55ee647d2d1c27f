// The candidates of a search as an item model: every feasible plan (ranked,
// fastest first) followed by every turned-down one with the reason, one row
// each; and the proxy the table shows, sorting on numbers (not on the
// displayed text) and filtering to feasible plans only or to everything,
// plus a free-text filter on the plan's description.
//
// Rows of the source model: 0 .. feasible-1 are result.ranked in order,
// the rest are SearchOutcome::rejected. The attention and stage-layers
// columns are there for every outcome; columnInformative() says when a view
// should show them. Qt::UserRole (SortRole) gives the
// number a column sorts by; FeasibleRole, RankedIndexRole and RowRole let
// views find the candidate behind a proxy row.
//
// Defines: CandidatesModel, CandidatesFilter, candidate_text.
#pragma once

#include <QAbstractTableModel>
#include <QSortFilterProxyModel>

#include "gui/core/planner_worker.hpp"

namespace meshplan::studio {

// "dp=16,pp=8,tp=8 mb 1x96 zero 1 selective fused sp 1f1b bf16"
std::string candidate_text(const Candidate& candidate);

class CandidatesModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Rank, Mesh, MicroBatch, Zero, Recompute, Attention, SequenceParallel, Schedule, StageLayers, Precision,
                MemoryGiB, StepS, Mfu, Throughput, ExposedCommS, BubbleS, Status, ColumnCount };
  enum Role { SortRole = Qt::UserRole, FeasibleRole, RankedIndexRole, RowRole };

  explicit CandidatesModel(QObject* parent = nullptr);

  void setOutcome(SearchOutcomePtr outcome);
  const SearchOutcome* outcome() const { return outcome_.get(); }
  SearchOutcomePtr outcomePtr() const { return outcome_; }
  const Candidate* candidate(int row) const;
  int feasibleCount() const;
  // Row of result.ranked[index] (the identity: feasible rows come first).
  int rowOfRanked(int index) const { return index; }
  // Whether a column says anything for this outcome: Attention only when the
  // search tried both, StageLayers only when a candidate splits the layers
  // unevenly (plan's `stage_layers`); the table hides the others.
  bool columnInformative(int column) const;

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  SearchOutcomePtr outcome_;
};

class CandidatesFilter : public QSortFilterProxyModel {
  Q_OBJECT
 public:
  explicit CandidatesFilter(QObject* parent = nullptr);
  void setShowRejected(bool show);
  bool showRejected() const { return show_rejected_; }
  void setText(const QString& text);  // case-insensitive substring of the plan's description or status

 protected:
  bool filterAcceptsRow(int source_row, const QModelIndex& source_parent) const override;

 private:
  bool show_rejected_ = false;
  QString text_;
};

}  // namespace meshplan::studio
