"""Teacher-forced: is the drafter's own confidence (the top probability of the softmax of its logits)
a sign that the middle level keeps its draft? The target continues each prompt greedily (NEW tokens); the
drafter (default window) and the int4 middle level read the continuation 4 tokens a pass, as a run
would; per position, the drafter's confidence against whether its argmax equals the middle level's.
python drconf2.py S NEW WINDOWS"""
import dataclasses, os, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.speculate import top_probabilities

S, NEW, NW = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
args, eng, run, _ = triforce_request(S, 0.0, NEW)
conf, agree = [], []
with torch.inference_mode():
    for win in range(NW):
        ids = prompt_ids(eng, args, S * (win + 1))[-S:]
        _, seq, _ = teacher_forced(eng, dataclasses.replace(run, mode="ar"), ids)
        n = len(seq) - len(ids)
        stack, _ = eng.build_stack(run, len(seq) + 8)
        eng.prefill(stack, ids, None)
        drafter, middle = stack[0], stack[1]
        for j in range(0, n - 3, 4):
            L = len(ids) + j + 3
            d = drafter.feed(seq[:L], keep_last=4); drafter.commit(seq[:L])      # [4, V]
            m = middle.feed(seq[:L], keep_last=4); middle.commit(seq[:L])
            conf += top_probabilities(d, d, True).tolist()
            agree += (d.argmax(-1) == m.argmax(-1)).tolist()
c, a = torch.tensor(conf), torch.tensor(agree, dtype=torch.float)
print(f"S={S}: {len(c)} positions, agreement with the middle level {a.mean():.3f}")
for lo, hi in ((0, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.8), (0.8, 0.9), (0.9, 0.95), (0.95, 1.01)):
    sel = (c >= lo) & (c < hi)
    if sel.any():
        print(f"  drafter top probability in [{lo}, {hi}): {int(sel.sum()):4d} positions ({sel.float().mean():.2f}), agreement {a[sel].mean():.3f}")
