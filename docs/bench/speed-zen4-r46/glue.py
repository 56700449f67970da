"""A pass of each level at context S and T tokens, timed whole (gamma.pass_seconds) and in its parts:
rope tables, embedding, the decoder plan's one native call, the head, the sampled distribution and the
confidence (speculate.top_probabilities). python glue.py S T"""
import sys, time, statistics, torch
import os; sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
from common import triforce_request
from triforce.runtime.gamma import pass_seconds
from triforce.runtime.model import decoder_plan
from triforce.runtime.sampling import probs_from_logits
from triforce.runtime.speculate import top_probabilities
S=int(sys.argv[1]); T=int(sys.argv[2])
args, eng, run, ids = triforce_request(S, 0.0, 64)
stack, _ = eng.build_stack(run, len(ids) + 80)
eng.prefill(stack, ids, None)
def parts(level, T):
    m, c = level.model, level.cache
    n = len(level.cached)
    x = torch.zeros(1, T, dtype=torch.long)
    t = [time.perf_counter()]
    cos, sin = c.begin(T); t.append(time.perf_counter())
    h = m.model.embed_tokens(x); plan = decoder_plan(m); slots = c.slots(); t.append(time.perf_counter())
    h = plan.run(h, cos, sin, *slots); t.append(time.perf_counter())
    c.end(); t.append(time.perf_counter())
    lg = m.head(h, T); t.append(time.perf_counter())
    p = probs_from_logits(lg[0], level.params); t.append(time.perf_counter())
    tp = top_probabilities(lg[0], p, True); t.append(time.perf_counter())
    c.crop(n)
    return [1000*(b-a) for a,b in zip(t,t[1:])]
with torch.inference_mode():
  for lv in stack:
    full = [1000*pass_seconds(lv, T) for _ in range(30)]
    pp = [parts(lv, T) for _ in range(30)]
    med = [statistics.median(col) for col in zip(*pp)]
    print(lv.name, "pass_seconds %.3f ms" % statistics.median(full), " parts: begin %.3f embed+slots %.3f plan.run %.3f end %.3f head %.3f probs %.3f toprob %.3f (sum %.3f)" % (*med, sum(med)))
