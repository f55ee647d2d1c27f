// meshplan-studio: the desktop studio. Besides the interactive window:
//   --screenshots DIR [--plan MESH]  search GPT-3 175B on 1024 A100s (the
//                                    Setup's defaults), select the plan with
//                                    mesh MESH and save each view as
//                                    DIR/studio-*.png (docs/studio.md's tour)
//   --time-startup                   print the milliseconds from main() to the
//                                    candidates table being filled, then quit
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QTimer>

#include <cstdio>

#include "gui/app/main_window.hpp"

int main(int argc, char** argv) {
  QElapsedTimer since_main;
  since_main.start();
  QApplication app(argc, argv);
  QApplication::setOrganizationName("meshplan");
  QApplication::setApplicationName("meshplan-studio");

  QCommandLineParser parser;
  parser.setApplicationDescription("meshplan studio: explore parallel training plans, see their sharding, launch them");
  parser.addHelpOption();
  const QCommandLineOption screenshots("screenshots", "Save a PNG of each view to <folder> and quit.", "folder");
  const QCommandLineOption plan("plan", "Mesh of the plan the screenshots show.", "mesh", "dp=16,pp=8,tp=8");
  const QCommandLineOption time_startup("time-startup", "Print the ms from main() to the candidates being shown, then quit.");
  const QCommandLineOption run("run", "Run the search as soon as the window opens.");
  const QCommandLineOption no_settings("no-settings", "Neither restore nor save window state and inputs.");
  parser.addOptions({screenshots, plan, time_startup, run, no_settings});
  parser.process(app);

  const bool scripted = parser.isSet(screenshots) || parser.isSet(time_startup);
  meshplan::studio::MainWindow window(!scripted && !parser.isSet(no_settings));
  if (parser.isSet(screenshots)) {
    window.resize(1600, 1000);
    window.show();
    QObject::connect(&window, &meshplan::studio::MainWindow::screenshotsDone, &app, [](bool ok) { QApplication::exit(ok ? 0 : 1); });
    window.takeScreenshots(parser.value(screenshots), parser.value(plan));
    return QApplication::exec();
  }
  if (parser.isSet(time_startup)) {
    qint64 shown_ms = -1;
    QObject::connect(&window, &meshplan::studio::MainWindow::candidatesShown, &app, [&] {
      shown_ms = since_main.elapsed();
      QTimer::singleShot(0, &app, [&] {
        std::printf("startup to candidates shown: %lld ms (%d rows); with the first plan explained, simulated and painted: %lld ms\n",
                    static_cast<long long>(shown_ms), window.candidatesModel()->rowCount(), static_cast<long long>(since_main.elapsed()));
        QApplication::quit();
      });
    });
  }
  window.show();
  if (parser.isSet(time_startup) || parser.isSet(run)) QTimer::singleShot(0, &window, &meshplan::studio::MainWindow::runSearch);
  return QApplication::exec();
}
