#!/usr/bin/env bash
# Round 19: what a new user gets from `triforce generate` with no tuning flags, before and after
# the defaults changed (gamma auto unless gammas are given; middle/draft weights and draft vocab
# auto). "before" passes the old defaults explicitly; each configuration runs ROUNDS times,
# alternating, on the same prompt (the essays' first 7,000 tokens, written by prompt.py).
#   bash docs/bench/speed-xeon-r19/defaults.sh OUT ROUNDS [extra generate flags, e.g. --dtype bf16]
set -euo pipefail
out=$1 rounds=$2; shift 2
mkdir -p "$out"
python docs/bench/speed-xeon-r19/prompt.py "$out/prompt.txt" 7000
old=(--gamma fixed --middle-weights same --draft-weights same --draft-vocab 0)
for r in $(seq 1 "$rounds"); do
  for cfg in ar before after; do
    case $cfg in
      ar) flags=(--mode ar) ;;
      before) flags=(--mode triforce "${old[@]}") ;;
      after) flags=(--mode triforce) ;;
    esac
    triforce generate --prompt-file "$out/prompt.txt" --max-new-tokens 128 --quiet "$@" "${flags[@]}" \
      --json "$out/${cfg}_$r.json" 2>&1 | grep "mode=" >&2
  done
done
python - "$out" "$rounds" <<'PY'
import json, sys
out, rounds = sys.argv[1], int(sys.argv[2])
load = lambda c, r: json.load(open(f"{out}/{c}_{r}.json"))
for r in range(1, rounds + 1):
    ar, before, after = (load(c, r) for c in ("ar", "before", "after"))
    same = before["token_ids"] == ar["token_ids"] == after["token_ids"]   # (sampled runs differ by design)
    a, b, c = (x["stats"]["ms_per_token"] for x in (ar, before, after))
    print(f"round {r}: ar {a:.1f} ms/token | triforce, old defaults {b:.1f} ({a / b:.2f}x ar) | "
          f"new defaults {c:.1f} ({a / c:.2f}x ar; gammas {after['stats'].get('gamma', {}).get('gammas', 'fixed')}) | "
          f"tokens equal: {same}")
PY
