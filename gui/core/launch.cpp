// Launch arguments, metrics lines and CSV export.
#include "gui/core/launch.hpp"

#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>

#include <cmath>

namespace meshplan::studio {

QStringList launch_arguments(const LaunchRequest& r) {
  QStringList args{r.has_launch ? QStringLiteral("launch") : QStringLiteral("train"), QStringLiteral("--plan"), r.plan_path};
  if (!r.metrics_path.isEmpty()) args << QStringLiteral("--metrics") << r.metrics_path;
  if (r.steps > 0) args << QStringLiteral("--steps") << QString::number(r.steps);
  if (!r.data.isEmpty()) args << QStringLiteral("--data") << r.data;
  if (r.shrink && r.has_launch) args << QStringLiteral("--shrink");
  return args;
}

std::optional<MetricsPoint> parse_metrics_line(const QByteArray& line) {
  QJsonParseError error{};
  const QJsonDocument doc = QJsonDocument::fromJson(line, &error);
  if (error.error != QJsonParseError::NoError || !doc.isObject()) return std::nullopt;
  const QJsonObject o = doc.object();
  if (o.value("kind").toString() != "train" || !o.value("step").isDouble()) return std::nullopt;
  // A step is a count: a whole number the double holds exactly (casting 1e300
  // to qint64 would be undefined; fuzz/fuzz_metrics_jsonl.cpp found it).
  const double step = o.value("step").toDouble();
  if (!(step >= 0 && step <= 9007199254740992.0) || step != std::floor(step)) return std::nullopt;
  MetricsPoint p;
  p.step = static_cast<qint64>(step);
  p.loss = o.value("loss").isDouble() ? o.value("loss").toDouble() : std::nan("");
  p.step_s = o.value("step_s").toDouble();
  return p;
}

QList<QByteArray> MetricsTail::readNewLines() {
  QList<QByteArray> lines;
  QFile file(path_);
  if (!file.open(QIODevice::ReadOnly)) return lines;
  if (file.size() < offset_) reset();  // the file was rewritten
  file.seek(offset_);
  partial_ += file.readAll();
  offset_ = file.pos();
  qsizetype newline;
  while ((newline = partial_.indexOf('\n')) >= 0) {
    const QByteArray line = partial_.left(newline).trimmed();
    partial_.remove(0, newline + 1);
    if (!line.isEmpty()) lines.push_back(line);
  }
  return lines;
}

QString model_to_csv(const QAbstractItemModel& model) {
  auto cell = [](QString text) {
    if (text.contains(QLatin1Char(',')) || text.contains(QLatin1Char('"')) || text.contains(QLatin1Char('\n'))) {
      text.replace(QLatin1String("\""), QLatin1String("\"\""));
      return QStringLiteral("\"%1\"").arg(text);
    }
    return text;
  };
  QString out;
  const int columns = model.columnCount();
  for (int c = 0; c < columns; ++c) out += (c ? "," : "") + cell(model.headerData(c, Qt::Horizontal).toString());
  out += "\r\n";
  for (int r = 0; r < model.rowCount(); ++r) {
    for (int c = 0; c < columns; ++c) out += (c ? "," : "") + cell(model.data(model.index(r, c)).toString());
    out += "\r\n";
  }
  return out;
}

}  // namespace meshplan::studio
