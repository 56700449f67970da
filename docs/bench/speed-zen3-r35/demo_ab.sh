#!/usr/bin/env bash
# Round 35, 2-core AMD EPYC Zen 3 (AVX2 + FMA): the README's demo request (configs/demo.yaml) as
# `triforce` and as `ar`, at the session's start (f2b7d7d with its own native build) and at HEAD,
# alternated. OLD: a directory holding triforce/{runtime,actors,offload} of the old commit;
# OLDNAT: its native build.
#   OLD=/tmp/r35/shim OLDNAT=/tmp/r35/oldnat bash docs/bench/speed-zen3-r35/demo_ab.sh OUTDIR [ROUNDS]
set -eu
out=$1; rounds=${2:-1}; mkdir -p "$out"
for round in $(seq "$rounds"); do
  for side in new old; do
    for mode in triforce ar; do
      if [[ $side == old ]]; then env=(PYTHONPATH=$OLD TRIFORCE_NATIVE_DIR=$OLDNAT); else env=(); fi
      env "${env[@]}" .venv/bin/python -m triforce.runtime.cli generate --config configs/demo.yaml --mode $mode \
        --quiet --json "$out/$side-$mode-$round.json" 2>/dev/null
      .venv/bin/python - "$out/$side-$mode-$round.json" "$side" "$round" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); s = r["stats"]
g = s.get("gamma", {})
levels = {k: (v.get("passes"), round(v.get("ms_per_pass", 0) or 0, 1), v.get("acceptance")) for k, v in s.get("levels", {}).items()}
print(f"{sys.argv[2]}{sys.argv[3]} {r['mode']:>8}: {s['ms_per_token']:.1f} ms/token, prefill {s.get('prefill_s', s.get('prefill_ms', 0))}, "
      f"{s['new_tokens']} tokens; gamma {g.get('policy')} {g.get('chosen', g.get('gammas', ''))}; levels {levels}")
PY
    done
  done
done
