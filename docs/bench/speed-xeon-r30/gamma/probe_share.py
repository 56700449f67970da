"""--gamma auto with the top level's probe share as is (1/32) and larger, round-robin in one process:
python probe_share.py CONTEXT NEW ROPE REPEATS T SHARE..."""
import argparse, dataclasses, statistics, sys
import torch
from triforce.runtime import gamma
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.bench.measure import generate_unstopped
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
context, new, rope, reps, T = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
shares = [float(eval(s)) for s in sys.argv[6:]]
torch.set_num_threads(2)
base = RunConfig(mode="triforce", dtype="bf16", max_new_tokens=new, gamma="auto", temperature=T, rope_scaling=None if rope == "none" else rope)
engine = Engine(base, keep_prefill=True)
ids = prompt_ids(engine, argparse.Namespace(prompt_file=None, corpus="essays"), context)
generate_unstopped(engine, ids, base)
ms, tpp = {s: [] for s in shares}, {s: [] for s in shares}
for rep in range(reps):
    for s in (shares if rep % 2 == 0 else shares[::-1]):
        gamma.TOP_PROBE_SHARE = s
        r = generate_unstopped(engine, ids, dataclasses.replace(base, seed=rep))
        ms[s].append(1e3 * r.stats["decode_s"] / new)
        tpp[s].append(r.stats["tokens_per_target_pass"])
        g = r.stats["gamma"]
        print(f"rep {rep} share {s:.4f}: {ms[s][-1]:.2f} ms/token, {tpp[s][-1]} tok/target pass, probe {g['probe_s']} s, "
              f"target probe {g['probe_pass_ms']['target']}, rounds {g['rounds_per_choice']}", flush=True)
for s in shares:
    print(f"share {s:.4f}: median {statistics.median(ms[s]):.2f} ms/token, tokens/target pass {statistics.median(tpp[s])}, all {[round(x, 1) for x in ms[s]]}")
pairs = [b < a for a, b in zip(ms[shares[0]], ms[shares[1]])]
print(f"share {shares[1]:.4f} faster in {sum(pairs)}/{len(pairs)} pairs")
