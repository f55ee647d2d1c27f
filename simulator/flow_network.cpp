// Per-link equal shares (flow_network.hpp). A flow's progress is kept as
// bytes remaining at `updated_s`; re-rating first moves it forward at the old
// rate, then predicts the end at the new one.
#include "simulator/flow_network.hpp"

#include <algorithm>
#include <limits>

namespace meshplan::sim {

FlowNetwork::FlowNetwork(const std::vector<SimLink>& links, bool contention) : contention_(contention) {
  capacity_bytes_per_s_.reserve(links.size());
  for (const SimLink& link : links) capacity_bytes_per_s_.push_back(link.bandwidth_bytes_per_s);
  weight_.assign(links.size(), 0.0);
  flows_on_link_.resize(links.size());
}

double FlowNetwork::rate_of(const Flow& flow) const {
  double rate = flow.most_bytes_per_s;
  if (!contention_) return rate;
  for (std::int32_t i = 0; i < flow.link_count; ++i) {
    const auto link = static_cast<std::size_t>(flow.links[static_cast<std::size_t>(i)].link);
    if (weight_[link] > 0) rate = std::min(rate, capacity_bytes_per_s_[link] / weight_[link]);
  }
  return rate;
}

FlowNetwork::Update FlowNetwork::predict(double now_s, std::int32_t id) {
  Flow& flow = flows_[static_cast<std::size_t>(id)];
  flow.remaining_bytes = std::max(0.0, flow.remaining_bytes - flow.rate_bytes_per_s * (now_s - flow.updated_s));
  flow.updated_s = now_s;
  flow.rate_bytes_per_s = rate_of(flow);
  ++flow.version;
  const double end = flow.remaining_bytes <= 0 ? now_s
                     : flow.rate_bytes_per_s > 0 ? now_s + flow.remaining_bytes / flow.rate_bytes_per_s
                                                 : std::numeric_limits<double>::infinity();
  return {id, flow.version, end};
}

void FlowNetwork::rerate_around(double now_s, const Flow& changed, std::vector<Update>& updates) {
  ++stamp_;
  for (std::int32_t i = 0; i < changed.link_count; ++i) {
    const auto link = static_cast<std::size_t>(changed.links[static_cast<std::size_t>(i)].link);
    for (std::int32_t id : flows_on_link_[link]) {
      Flow& other = flows_[static_cast<std::size_t>(id)];
      if (other.stamp == stamp_) continue;
      other.stamp = stamp_;
      updates.push_back(predict(now_s, id));
    }
  }
}

std::int32_t FlowNetwork::start(double now_s, const CommWork& work, std::vector<Update>& updates) {
  std::int32_t id;
  if (!free_.empty()) {
    id = free_.back();
    free_.pop_back();
  } else {
    id = static_cast<std::int32_t>(flows_.size());
    flows_.emplace_back();
  }
  Flow& flow = flows_[static_cast<std::size_t>(id)];
  const std::uint32_t version = flow.version;
  flow = Flow{};
  flow.version = version;
  flow.remaining_bytes = work.bus_bytes;
  flow.updated_s = now_s;
  flow.most_bytes_per_s = work.bandwidth_bytes_per_s;
  flow.active = true;
  if (!contention_) {
    updates.push_back(predict(now_s, id));
    return id;
  }
  flow.links = work.links;
  flow.link_count = work.link_count;
  for (std::int32_t i = 0; i < flow.link_count; ++i) {
    const LinkShare& share = flow.links[static_cast<std::size_t>(i)];
    weight_[static_cast<std::size_t>(share.link)] += share.weight;
    flows_on_link_[static_cast<std::size_t>(share.link)].push_back(id);
  }
  if (flow.link_count == 0) {
    updates.push_back(predict(now_s, id));
  } else {
    rerate_around(now_s, flow, updates);
  }
  return id;
}

void FlowNetwork::finish(double now_s, std::int32_t id, std::vector<Update>& updates) {
  Flow& flow = flows_[static_cast<std::size_t>(id)];
  flow.active = false;
  ++flow.version;  // any pending prediction is now stale
  free_.push_back(id);
  if (!contention_ || flow.link_count == 0) return;
  for (std::int32_t i = 0; i < flow.link_count; ++i) {
    const LinkShare& share = flow.links[static_cast<std::size_t>(i)];
    const auto link = static_cast<std::size_t>(share.link);
    auto& on_link = flows_on_link_[link];
    on_link.erase(std::find(on_link.begin(), on_link.end(), id));
    weight_[link] = on_link.empty() ? 0.0 : weight_[link] - share.weight;
  }
  rerate_around(now_s, flow, updates);
}

bool FlowNetwork::is_current(std::int32_t flow, std::uint32_t version) const {
  const Flow& f = flows_[static_cast<std::size_t>(flow)];
  return f.active && f.version == version;
}

}  // namespace meshplan::sim
