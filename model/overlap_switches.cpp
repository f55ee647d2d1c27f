#include "model/overlap_switches.hpp"

namespace meshplan {

const std::array<OverlapSwitch, 4> kOverlapSwitches = {{
    {&Plan::overlap_expert_parallel, &OverlapWanted::expert_parallel, "overlap_expert_parallel", "--overlap-ep",
     "Hide the experts' all-to-alls under another micro-batch's compute: Megatron-Core's combined 1F1B "
     "(--overlap-moe-expert-parallel-comm), each forward run beside another micro-batch's backward; needs ep > 1, "
     "pp 1 or an interleaved schedule, and no full recompute",
     "expert all-to-alls beside paired passes", "expert all-to-alls overlapped where the schedule pairs passes",
     "ep overlap", "Expert all-to-alls", "beside paired passes", "overlap_ep",
     "hiding the expert all-to-alls under paired passes (Megatron-Core's combined 1F1B, "
     "--overlap-moe-expert-parallel-comm)",
     "Expert-parallel overlap", false,
     [](const Plan& plan, std::int64_t experts) {
       return plan.overlap_expert_parallel && experts > 0 && expert_overlap_applies(plan);
     }},
    {&Plan::tp_comm_overlap, &OverlapWanted::tp_comm, "tp_comm_overlap", "--tp-comm-overlap",
     "Run each sequence-parallel all-gather and reduce-scatter of a layer in tp chunks beside the GEMM it feeds or "
     "follows: Transformer Engine's userbuffers (Megatron-Core --tp-comm-overlap), torchtitan's async tensor "
     "parallelism; needs tp > 1 and sequence parallelism",
     "tp collectives chunked beside their GEMMs", "tp collectives chunked beside their GEMMs where tp > 1",
     "tp overlap", "TP collectives", "chunked beside GEMMs", "tp_comm_overlap",
     "running the tp collectives in chunks beside their GEMMs (Transformer Engine's userbuffers, --tp-comm-overlap)",
     "Tensor-parallel communication overlap", true,
     [](const Plan& plan, std::int64_t) { return tp_comm_overlap_applies(plan); }},
    {&Plan::overlap_p2p_comm, &OverlapWanted::p2p, "overlap_p2p_comm", "--overlap-p2p",
     "Run the pipeline sends and receives of the steady state beside other chunks' compute, the fill's and drain's "
     "exposed: Megatron-Core's --overlap-p2p-communication; needs pp > 1 and the interleaved schedule",
     "pipeline transfers overlapped", "pipeline transfers overlapped where interleaved", "p2p overlap",
     "Pipeline transfers", "overlapped", "overlap_p2p", "", "", false,
     [](const Plan& plan, std::int64_t) { return p2p_overlap_applies(plan); }},
    {&Plan::overlap_zero_gather, &OverlapWanted::zero_gather, "overlap_zero_gather", "--overlap-zero-gather",
     "Gather ZeRO-1/2's updated weights under the next step's first forward, bucket by bucket: Megatron-Core's "
     "--overlap-param-gather (distributed optimizer), PyTorch FSDP's weights kept after the forward; needs ZeRO 1 "
     "or 2 over more than one data-parallel rank",
     "updated weights gathered under the next forward", "updated weights gathered under the next forward where ZeRO "
     "is 1 or 2", "gather overlap", "Updated weights", "gathered under the next forward", "overlap_zero_gather",
     "gathering ZeRO's updated weights under the next step's first forward (Megatron-Core's --overlap-param-gather)",
     "ZeRO's gather of the updated weights", false,
     [](const Plan& plan, std::int64_t) { return zero_gather_overlap_applies(plan); }},
}};

void set_overlap_switches(Plan& plan, const OverlapWanted& wanted, std::int64_t experts) {
  for (const OverlapSwitch& s : kOverlapSwitches) {
    plan.*s.field = wanted.*s.wanted;
    plan.*s.field = s.applies(plan, experts);
  }
}

std::string overlaps_searched(const OverlapWanted& wanted) {
  std::string text;
  for (const OverlapSwitch& s : kOverlapSwitches) {
    if (wanted.*s.wanted) text += "; " + std::string(s.searched);
  }
  return text;
}

}  // namespace meshplan
