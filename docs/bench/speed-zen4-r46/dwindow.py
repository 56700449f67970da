"""Teacher-forced: the drafter's agreement with the target by its StreamingLLM window (--draft-window).
The target continues each prompt greedily (NEW tokens); the drafter, prefilled through a window of W recent
tokens (+ sinks), then reads the continuation 4 tokens a pass as a run would; per position: its argmax
against the target's, and sum min(p, q) at T = 0.6 (top-p 0.9).
python dwindow.py S NEW WINDOWS W [W ...]   (prompts: the essays' S-token windows 0..WINDOWS-1)"""
import dataclasses, os, sys, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime.bench.lower import teacher_forced
from triforce.runtime.bench.suites import prompt_ids
from triforce.runtime.sampling import SamplingParams, probs_from_logits

S, NEW, NW = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
widths = [int(w) for w in sys.argv[4:]]
args, eng, run, _ = triforce_request(S, 0.0, NEW)
hot = SamplingParams(temperature=0.6, top_p=0.9)
total = {w: [0, 0, 0.0] for w in widths}
with torch.inference_mode():
    for win in range(NW):
        ids = prompt_ids(eng, args, S * (win + 1))[-S:]
        _, seq, tl = teacher_forced(eng, dataclasses.replace(run, mode="ar"), ids)
        n, p = len(seq) - len(ids), probs_from_logits(tl, hot)
        for w in widths:
            stack, _ = eng.build_stack(dataclasses.replace(run, draft_window=w), len(seq) + 8)
            eng.prefill(stack, ids, None)
            drafter, agree, overlap, m = stack[0], 0, 0.0, 0
            for j in range(0, n - 3, 4):
                L = len(ids) + j + 3
                lg = drafter.feed(seq[:L], keep_last=4)                       # [4, V]
                drafter.commit(seq[:L])
                agree += int((lg.argmax(-1) == tl[j:j + 4].argmax(-1)).sum())
                overlap += float(torch.minimum(probs_from_logits(lg, hot), p[j:j + 4]).sum())
                m += 4
            total[w][0] += agree; total[w][1] += m; total[w][2] += overlap
            print(f"S={S} window {win} draft_window {w}: agreement {agree / m:.3f}, T=0.6 overlap {overlap / m:.3f} ({m} positions)", flush=True)
for w, (a, m, o) in total.items():
    print(f"draft_window {w}: agreement {a / m:.3f}, T=0.6 overlap {o / m:.3f} over {m} positions")
