// Palette, formatting and export of views.
#include "gui/app/charts.hpp"

#include <QFile>
#include <QPainter>
#include <QPixmap>
#include <QSvgGenerator>
#include <QWidget>

#include <array>
#include <cmath>

namespace meshplan::studio {

QColor contrasting_color(std::size_t index) {
  static const std::array<const char*, 20> colors = {
      "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
      "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
  return QColor(colors[index % colors.size()]);
}

QColor text_color_on(const QColor& background) {
  const double luminance = 0.299 * background.redF() + 0.587 * background.greenF() + 0.114 * background.blueF();
  return luminance > 0.55 ? QColor(Qt::black) : QColor(Qt::white);
}

QString format_gib(double bytes) { return QString::number(bytes / (1024.0 * 1024.0 * 1024.0), 'f', 1) + " GiB"; }

QString format_seconds(double s) {
  const double a = std::fabs(s);
  if (a == 0) return QStringLiteral("0 s");
  if (a >= 1) return QString::number(s, 'f', 3) + " s";
  if (a >= 1e-3) return QString::number(s * 1e3, 'f', 1) + " ms";
  return QString::number(s * 1e6, 'f', 0) + " us";
}

bool export_png(QWidget* widget, const QString& path, QString* error) {
  const QPixmap pixmap = widget->grab();
  if (!pixmap.save(path, "PNG")) {
    if (error) *error = QObject::tr("could not write %1").arg(path);
    return false;
  }
  return true;
}

bool export_svg(QWidget* widget, const QString& path, const QString& title, QString* error) {
  QSvgGenerator generator;
  generator.setFileName(path);
  generator.setSize(widget->size());
  generator.setViewBox(QRect(QPoint(0, 0), widget->size()));
  generator.setTitle(title);
  generator.setDescription(QObject::tr("meshplan-studio"));
  QPainter painter;
  if (!painter.begin(&generator)) {
    if (error) *error = QObject::tr("could not write %1").arg(path);
    return false;
  }
  widget->render(&painter);
  painter.end();
  if (!QFile::exists(path)) {
    if (error) *error = QObject::tr("could not write %1").arg(path);
    return false;
  }
  return true;
}

}  // namespace meshplan::studio
