// Names of collectives and algorithms for reports, sweeps and the studio. The
// cost functions themselves are inline in collectives.hpp: they sit on the
// planner's hot path.
#include "model/collectives.hpp"

namespace meshplan {

std::string to_string(Collective collective) {
  switch (collective) {
    case Collective::all_reduce: return "all_reduce";
    case Collective::all_gather: return "all_gather";
    case Collective::reduce_scatter: return "reduce_scatter";
    case Collective::all_to_all: return "all_to_all";
    case Collective::broadcast: return "broadcast";
    case Collective::send_recv: return "send_recv";
  }
  return "?";
}

std::string to_string(CollectiveAlgorithm algorithm) {
  switch (algorithm) {
    case CollectiveAlgorithm::ring: return "ring";
    case CollectiveAlgorithm::tree: return "tree";
  }
  return "?";
}

}  // namespace meshplan
