# Shell helpers of the `mpirun ... meshplan train` tests (cli_train_mpi.sh,
# cli_train_mlp_mpi.sh), sourced after they set $meshplan and $model:
#   fail MESSAGE                     print FAILED and exit 1
#   emit NAME GPUS MESH MICRO GLOBAL [explain flags]   write NAME.json with explain --emit-plan
#   losses METRICS.jsonl             the step losses, one per line
#   compare REF.jsonl OTHER.jsonl LABEL   every step's loss within 1e-5 relative of the reference's
fail() { echo "FAILED: $*" >&2; exit 1; }

emit() {
  local name=$1 gpus=$2 mesh=$3 micro=$4 global=$5; shift 5
  "$meshplan" explain --model "$model" --cluster local-cpu --gpus "$gpus" --mesh "$mesh" --micro-batch "$micro" \
    --global-batch "$global" "$@" --emit-plan "$name.json" > "$name.explain" 2>&1 ||
    fail "explain $name: $(tail -3 "$name.explain")"
}

losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }

compare() {
  local n_ref n_other
  n_ref=$(losses "$1" | wc -l) n_other=$(losses "$2" | wc -l)
  [ "$n_ref" -eq "$n_other" ] && [ "$n_ref" -gt 0 ] || fail "$3: $n_other loss lines against $n_ref"
  paste <(losses "$1") <(losses "$2") | awk -v label="$3" '
    { d = ($2 - $1) / $1; if (d < 0) d = -d; if (d > worst) worst = d
      if (d > 1e-5) { printf "FAILED: %s: step %d loss %s, one device %s\n", label, NR - 1, $2, $1; bad = 1 } }
    END { printf "%s: %d steps, largest relative loss difference %.3g\n", label, NR, worst; exit bad }' || exit 1
}
