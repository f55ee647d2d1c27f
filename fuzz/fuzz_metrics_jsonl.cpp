// Fuzz target: a metrics file (JSON Lines, executor/metrics/metrics.hpp) as
// the studio's Launch panel tails it while a run writes: the input is the
// file, read by MetricsTail, every line through parse_metrics_line. Lines
// that are not a training record are skipped by design (the panel plots
// what it can: an eval record, a half-written line), so there is no message
// to check; what is checked is that nothing crashes or hits undefined
// behaviour, and that an accepted point has a step the chart can place.
#include <unistd.h>

#include <QByteArray>
#include <QFile>
#include <QString>

#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "fuzz/fuzz_common.hpp"
#include "gui/core/launch.hpp"

namespace {

QString metrics_path;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path root = fs::is_directory("/dev/shm", error) ? fs::path("/dev/shm") : fs::temp_directory_path();
  metrics_path = QString::fromStdString((root / ("meshplan-fuzz-metrics-" + std::to_string(::getpid()) + ".jsonl")).string());
  std::atexit([] { QFile::remove(metrics_path); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace meshplan;
  {
    QFile file(metrics_path);
    if (!file.open(QIODevice::WriteOnly | QIODevice::Truncate)) return 0;
    file.write(reinterpret_cast<const char*>(data), static_cast<qint64>(size));
  }
  studio::MetricsTail tail(metrics_path);
  for (const QByteArray& line : tail.readNewLines()) {
    if (const auto point = studio::parse_metrics_line(line)) {
      fuzz::require(point->step >= 0, "a plotted step is >= 0");
    }
  }
  return 0;
}
