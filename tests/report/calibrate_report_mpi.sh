#!/usr/bin/env bash
# Measured against predicted, end to end on this machine:
#  1. `mpirun -np 2 meshplan calibrate --quick --out DIR` times the MPI
#     collectives and writes their fitted latency and bandwidth into
#     DIR/clusters/local-cpu.yaml (positive, marked measured, not the
#     placeholder's), and the planner loads them: a plan file made with
#     MESHPLAN_USER_PRESETS=DIR embeds exactly those link figures;
#  2. `mpirun -np 2 meshplan train` of that dp=2 plan, with no thread
#     variables set, runs hardware threads / 2 BLAS threads per rank and
#     writes <metrics stem>.report.json with both ranks' measured and
#     predicted step time and memory (each rank's memory ledger peak); one
#     rank writes --report FILE with the ledger's peak too.
#
# usage: calibrate_report_mpi.sh MPIEXEC MESHPLAN GPT_MODEL_YAML CORPUS WORK_DIR
set -u
mpiexec=$1 meshplan=$2 model=$3 corpus=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1
fail() { echo "FAILED: $*" >&2; exit 1; }
py() { python3 -c "$@"; }

"$mpiexec" -np 2 "$meshplan" calibrate --quick --out "$work/presets" --json > calibrate.json 2> calibrate.err ||
  fail "mpirun -np 2 calibrate: $(tail -5 calibrate.err)"
yaml=presets/clusters/local-cpu.yaml
[ -s "$yaml" ] || fail "no $yaml"
cat "$yaml"
grep -q 'links measured over MPI' "$yaml" || fail "the cluster preset does not say its links were measured"
grep -q 'not measured' "$yaml" && fail "the cluster preset still has 'not measured' link figures"
bandwidth=$(sed -n 's/^  per_direction_gb_per_s: \([0-9.e+-]*\).*/\1/p' "$yaml" | head -1)
latency=$(sed -n 's/^  latency_us: \([0-9.e+-]*\).*/\1/p' "$yaml" | head -1)
py "import sys; b, l = float('$bandwidth'), float('$latency'); sys.exit(0 if b > 0 and l > 0 else 1)" ||
  fail "link figures not positive: bandwidth $bandwidth GB/s, latency $latency us"
py "
import json, sys
c = json.load(open('calibrate.json'))
link = c['cluster']['intra_node']
assert link['latency_s'] > 0 and link['bandwidth_bytes_per_s'] > 0, link
names = {t['collective'] for t in c['collectives']}
assert {'all_reduce', 'all_gather', 'reduce_scatter', 'send_recv'} <= names, names
assert all(t['correct'] and t['time_s'] > 0 and t['ranks'] == 2 for t in c['collectives'])
" || fail "calibrate --json: no fitted link or wrong collective timings"

# The planner prices with the measured link: the plan file embeds it.
MESHPLAN_USER_PRESETS="$work/presets" "$meshplan" explain --model "$model" --cluster local-cpu --gpus 2 \
  --mesh dp=2 --micro-batch 2 --global-batch 4 --emit-plan dp2.json > explain.out 2>&1 ||
  fail "explain on the calibrated local-cpu: $(tail -5 explain.out)"
py "
import json
p = json.load(open('dp2.json'))
link = p['cluster']['intra_node']
text = json.dumps(link)
bw = float('$bandwidth') * 1e9
lat = float('$latency') * 1e-6
values = [v for v in link.values() if isinstance(v, (int, float))]
assert any(abs(v - bw) <= 1e-6 * bw for v in values), (text, bw)
assert any(abs(v - lat) <= 1e-6 * lat for v in values), (text, lat)
" || fail "the plan file's cluster does not carry the calibrated link figures: $(python3 -c "import json; print(json.load(open('dp2.json'))['cluster'])")"

# Two ranks, no thread variables, not bound to cores: hardware threads / 2 each, and the report.
threads=$(( $(getconf _NPROCESSORS_ONLN) / 2 )); [ "$threads" -ge 1 ] || threads=1
env -u OPENBLAS_NUM_THREADS -u OMP_NUM_THREADS -u GOMP_SPINCOUNT -u OMP_WAIT_POLICY MESHPLAN_USER_PRESETS="$work/presets" \
  "$mpiexec" --bind-to none -np 2 "$meshplan" train --plan dp2.json --data "text:$corpus" --steps 4 --metrics dp2.jsonl > train2.out 2>&1 ||
  fail "mpirun -np 2 train: $(tail -8 train2.out)"
cat train2.out
[ "$(grep -c '^measured vs predicted' train2.out)" -eq 1 ] || fail "the report table was not printed exactly once"
py "
import json
r = json.load(open('dp2.report.json'))
assert r['threads']['per_rank'] == $threads, r['threads']
# train ran itself again with libgomp's spinning bounded (cli/openmp_env.hpp): neither variable was set.
assert r['threads']['GOMP_SPINCOUNT'] == '3000' and r['threads']['OMP_WAIT_POLICY'] is None, r['threads']
assert r['prediction']['step_s'] > 0, r['prediction']
assert r['prediction']['threaded_rates'] == ($threads > 1), r['prediction']
assert [x['rank'] for x in r['ranks']] == [0, 1], r['ranks']
for x in r['ranks']:
    assert x['threads'] == $threads and x['steps_timed'] == 3, x
    assert x['measured_median_step_s'] > 0 and x['predicted_step_s'] == r['prediction']['step_s'], x
    assert x['cpu_share'] > 0, x  # CPU time between step reports / (wall step x threads)
    assert abs(x['measured_over_predicted'] - x['measured_median_step_s'] / x['predicted_step_s']) < 1e-9, x
    assert x['predicted_memory_bytes'] > 0 and x['measured_vm_hwm_bytes'] > 0, x
    assert x['memory_compared'] == 'ledger' and x['measured_ledger_peak_bytes'] > 0, x  # every rank's buffers are in its ledger
" || fail "dp2.report.json: $(cat dp2.report.json)"

# One rank, --report FILE: the ledger's peak is what is compared.
MESHPLAN_USER_PRESETS="$work/presets" "$meshplan" explain --model "$model" --cluster local-cpu --gpus 1 \
  --mesh dp=1 --micro-batch 2 --global-batch 4 --emit-plan one.json > explain1.out 2>&1 || fail "explain dp=1"
OPENBLAS_NUM_THREADS=1 OMP_WAIT_POLICY=passive MESHPLAN_USER_PRESETS="$work/presets" "$meshplan" train --plan one.json --data "text:$corpus" --steps 3 \
  --report one-report.json > train1.out 2>&1 || fail "train one rank: $(tail -8 train1.out)"
py "
import json
r = json.load(open('one-report.json'))
assert r['threads']['per_rank'] == 1 and r['threads']['source'] == 'OPENBLAS_NUM_THREADS=1', r['threads']
assert r['threads']['OMP_WAIT_POLICY'] == 'passive', r['threads']  # the user's choice is kept, nothing re-set
assert r['threads']['GOMP_SPINCOUNT'] == __import__('os').environ.get('GOMP_SPINCOUNT'), r['threads']
[x] = r['ranks']
assert x['steps_timed'] == 2 and x['measured_median_step_s'] > 0 and x['predicted_step_s'] > 0, x
assert x['memory_compared'] == 'ledger' and x['measured_ledger_peak_bytes'] > 0, x
" || fail "one-report.json: $(cat one-report.json)"
echo "calibrate_report_mpi: passed"
