// Transfers that share a link share its bandwidth. Each active flow (one
// CommWork in flight) crosses up to four links with a weight (the replicas it
// stands for); a link of bandwidth C carrying total weight W gives each
// replica C / W, and a flow moves at the smallest of its links' shares,
// never faster than its uncontended axis bandwidth. So contention can only
// slow a flow down (docs/simulator.md, "Links and contention").
//
// Bandwidth a flow leaves unused on one link is not handed to the others
// (that would be max-min fairness, Bertsekas & Gallager, "Data Networks",
// Sec. 6.5.2); the per-link equal share is conservative and local: starting
// or ending a flow re-rates only the flows on the links it touches.
//
// With contention off, every flow runs at its uncontended bandwidth, and its
// completion time is fixed when it starts.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "simulator/step_work.hpp"

namespace meshplan::sim {

class FlowNetwork {
 public:
  FlowNetwork(const std::vector<SimLink>& links, bool contention);

  // A flow's (new) predicted end of transmission; an older version of the
  // same flow is stale.
  struct Update {
    std::int32_t flow = -1;
    std::uint32_t version = 0;
    double transmitted_s = 0;
  };

  // Starts moving work.bus_bytes at `now_s`. Appends to `updates` the new
  // flow's and every re-rated flow's predicted end.
  std::int32_t start(double now_s, const CommWork& work, std::vector<Update>& updates);
  // The flow has moved its bytes: it leaves its links, which re-rates the others.
  void finish(double now_s, std::int32_t flow, std::vector<Update>& updates);
  bool is_current(std::int32_t flow, std::uint32_t version) const;

 private:
  struct Flow {
    double remaining_bytes = 0;
    double rate_bytes_per_s = 0;
    double updated_s = 0;
    double most_bytes_per_s = 0;  // uncontended
    std::uint32_t version = 0;
    std::uint32_t stamp = 0;
    std::array<LinkShare, 4> links{};
    std::int32_t link_count = 0;
    bool active = false;
  };

  double rate_of(const Flow& flow) const;
  void rerate_around(double now_s, const Flow& changed, std::vector<Update>& updates);
  Update predict(double now_s, std::int32_t id);

  bool contention_ = true;
  std::vector<double> capacity_bytes_per_s_;
  std::vector<double> weight_;
  std::vector<std::vector<std::int32_t>> flows_on_link_;
  std::vector<Flow> flows_;
  std::vector<std::int32_t> free_;
  std::uint32_t stamp_ = 0;
};

}  // namespace meshplan::sim
