// FiguresModel, StageMemoryModel, CompareModel.
#include "gui/core/plan_models.hpp"

#include <QBrush>
#include <algorithm>
#include <QColor>

#include <cmath>
#include <iterator>

namespace meshplan::studio {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

QString figure_text(const Figure& f) {
  QString text = QString::fromStdString(f.text);
  if (!f.unit.empty() && f.unit != "/s") text += " " + QString::fromStdString(f.unit);
  return text;
}

QString ranks_text(const std::vector<std::int64_t>& ranks) {
  if (ranks.empty()) return {};
  bool consecutive = true;
  for (std::size_t i = 1; i < ranks.size(); ++i) consecutive = consecutive && ranks[i] == ranks[i - 1] + 1;
  if (ranks.size() == 1) return QString::number(ranks.front());
  if (consecutive) return QStringLiteral("%1-%2").arg(ranks.front()).arg(ranks.back());
  const std::int64_t stride = ranks[1] - ranks[0];
  bool strided = true;
  for (std::size_t i = 1; i < ranks.size(); ++i) strided = strided && ranks[i] - ranks[i - 1] == stride;
  if (strided) return QStringLiteral("%1, %2, ..., %3").arg(ranks[0]).arg(ranks[1]).arg(ranks.back());
  return QStringLiteral("%1, %2, ... (%3 ranks)").arg(ranks[0]).arg(ranks[1]).arg(ranks.size());
}

}  // namespace

std::vector<std::int64_t> stage_ranks(const Mesh& mesh, std::int64_t stage) {
  std::vector<std::int64_t> out;
  for (std::int64_t r = 0; r < mesh.world_size(); ++r) {
    if (mesh.coordinate(r, Axis::pp) == stage) out.push_back(r);
  }
  return out;
}

// ---- FiguresModel

FiguresModel::FiguresModel(QObject* parent) : QAbstractTableModel(parent) {}

void FiguresModel::setFigures(std::vector<Figure> figures) {
  beginResetModel();
  figures_ = std::move(figures);
  endResetModel();
}

int FiguresModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(figures_.size()); }
int FiguresModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : 2; }

QVariant FiguresModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= 2) return {};
  const Figure& f = figures_[static_cast<std::size_t>(index.row())];
  if (role == Qt::DisplayRole) return index.column() == 0 ? QString::fromStdString(f.name) : figure_text(f);
  if (role == Qt::UserRole) return f.numeric ? QVariant(f.value) : QVariant(QString::fromStdString(f.text));
  if (role == Qt::TextAlignmentRole && index.column() == 1) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  return {};
}

QVariant FiguresModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  return section == 0 ? tr("figure") : tr("value");
}

// ---- StageMemoryModel

StageMemoryModel::StageMemoryModel(QObject* parent) : QAbstractTableModel(parent) {}

void StageMemoryModel::setPlan(const Plan& plan, const std::optional<MemoryEstimate>& memory) {
  beginResetModel();
  plan_ = plan;
  memory_ = memory;
  endResetModel();
}

int StageMemoryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() || !memory_ ? 0 : static_cast<int>(memory_->stages.size());
}
int StageMemoryModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QVariant StageMemoryModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {"stage", "devices (ranks)", "layers", "parameters GiB", "gradients GiB", "optimizer GiB",
                                "activations GiB", "buffers GiB", "loss transient GiB", "activation gradients GiB",
                                "workspaces GiB", "runtime context GiB", "allocator reserve GiB", "allocated peak GiB",
                                "total GiB", "usable GiB"};
  static_assert(std::size(names) == ColumnCount);
  return section >= 0 && section < ColumnCount ? tr(names[section]) : QVariant();
}

QVariant StageMemoryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const StageMemory& s = memory_->stages[static_cast<std::size_t>(index.row())];
  const MemoryBreakdown& m = s.memory;
  if (role == Qt::BackgroundRole && index.column() == Total && m.total_bytes() > memory_->usable_bytes) {
    return QBrush(QColor(255, 205, 205));
  }
  const bool loss_peak = m.loss_transient_at_peak();
  if (role == Qt::ForegroundRole && ((index.column() == LossTransient && !loss_peak) ||
                                     (index.column() == ActivationGradients && loss_peak))) {
    return QBrush(QColor(150, 150, 150));  // not at the peak: not in the total
  }
  if (role == Qt::ToolTipRole && (index.column() == LossTransient || index.column() == ActivationGradients)) {
    const bool counted = (index.column() == LossTransient) == loss_peak;
    return counted ? tr("at the step's peak: in the total") : tr("not at the peak (the other transient is larger): not in the total");
  }
  if (role == Qt::TextAlignmentRole) {
    return QVariant::fromValue(index.column() == Devices ? (Qt::AlignLeft | Qt::AlignVCenter) : (Qt::AlignRight | Qt::AlignVCenter));
  }
  const bool sort = role == Qt::UserRole;
  if (role != Qt::DisplayRole && !sort) return {};
  auto gib = [&](double bytes) { return sort ? QVariant(bytes) : QVariant(QString::number(bytes / kGiB, 'f', 2)); };
  switch (index.column()) {
    case Stage: return static_cast<qlonglong>(s.stage);
    case Devices: {
      const auto ranks = stage_ranks(plan_.mesh, s.stage);
      return sort ? QVariant(static_cast<qlonglong>(ranks.size())) : QVariant(QStringLiteral("%1 (%2)").arg(ranks.size()).arg(ranks_text(ranks)));
    }
    case Layers: return static_cast<qlonglong>(s.layers);
    case Parameters: return gib(m.parameters_bytes);
    case Gradients: return gib(m.gradients_bytes);
    case Optimizer: return gib(m.optimizer_bytes);
    case Activations: return gib(m.activations_bytes);
    case Buffers: return gib(m.buffers_bytes);
    case LossTransient: return gib(m.loss_transient_bytes);
    case ActivationGradients: return gib(m.activation_gradient_bytes);
    case Workspaces: return gib(m.workspace_bytes);
    case RuntimeContext: return gib(m.runtime_context_bytes);
    case AllocatorReserve: return gib(m.allocator_reserve_bytes);
    case AllocatedPeak: return gib(m.allocated_peak_bytes());
    case Total: return gib(m.total_bytes());
    case Usable: return gib(memory_->usable_bytes);
    default: return {};
  }
}

// ---- CompareModel

CompareModel::CompareModel(QObject* parent) : QAbstractTableModel(parent) {}

void CompareModel::setPlans(const QString& name_a, std::vector<Figure> a, const QString& name_b, std::vector<Figure> b) {
  beginResetModel();
  rows_.clear();
  name_a_ = name_a;
  name_b_ = name_b;
  for (auto& f : a) rows_.push_back({f.name, f, std::nullopt});
  for (auto& f : b) {
    auto it = std::find_if(rows_.begin(), rows_.end(), [&](const Row& r) { return r.name == f.name; });
    if (it != rows_.end()) it->b = f;
    else rows_.push_back({f.name, std::nullopt, f});
  }
  endResetModel();
}

int CompareModel::rowCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : static_cast<int>(rows_.size()); }
int CompareModel::columnCount(const QModelIndex& parent) const { return parent.isValid() ? 0 : ColumnCount; }

QString CompareModel::difference(const Figure* a, const Figure* b) {
  if (!a || !b) return tr("only in one plan");
  if (!a->numeric || !b->numeric) return a->text == b->text ? tr("same") : tr("differs");
  const double d = b->value - a->value;
  if (d == 0) return tr("same");
  const int decimals = [&] {
    const auto dot = b->text.find('.');
    return dot == std::string::npos ? 0 : static_cast<int>(b->text.size() - dot - 1);
  }();
  QString text = (d > 0 ? QStringLiteral("+") : QString()) + QString::number(d, 'f', decimals);
  if (!b->unit.empty() && b->unit != "/s") text += " " + QString::fromStdString(b->unit);
  if (a->value != 0) text += QStringLiteral(" (%1%2%)").arg(d > 0 ? "+" : "").arg(100 * d / std::fabs(a->value), 0, 'f', 1);
  return text;
}

QVariant CompareModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rowCount() || index.column() >= ColumnCount) return {};
  const Row& row = rows_[static_cast<std::size_t>(index.row())];
  const Figure* a = row.a ? &*row.a : nullptr;
  const Figure* b = row.b ? &*row.b : nullptr;
  const bool differs = !a || !b || (a->numeric ? a->value != b->value : a->text != b->text);
  if (role == Qt::FontRole) return {};
  if (role == Qt::BackgroundRole && differs && index.column() == Difference) return QBrush(QColor(255, 243, 205));
  if (role == Qt::TextAlignmentRole && index.column() != Name) return QVariant::fromValue(Qt::AlignRight | Qt::AlignVCenter);
  if (role != Qt::DisplayRole) return {};
  switch (index.column()) {
    case Name: return QString::fromStdString(row.name);
    case PlanA: return a ? figure_text(*a) : QString();
    case PlanB: return b ? figure_text(*b) : QString();
    case Difference: return difference(a, b);
    default: return {};
  }
}

QVariant CompareModel::headerData(int section, Qt::Orientation orientation, int role) const {
  if (orientation != Qt::Horizontal || role != Qt::DisplayRole) return {};
  switch (section) {
    case Name: return tr("figure");
    case PlanA: return name_a_.isEmpty() ? tr("plan A") : name_a_;
    case PlanB: return name_b_.isEmpty() ? tr("plan B") : name_b_;
    case Difference: return tr("B - A");
    default: return {};
  }
}

}  // namespace meshplan::studio
