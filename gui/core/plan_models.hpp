// Item models of one plan and of two plans side by side:
//   * FiguresModel: (figure, value) rows of plan_figures();
//   * StageMemoryModel: one row per pipeline stage (every device of a stage
//     holds the same amounts): its ranks, layers, and the memory breakdown
//     in GiB (steady parts, then the peak's transients and reserves, as
//     `meshplan explain` prints them) against the usable capacity;
//   * CompareModel: (figure, plan A, plan B, B - A) rows, the difference in
//     the figure's unit and in percent, or "same"/"differs" for words.
//
// Defines: FiguresModel, StageMemoryModel, CompareModel, stage_ranks.
#pragma once

#include <QAbstractTableModel>

#include <vector>

#include "gui/core/plan_details.hpp"

namespace meshplan::studio {

// The ranks of pipeline stage `stage` ("ranks 0-127", or a list when they are not consecutive).
std::vector<std::int64_t> stage_ranks(const Mesh& mesh, std::int64_t stage);

class FiguresModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  explicit FiguresModel(QObject* parent = nullptr);
  void setFigures(std::vector<Figure> figures);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  std::vector<Figure> figures_;
};

class StageMemoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  // The peak rows after the steady ones, as `meshplan explain` prints them;
  // the transient not at the peak (loss or activation gradients) is greyed.
  enum Column { Stage, Devices, Layers, Parameters, Gradients, Optimizer, Activations, Buffers, LossTransient,
                ActivationGradients, Workspaces, RuntimeContext, AllocatorReserve, AllocatedPeak, Total, Usable, ColumnCount };
  explicit StageMemoryModel(QObject* parent = nullptr);
  void setPlan(const Plan& plan, const std::optional<MemoryEstimate>& memory);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;

 private:
  Plan plan_;
  std::optional<MemoryEstimate> memory_;
};

class CompareModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column { Name, PlanA, PlanB, Difference, ColumnCount };
  explicit CompareModel(QObject* parent = nullptr);
  void setPlans(const QString& name_a, std::vector<Figure> a, const QString& name_b, std::vector<Figure> b);
  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role = Qt::DisplayRole) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role = Qt::DisplayRole) const override;
  // The difference cell's text for a pair of figures (tested directly).
  static QString difference(const Figure* a, const Figure* b);

 private:
  struct Row {
    std::string name;
    std::optional<Figure> a, b;
  };
  std::vector<Row> rows_;
  QString name_a_, name_b_;
};

}  // namespace meshplan::studio
