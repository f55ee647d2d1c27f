// Helpers shared by the studio's views: a palette of contrasting colours,
// byte and second formatting, and the export of any view (a QChartView or a
// custom-painted widget) as PNG or SVG.
//
// Defines: contrasting_color, text_color_on, format_gib, format_seconds,
// export_png, export_svg.
#pragma once

#include <QColor>
#include <QString>

class QWidget;

namespace meshplan::studio {

// The i-th of 20 contrasting colours (Tableau 20 order: strong, then light).
QColor contrasting_color(std::size_t index);
// Black or white, whichever reads better on `background`.
QColor text_color_on(const QColor& background);
QString format_gib(double bytes);      // "12.3 GiB"
QString format_seconds(double seconds);  // "12.3 ms", "1.234 s", "45 us"

// Renders the widget as it is shown; false (with `error`) when the file cannot be written.
bool export_png(QWidget* widget, const QString& path, QString* error);
bool export_svg(QWidget* widget, const QString& path, const QString& title, QString* error);

}  // namespace meshplan::studio
