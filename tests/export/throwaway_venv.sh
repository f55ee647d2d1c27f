# Sourced by the export tests that install a framework from PyPI
# (jax_check.sh, deepspeed_check.sh, torchtitan_check.sh):
#   throwaway_venv PYTHON DIR WHY_TORCH
#   pip_or_skip DIR WHAT PIP_ARGS...
# makes a virtual environment DIR of PYTHON, removed when the test exits. With
# WHY_TORCH (what needs PyTorch), PYTHON must import torch and DIR sees its
# site packages (Debian's python3-torch; PyPI's torch wheels are gigabytes).
# Exits 77 (ctest: skipped) saying why when it cannot.
throwaway_venv() {
  local python=$1 dir=$2 why_torch=${3:-}
  local flags=()
  if [ -n "$why_torch" ]; then
    if ! "$python" -c 'import torch' >/dev/null 2>&1; then
      echo "SKIPPED: $python has no torch (Debian: python3-torch); $why_torch"
      exit 77
    fi
    flags=(--system-site-packages)
  fi
  # shellcheck disable=SC2064 # the directory is fixed now
  trap "rm -rf '$dir'" EXIT
  if ! "$python" -m venv "${flags[@]}" "$dir" >"$dir.log" 2>&1; then
    echo "SKIPPED: '$python -m venv' failed (Debian: python3-venv): $(tail -1 "$dir.log")"
    exit 77
  fi
}

# pip install PIP_ARGS into the environment DIR, or exit 77 saying that WHAT
# could not be installed (no network), with pip's last words.
pip_or_skip() {
  local dir=$1 what=$2
  shift 2
  if ! "$dir/bin/pip" install --quiet --disable-pip-version-check --timeout 30 "$@" >"$dir.pip.log" 2>&1; then
    echo "SKIPPED: could not install $what from PyPI: $(tail -2 "$dir.pip.log" | tr '\n' ' ')"
    exit 77
  fi
}
