# Scratch harness, round 18 (run from the repository root, via docs/bench/speed-xeon-r17/alternate.sh):
#   python docs/bench/speed-xeon-r18/real_order.py 7168 15 --out OUT
# each middle-level (retrieval) pass timed right after a target pass of 5 tokens, as a decode round runs
# them (the target evicts the middle level's weights), and again right after itself; medians in OUT.json.
import os, sys, statistics, time, torch, json
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "harness"))
from levels import levels_at
S = int(sys.argv[1]); out = sys.argv[sys.argv.index("--out") + 1]
torch.inference_mode().__enter__()
ids, lv = levels_at(S)
def pas(name, T=1):
    level = lv[name]; n = level.cache.get_seq_length()
    x = torch.tensor([ids[S - T + 1:S + 1]])
    t = time.perf_counter(); level.model(x, level.cache); dt = time.perf_counter() - t
    level.cache.crop(n); return dt * 1e3
res = {}
for rep in range(int(sys.argv[2])):
    for T in (1, 2, 4):
        res.setdefault(f"target_T5", []).append(pas("target", 5))
        res.setdefault(f"retrieval_T{T}_after_target", []).append(pas("retrieval", T))
        res.setdefault(f"retrieval_T{T}_second", []).append(pas("retrieval", T))
        res.setdefault(f"drafter_T1", []).append(pas("drafter", 1))
summary = {k: round(statistics.median(v), 3) for k, v in res.items()}
print(json.dumps(summary))
json.dump(dict(summary=summary, all=res), open(out + ".json", "w"))
