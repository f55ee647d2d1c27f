#pragma once
// The overlap switches: plan fields that each run some communication beside
// compute the way one framework does, that the search holds fixed (set on
// every candidate where they apply, never varied), and that plan files, the
// JSON, the command line, sweep's columns, explain's plan line, the
// validation page and the studio's setup all name the same way. Each surface
// reads this table, so a switch is a row here, its Plan field and its cost
// rule (docs/architecture.md, "Plan switches").

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "model/plan.hpp"

namespace meshplan {

// Which switches a search, a command line or the studio's setup asks for.
struct OverlapWanted {
  bool expert_parallel = false;  // Plan::overlap_expert_parallel
  bool tp_comm = false;          // Plan::tp_comm_overlap
  bool p2p = false;              // Plan::overlap_p2p_comm
  bool zero_gather = false;      // Plan::overlap_zero_gather
};

struct OverlapSwitch {
  bool Plan::*field;
  bool OverlapWanted::*wanted;
  std::string_view key;           // plan files, explain --json's plan, sweep's column, problems' field
  std::string_view flag;          // explain, simulate, plan and sweep
  std::string_view help;          // the flag's help, the studio's tooltip
  std::string_view described;     // explain's plan line
  std::string_view searched;      // the search's line: what every candidate gets, and where
  std::string_view short_name;    // the validation page's plan column
  std::string_view studio_label;  // the studio's setup row and its check box
  std::string_view studio_check;
  std::string_view studio_key;    // the studio's field name and settings key (setup/<key>)
  // explain's note where a plan could run it and does not ("" for none): what
  // it would change, and the docs/cost-model.md section that prices it.
  std::string_view note, note_section;
  bool changes_record;            // block costs must be priced again with it (else the plan's record is reused)
  // Whether a plan that asks for it runs it (the search sets it only there);
  // `experts`: the model's routed experts.
  bool (*applies)(const Plan& plan, std::int64_t experts);
};

extern const std::array<OverlapSwitch, 4> kOverlapSwitches;

// Every switch `wanted` asks for, set on `plan` where it applies, and off elsewhere.
void set_overlap_switches(Plan& plan, const OverlapWanted& wanted, std::int64_t experts);
// "; <searched>" for each switch `wanted` asks for (the search's line).
std::string overlaps_searched(const OverlapWanted& wanted);

}  // namespace meshplan
