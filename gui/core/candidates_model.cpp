// CandidatesModel and CandidatesFilter. Figures are formatted as the CLI's
// table prints them (cli/plan_command.cpp): GiB of the worst device, step
// seconds, MFU in percent; the sort role carries the unrounded number.
#include "gui/core/candidates_model.hpp"

#include <algorithm>
#include <cmath>

#include "model/stage_partition.hpp"

namespace meshplan::studio {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

QString number(double value, int decimals) { return QString::number(value, 'f', decimals); }

bool timed(const Candidate& c) { return c.rejection == Rejection::none || c.rejection == Rejection::out_of_memory; }

}  // namespace

std::string candidate_text(const Candidate& c) {
  return c.plan.mesh.to_string() + " mb " + std::to_string(c.plan.micro_batch) + "x" + std::to_string(c.plan.micro_batches()) +
         " zero " + std::to_string(c.plan.zero_stage) + " " + to_string(c.plan.recompute) + " " + to_string(c.plan.attention) +
         (c.plan.sequence_parallel ? " sp" : "") + (expert_split(c.plan).tokens > 1 ? " experts-out-of-tp" : "") + " " +
         to_string(c.plan.schedule) + " " + to_string(c.plan.precision);
}

CandidatesModel::CandidatesModel(QObject* parent) : QAbstractTableModel(parent) {}

void CandidatesModel::setOutcome(SearchOutcomePtr outcome) {
  beginResetModel();
  outcome_ = std::move(outcome);
  endResetModel();
}

int CandidatesModel::feasibleCount() const { return outcome_ ? static_cast<int>(outcome_->result.ranked.size()) : 0; }

const Candidate* CandidatesModel::candidate(int row) const {
  if (!outcome_ || row < 0) return nullptr;
  const auto r = static_cast<std::size_t>(row);
  if (r < outcome_->result.ranked.size()) return &outcome_->result.ranked[r];
  const std::size_t j = r - outcome_->result.ranked.size();
  return j < outcome_->rejected.size() ? &outcome_->rejected[j] : nullptr;
}

bool CandidatesModel::columnInformative(int column) const {
  if (!outcome_) return column != Attention && column != StageLayers;
  if (column == Attention) return outcome_->job.space.attentions.size() > 1;
  if (column == StageLayers) {
    const auto uneven = [](const Candidate& c) { return !c.plan.stage_layers.empty(); };
    return std::any_of(outcome_->result.ranked.begin(), outcome_->result.ranked.end(), uneven) ||
           std::any_of(outcome_->rejected.begin(), outcome_->rejected.end(), uneven);
  }
  return true;
}

int CandidatesModel::rowCount(const QModelIndex& parent) const {
  if (parent.isValid() || !outcome_) return 0;
  return static_cast<int>(outcome_->result.ranked.size() + outcome_->rejected.size());
}

int CandidatesModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant CandidatesModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal) return {};
  if (role == Qt::ToolTipRole) {
    switch (section) {
      case MicroBatch: return tr("micro-batch size x micro-batches per step (gradient accumulation)");
      case MemoryGiB: return tr("memory per device of the worst pipeline stage, GiB");
      case ExposedCommS: return tr("communication on the critical path, seconds per step");
      case Attention: return tr("fused (FlashAttention / cuDNN / SDPA) or unfused (s x s scores stored)");
      case StageLayers: return tr("layers per pipeline chunk when the split is uneven; empty: even");
      case Status: return tr("feasible, or the first rule the plan broke");
      default: return {};
    }
  }
  if (role != Qt::DisplayRole) return {};
  const bool tokens = outcome_ && outcome_->job.model.kind == ModelKind::transformer;
  switch (section) {
    case Rank: return tr("rank");
    case Mesh: return tr("mesh");
    case MicroBatch: return tr("micro-batch");
    case Zero: return tr("zero");
    case Recompute: return tr("recompute");
    case Attention: return tr("attention");
    case SequenceParallel: return tr("sp");
    case Schedule: return tr("schedule");
    case StageLayers: return tr("stage layers");
    case Precision: return tr("precision");
    case MemoryGiB: return tr("GiB/device");
    case StepS: return tr("step s");
    case Mfu: return tr("MFU %");
    case Throughput: return tokens ? tr("tokens/s") : tr("samples/s");
    case ExposedCommS: return tr("exposed comm s");
    case BubbleS: return tr("bubble s");
    case Status: return tr("status");
    default: return {};
  }
}

QVariant CandidatesModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const Candidate& c = *candidate(index.row());
  const bool feasible = c.rejection == Rejection::none;
  const TimeEstimate& t = c.estimate.time;
  if (role == FeasibleRole) return feasible;
  if (role == RankedIndexRole) return feasible ? index.row() : -1;
  if (role == RowRole) return index.row();
  if (role == Qt::TextAlignmentRole) {
    const int col = index.column();
    const bool text = col == Mesh || col == Recompute || col == Attention || col == SequenceParallel || col == Schedule ||
                      col == StageLayers || col == Precision || col == Status;
    return QVariant::fromValue(text ? (Qt::AlignLeft | Qt::AlignVCenter) : (Qt::AlignRight | Qt::AlignVCenter));
  }
  if (role == Qt::ToolTipRole && index.column() == Status && !feasible && outcome_) {
    return QString::fromStdString(explain_rejection(c.rejection, outcome_->job.model, c.estimate.usable_bytes > 0
                                                                                        ? c.estimate.usable_bytes
                                                                                        : outcome_->job.cluster.device.memory_bytes * (1 - outcome_->job.space.memory_headroom)));
  }
  const bool sort = role == SortRole;
  if (role != Qt::DisplayRole && !sort) return {};
  switch (index.column()) {
    case Rank:
      if (sort) return feasible ? index.row() + 1 : 1e12 + index.row();
      return feasible ? QVariant(index.row() + 1) : QVariant(QString());
    case Mesh: return QString::fromStdString(c.plan.mesh.to_string());
    case MicroBatch:
      if (sort) return static_cast<double>(c.plan.micro_batch) * 1e6 + static_cast<double>(c.plan.micro_batches());
      return QStringLiteral("%1 x %2").arg(c.plan.micro_batch).arg(c.plan.micro_batches());
    case Zero: return c.plan.zero_stage;
    case Recompute: return QString::fromStdString(to_string(c.plan.recompute));
    case Attention: return QString::fromStdString(to_string(c.plan.attention));
    case SequenceParallel: return c.plan.sequence_parallel ? tr("on") : tr("off");
    case Schedule: return QString::fromStdString(to_string(c.plan.schedule));
    case StageLayers: return QString::fromStdString(c.plan.stage_layers.empty() ? "" : stage_layers_text(c.plan.stage_layers));
    case Precision: return QString::fromStdString(to_string(c.plan.precision));
    case MemoryGiB: {
      if (!timed(c)) return sort ? QVariant(1e300) : QVariant(QString());
      const double gib = c.estimate.worst_memory.total_bytes() / kGiB;
      return sort ? QVariant(gib) : QVariant(number(gib, 1));
    }
    case StepS:
      if (!timed(c)) return sort ? QVariant(1e300) : QVariant(QString());
      return sort ? QVariant(t.step_s) : QVariant(number(t.step_s, 3));
    case Mfu:
      if (!timed(c)) return sort ? QVariant(-1.0) : QVariant(QString());
      return sort ? QVariant(t.mfu) : QVariant(number(100 * t.mfu, 1));
    case Throughput:
      if (!timed(c)) return sort ? QVariant(-1.0) : QVariant(QString());
      return sort ? QVariant(t.tokens_per_s) : QVariant(number(t.tokens_per_s, 0));
    case ExposedCommS:
      if (!timed(c)) return sort ? QVariant(1e300) : QVariant(QString());
      return sort ? QVariant(t.communication_exposed_s) : QVariant(number(t.communication_exposed_s, 3));
    case BubbleS:
      if (!timed(c)) return sort ? QVariant(1e300) : QVariant(QString());
      return sort ? QVariant(t.bubble_s) : QVariant(number(t.bubble_s, 3));
    case Status: return feasible ? tr("feasible") : QString::fromStdString(to_string(c.rejection));
    default: return {};
  }
}

CandidatesFilter::CandidatesFilter(QObject* parent) : QSortFilterProxyModel(parent) {
  setSortRole(CandidatesModel::SortRole);
}

void CandidatesFilter::setShowRejected(bool show) {
  if (show == show_rejected_) return;
  show_rejected_ = show;
  invalidateRowsFilter();
}

void CandidatesFilter::setText(const QString& text) {
  if (text == text_) return;
  text_ = text;
  invalidateRowsFilter();
}

bool CandidatesFilter::filterAcceptsRow(int source_row, const QModelIndex& /*source_parent*/) const {
  const auto* model = qobject_cast<const CandidatesModel*>(sourceModel());
  if (!model) return true;
  const Candidate* c = model->candidate(source_row);
  if (!c) return false;
  if (!show_rejected_ && c->rejection != Rejection::none) return false;
  if (text_.isEmpty()) return true;
  const QString description = QString::fromStdString(candidate_text(*c) + " " + to_string(c->rejection));
  return description.contains(text_, Qt::CaseInsensitive);
}

}  // namespace meshplan::studio
