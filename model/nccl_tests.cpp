// nccl-tests tables, the alpha-beta fit and the cluster preset's text (nccl_tests.hpp).
#include "model/nccl_tests.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <sstream>

#include "model/collectives.hpp"
#include "model/text.hpp"

namespace meshplan {
namespace {

std::string number(double value) { return format("%.6g", value); }

std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    std::size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) out.emplace_back(line.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<double> read_number(const std::string& word) {
  double value = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), value);
  if (ec != std::errc() || end != word.data() + word.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

// The programs of nccl-tests and the collective each times.
struct Program {
  const char* name;
  Collective collective;
};
constexpr Program kPrograms[] = {{"all_reduce_perf", Collective::all_reduce},
                                 {"all_gather_perf", Collective::all_gather},
                                 {"reduce_scatter_perf", Collective::reduce_scatter},
                                 {"sendrecv_perf", Collective::send_recv},
                                 {"alltoall_perf", Collective::all_to_all},
                                 {"broadcast_perf", Collective::broadcast}};

}  // namespace

Loaded<NcclTestsRun> parse_nccl_tests(std::string_view text, const std::string& file, const std::string& collective_flag) {
  Loaded<NcclTestsRun> result;
  NcclTestsRun& run = result.value;
  Problems& problems = result.problems;
  run.file = file;
  if (!collective_flag.empty()) {
    for (const auto& p : kPrograms) {
      if (collective_flag == to_string(p.collective)) run.collective = p.collective;
    }
    if (!run.collective) {
      problems.push_back({Severity::error, "--collective",
                          "'" + collective_flag + "' is not one of: all_reduce, all_gather, reduce_scatter, send_recv, all_to_all, broadcast"});
    }
  }
  Lines lines(text);
  std::string_view line;
  std::set<std::string> ranks_seen;
  while (lines.next(line)) {
    const std::string where = file + ":" + std::to_string(lines.number());
    if (collective_flag.empty()) {
      for (const auto& p : kPrograms) {
        if (line.find(p.name) == std::string_view::npos) continue;
        if (run.collective && *run.collective != p.collective) {  // two runs pasted together: one link each
          problems.push_back({Severity::error, where,
                              std::string("names ") + p.name + " after " + to_string(*run.collective) +
                                  "'s program: give one nccl-tests program's output per file"});
        }
        run.collective = p.collective;
      }
    }
    const std::vector<std::string> w = words(line);
    if (w.empty()) continue;
    if (w[0][0] == '#') {
      // "#  Rank  0 Group  0 Pid   6899 on HOST device  0 [0000:04:00] NVIDIA H100 80GB HBM3"
      const std::size_t first = w[0] == "#" ? 1 : 0;
      if (w.size() > first + 1 && (w[first] == "Rank" || w[first] == "#Rank")) {
        // Each rank once: a file holding the same run twice lists its ranks twice.
        if (!ranks_seen.insert(w[first + 1]).second) {
          problems.push_back({Severity::error, where,
                              "rank " + w[first + 1] + " is listed twice: give one nccl-tests run per file"});
          continue;
        }
        ++run.ranks;
        for (std::size_t i = first; i + 1 < w.size(); ++i) {
          if (w[i] == "on") {
            run.hosts.insert(w[i + 1]);
            break;
          }
        }
        if (run.device.empty()) {
          const std::size_t bracket = line.find(']');
          if (bracket != std::string_view::npos) run.device = trim(line.substr(bracket + 1));
        }
      }
      continue;
    }
    if (line.find("NCCL INFO") != std::string_view::npos || line.find("NCCL WARN") != std::string_view::npos) continue;
    // size count type redop [root] time algbw busbw #wrong time algbw busbw #wrong
    if (w.size() != 12 && w.size() != 13) {
      problems.push_back({Severity::error, where,
                          "not an nccl-tests result row: expected 13 columns (size count type redop root, then time "
                          "algbw busbw #wrong out-of-place and in-place), or 12 without root; got " +
                              std::to_string(w.size())});
      continue;
    }
    const std::size_t t = w.size() == 13 ? 5 : 4;
    const auto size = read_number(w[0]);
    const auto out_time = read_number(w[t]), algbw = read_number(w[t + 1]), busbw = read_number(w[t + 2]);
    const auto in_time = read_number(w[t + 4]);
    const char* bad = !size || *size < 0 || *size != std::floor(*size) ? "size (B)"
                      : !out_time || *out_time < 0                     ? "out-of-place time (us)"
                      : !algbw || *algbw < 0                           ? "out-of-place algbw (GB/s)"
                      : !busbw || *busbw < 0                           ? "out-of-place busbw (GB/s)"
                      : !in_time || *in_time < 0                       ? "in-place time (us)"
                                                                       : nullptr;
    if (bad) {
      problems.push_back({Severity::error, where, std::string("column ") + bad + " is not a non-negative number"});
      continue;
    }
    // #wrong: elements that came out wrong (N/A when nccl-tests ran without checking, -c 0).
    const auto wrong_out = read_number(w[t + 3]), wrong_in = read_number(w[t + 7]);
    if ((wrong_out && *wrong_out > 0) || (wrong_in && *wrong_in > 0)) {
      problems.push_back({Severity::error, where,
                          "#wrong is " + w[t + 3] + " out of place, " + w[t + 7] +
                              " in place: the collective returned wrong results, so its times are not a working link's"});
      continue;
    }
    run.rows.push_back({*size, *out_time * 1e-6, *in_time * 1e-6, *algbw * 1e9, *busbw * 1e9});
  }
  if (run.rows.empty() && !has_errors(problems)) {
    problems.push_back({Severity::error, file, "no nccl-tests result rows (size count type redop root time algbw busbw ...)"});
  }
  return result;
}

Loaded<NcclLinkFit> fit_nccl_link(const NcclTestsRun& run) {
  Loaded<NcclLinkFit> result;
  if (!run.collective) {
    result.problems.push_back({Severity::error, run.file,
                               "which collective was timed? the text names no nccl-tests program (all_reduce_perf, ...); "
                               "give --collective"});
  }
  if (run.ranks < 2) {
    result.problems.push_back({Severity::error, run.file,
                               "no '#  Rank N Group ... device ...' lines for 2 or more ranks: keep nccl-tests' header, "
                               "which says how many ranks ran"});
  }
  if (!result.ok()) return result;
  std::vector<CollectiveSample> samples;
  for (const auto& row : run.rows) {
    if (row.bytes <= 0) continue;
    for (double t : {row.out_of_place_s, row.in_place_s}) {
      if (t > 0) samples.push_back({*run.collective, run.ranks, row.bytes, t});
    }
  }
  std::vector<double> sizes;
  for (const auto& sample : samples) sizes.push_back(sample.bytes);
  std::sort(sizes.begin(), sizes.end());
  const auto distinct = std::unique(sizes.begin(), sizes.end()) - sizes.begin();
  if (distinct < 2) {
    result.problems.push_back({Severity::error, run.file,
                               "need rows of two or more message sizes with a time above 0 (got " +
                                   std::to_string(distinct) +
                                   "): one size cannot separate the latency from the bandwidth"});
    return result;
  }
  NcclLinkFit& link = result.value;
  link.samples = static_cast<std::int64_t>(samples.size());
  link.inter_node = run.hosts.size() > 1;
  link.fit = fit_link(samples);
  if (!link.fit.ok) {
    result.problems.push_back({Severity::error, run.file,
                               "the times do not give a positive bandwidth (need two or more sizes with a time that grows with size)"});
    return result;
  }
  link.link_bandwidth_bytes_per_s = link.fit.bandwidth_bytes_per_s;
  const auto hosts = static_cast<std::int64_t>(run.hosts.size());
  if (*run.collective == Collective::all_to_all && link.inter_node && run.ranks / hosts > 1) {
    // The rule's rate is proportional to the NICs' aggregate when they are the limit: the aggregate that
    // gives the measured rate is the fit over the rate of a unit aggregate (NVLink not the limit).
    link.link_bandwidth_bytes_per_s =
        link.fit.bandwidth_bytes_per_s /
        all_to_all_bus_bandwidth(run.ranks, run.ranks / hosts, std::numeric_limits<double>::infinity(), 1.0);
  }
  // What a cluster preset holds for any NIC count (apply_link_fit writes
  // bandwidth / 1e9 GB/s inside a node, bandwidth x 8 / (nics x 1e9) Gbit/s
  // per NIC across nodes), with 1% kept for the rounding of the written figures.
  const double most = 0.99 * std::min(kLinkRateMax * 1e9, kLinkRateMax * 1e9 / 8);
  const double least = 1.01 * std::max(kLinkRateMin * 1e9, kLinkRateMin * 1e9 / 8 * static_cast<double>(kMaxNicsPerNode));
  if (link.link_bandwidth_bytes_per_s > most) {
    result.problems.push_back({Severity::error, run.file,
                               "the times barely grow with the message size: the fitted bus bandwidth, " +
                                   format("%.3g", link.link_bandwidth_bytes_per_s / 1e9) +
                                   " GB/s, is beyond any link (a cluster preset holds at most " +
                                   format("%.3g", most / 1e9) + " GB/s); time larger messages"});
  } else if (link.link_bandwidth_bytes_per_s < least) {
    result.problems.push_back({Severity::error, run.file,
                               "the fitted bus bandwidth, " + format("%.3g", link.link_bandwidth_bytes_per_s) +
                                   " B/s, is below what a cluster preset holds (" + format("%.3g", least) + " B/s)"});
  }
  if (link.fit.latency_s * 1e6 > kLinkLatencyMaxUs) {
    result.problems.push_back({Severity::error, run.file,
                               "the fitted latency, " + format("%.3g", link.fit.latency_s) +
                                   " s per step, is beyond what a cluster preset holds (" +
                                   format("%.3g", kLinkLatencyMaxUs / 1e6) + " s)"});
  }
  return result;
}

ClusterSpec apply_link_fit(const ClusterSpec& base, const NcclLinkFit& link) {
  ClusterSpec c = base;
  LinkSpec& l = link.inter_node ? c.inter_node : c.intra_node;
  const double nics = link.inter_node ? static_cast<double>(std::max<std::int64_t>(c.inter_node.nics_per_node, 1)) : 1.0;
  l.bandwidth_bytes_per_s = std::stod(number(link.link_bandwidth_bytes_per_s / nics / 1e9)) * 1e9;
  l.latency_s = std::stod(number(link.fit.latency_s * 1e6)) * 1e-6;
  l.achievable_fraction = 1.0;
  return c;
}

std::string measured_cluster_yaml(const ClusterSpec& c, const NcclTestsRun& run, const NcclLinkFit& link,
                                  const std::string& base_label, const std::string& command) {
  const std::string from_base = "from " + base_label;
  std::ostringstream y;
  y << "# " << c.name << " with its " << (link.inter_node ? "inter-node" : "intra-node") << " link fitted to nccl-tests ("
    << run.file << ": " << (run.collective ? to_string(*run.collective) : "?") << ", " << run.ranks << " ranks on "
    << run.hosts.size() << (run.hosts.size() == 1 ? " host" : " hosts") << (run.device.empty() ? "" : ", " + run.device) << ").\n"
    << "# Written by `" << command << "`.\n"
    << "# Fit (model/nccl_tests.hpp): least squares on the relative error of\n"
    << "# t = latency_steps x latency + S x F_bus / bandwidth over both times of every size:\n"
    << "#          bytes   out-of-place us   in-place us   busbw GB/s\n";
  for (const auto& row : run.rows) {
    y << "#   " << format("%12.0f", row.bytes) << format("   %15.2f", row.out_of_place_s * 1e6)
      << format("   %11.2f", row.in_place_s * 1e6) << format("   %10.2f", row.busbw_bytes_per_s / 1e9) << "\n";
  }
  y << "# fit: latency " << format("%.3g", link.fit.latency_s * 1e6) << " us, bus bandwidth "
    << format("%.4g", link.fit.bandwidth_bytes_per_s / 1e9) << " GB/s; relative error median "
    << format("%.1f%%", 100 * link.fit.median_relative_error) << ", worst " << format("%.1f%%", 100 * link.fit.worst_relative_error)
    << " over " << link.samples << " times.\n";
  if (link.link_bandwidth_bytes_per_s != link.fit.bandwidth_bytes_per_s) {
    y << "# all-to-all across hosts, " << run.ranks / static_cast<std::int64_t>(run.hosts.size())
      << " ranks on each: it cannot aggregate NICs as a ring does, so the NICs' aggregate is\n"
      << "# fit x (n - m) m / (n - 1) = " << format("%.4g", link.link_bandwidth_bytes_per_s / 1e9)
      << " GB/s (model/collectives.hpp, all_to_all_bus_bandwidth).\n";
  }
  y << "# Everything else is " << from_base << ".\n"
    << "name: " << c.name << "\n"
    << "source: \"" << c.source << "; " << (link.inter_node ? "inter" : "intra") << "-node link fitted to nccl-tests output "
    << run.file << "\"\n"
    << "device: " << c.device.name << "   # " << from_base << "\n"
    << "devices_per_node: " << c.devices_per_node << "   # " << from_base << "\n";
  if (c.max_nodes) y << "max_nodes: " << *c.max_nodes << "   # " << from_base << "\n";
  auto write_link = [&](const char* key, const LinkSpec& l, bool fitted, bool inter) {
    const std::string note = fitted ? "# measured: the fit above" : "# " + from_base;
    y << key << ":\n"
      << "  kind: " << l.kind << "\n";
    if (inter) {
      y << "  nics_per_node: " << l.nics_per_node << "   # " << from_base << "\n"
        << "  per_nic_gbit_per_s: " << number(l.bandwidth_bytes_per_s * 8 / 1e9) << "   "
        << (fitted ? "# measured: the fitted link bandwidth / nics_per_node (NCCL runs one ring per NIC), in Gbit/s"
                   : "# " + from_base)
        << "\n";
    } else {
      y << "  per_direction_gb_per_s: " << number(l.bandwidth_bytes_per_s / 1e9) << "   "
        << (fitted ? "# measured: the fitted bus bandwidth" : "# " + from_base) << "\n";
    }
    y << "  latency_us: " << number(l.latency_s * 1e6) << "   " << (fitted ? "# measured: latency per step of the fit" : note) << "\n"
      << "  achievable_fraction: " << number(l.achievable_fraction) << "   "
      << (fitted ? "# the bandwidth above is itself a measured collective rate" : note) << "\n";
    if (!l.overlaps_compute) y << "  overlaps_compute: false   # " << from_base << "\n";
  };
  write_link("intra_node", c.intra_node, !link.inter_node, false);
  write_link("inter_node", c.inter_node, link.inter_node, true);
  return y.str();
}

}  // namespace meshplan
