#include "model/plan.hpp"

#include <algorithm>
#include <cctype>

namespace meshplan {

std::string to_string(Recompute recompute) {
  switch (recompute) {
    case Recompute::none: return "none";
    case Recompute::selective: return "selective";
    case Recompute::full: return "full";
    case Recompute::selective_op: return "selective-op";
  }
  return "?";
}

std::string to_string(Attention attention) {
  return attention == Attention::fused ? "fused" : "unfused";
}

std::string to_string(CpComm cp_comm) {
  switch (cp_comm) {
    case CpComm::ring: return "ring";
    case CpComm::all_gather: return "all-gather";
    case CpComm::all_to_all: return "all-to-all";
  }
  return "?";
}

std::optional<CpComm> parse_cp_comm(std::string_view text) {
  if (text == "ring") return CpComm::ring;
  if (text == "all-gather") return CpComm::all_gather;
  if (text == "all-to-all") return CpComm::all_to_all;
  return std::nullopt;
}

std::string to_string(EpDispatch dispatch) {
  return dispatch == EpDispatch::deduplicated ? "deduplicated" : "all-to-all";
}

std::optional<EpDispatch> parse_ep_dispatch(std::string_view text) {
  if (text == "all-to-all") return EpDispatch::all_to_all;
  if (text == "deduplicated") return EpDispatch::deduplicated;
  return std::nullopt;
}

std::optional<std::int64_t> parse_expert_tp(std::string_view text) {
  if (text == "tp") return 0;
  if (text == "1") return 1;
  return std::nullopt;
}

std::string to_string(Loss loss) {
  return loss == Loss::fused ? "fused" : "eager";
}

std::optional<Loss> parse_loss(std::string_view text) {
  if (text == "eager") return Loss::eager;
  if (text == "fused") return Loss::fused;
  return std::nullopt;
}

std::optional<Attention> parse_attention(std::string_view text) {
  if (text == "fused") return Attention::fused;
  if (text == "unfused") return Attention::unfused;
  return std::nullopt;
}

std::string to_string(const Schedule& schedule) {
  switch (schedule.kind) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved:" + std::to_string(schedule.virtual_stages);
    case ScheduleKind::zb_h1: return "zb-h1";
  }
  return "?";
}

std::string to_string(RecomputeModule module) {
  switch (module) {
    case RecomputeModule::none: return "none";
    case RecomputeModule::core_attn: return "core_attn";
    case RecomputeModule::layernorm: return "layernorm";
    case RecomputeModule::mla_up_proj: return "mla_up_proj";
    case RecomputeModule::moe_act: return "moe_act";
    case RecomputeModule::mlp: return "mlp";
    case RecomputeModule::shared_experts: return "shared_experts";
  }
  return "?";
}

std::optional<RecomputeModule> parse_recompute_module(std::string_view text) {
  for (RecomputeModule m : {RecomputeModule::core_attn, RecomputeModule::layernorm, RecomputeModule::mla_up_proj,
                            RecomputeModule::moe_act, RecomputeModule::mlp, RecomputeModule::shared_experts}) {
    if (text == to_string(m)) return m;
  }
  return std::nullopt;
}

std::string recompute_modules_text(RecomputeModules modules) {
  std::string text;
  for (int m = 1; m < kRecomputeModules; ++m) {
    if (modules & module_bit(static_cast<RecomputeModule>(m))) {
      text += (text.empty() ? "" : ",") + to_string(static_cast<RecomputeModule>(m));
    }
  }
  return text;
}

std::optional<RecomputeModules> parse_recompute_modules(std::string_view text, std::string& bad) {
  RecomputeModules modules = 0;
  bad.clear();
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string_view word = text.substr(start, comma - start);
    while (!word.empty() && word.front() == ' ') word.remove_prefix(1);
    while (!word.empty() && word.back() == ' ') word.remove_suffix(1);
    const auto module = parse_recompute_module(word);
    if (!module) {
      bad = std::string(word);
      return std::nullopt;
    }
    modules |= module_bit(*module);
    start = comma + 1;
  }
  return modules;
}

std::string recompute_modules_problem(const std::string& bad) {
  return (bad.empty() ? std::string("names no module") : "'" + bad + "' is not a recompute module") + " (choose from " +
         std::string(recompute_module_choices) + ")";
}

std::string expert_overlap_problem(const Plan& plan) {
  const std::int64_t pp = plan.mesh.size(Axis::pp);
  if (plan.recompute == Recompute::full) {
    return "combined 1F1B does not run with full recompute (Megatron-Core; NVIDIA's expert-parallel overlap guide "
           "rules it out); use selective or none";
  }
  if (plan.schedule.kind == ScheduleKind::zb_h1) {
    return "the zero-bubble schedule splits the backward in two; combined 1F1B pairs whole forwards and backwards "
           "(use 1f1b, or interleaved:<v> with pp > 1)";
  }
  if (pp > 1 && plan.schedule.kind != ScheduleKind::interleaved) {
    return "with pipeline stages, Megatron-Core's combined 1F1B runs only the interleaved schedule (pp " +
           std::to_string(pp) + ", schedule " + to_string(plan.schedule) + "; use interleaved:<v>)";
  }
  return "";
}

bool expert_overlap_applies(const Plan& plan) { return expert_split(plan).ep > 1 && expert_overlap_problem(plan).empty(); }

bool tp_comm_overlap_applies(const Plan& plan) {
  return plan.tp_comm_overlap && plan.sequence_parallel && plan.mesh.size(Axis::tp) > 1;
}

bool p2p_overlap_applies(const Plan& plan) {
  return plan.overlap_p2p_comm && plan.mesh.size(Axis::pp) > 1 && plan.schedule.kind == ScheduleKind::interleaved;
}

bool zero_gather_overlap_applies(const Plan& plan) {
  return plan.overlap_zero_gather && (plan.zero_stage == 1 || plan.zero_stage == 2) &&
         plan.mesh.zero_group_size() > 1 && plan.overlap_gradient_reduction;
}

std::optional<Recompute> parse_recompute(std::string_view text) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  if (text == "selective-op") return Recompute::selective_op;
  return std::nullopt;
}

std::optional<Schedule> parse_schedule(std::string_view text) {
  if (text == "gpipe") return Schedule{ScheduleKind::gpipe, 1};
  if (text == "1f1b") return Schedule{ScheduleKind::one_f_one_b, 1};
  if (text == "zb-h1") return Schedule{ScheduleKind::zb_h1, 1};
  constexpr std::string_view prefix = "interleaved:";
  if (text.starts_with(prefix)) {
    const std::string_view digits = text.substr(prefix.size());
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) {
      return std::nullopt;
    }
    const std::int64_t v = std::stoll(std::string(digits));
    if (v < 2) return std::nullopt;
    return Schedule{ScheduleKind::interleaved, v};
  }
  return std::nullopt;
}

}  // namespace meshplan
