# Round 21, measured and not kept (docs/BENCHMARKS.md): retrieval-cache selection policies, teacher-forced.
# usage: python exp.py CONTEXT WINDOW BUDGETS ROPE_SCALING OFFSETS, e.g. 32000 16 1024,2048 yarn:4 0,160000,320000,480000
# (the essays from each character offset; prints and saves greedy agreement and expected acceptance per policy).
# POLICIES=mean,massw runs only those two (the proposal-distribution rows, ' q POLICY T TOP_P EA', were run so);
# those rows are the expected acceptance with the middle level's proposal at other temperatures / top-p than the target's.
"""Selection policies for the retrieval cache, teacher-forced agreement with the target."""
import argparse, dataclasses, sys, time, json
import torch
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.lower import middle_level
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
from triforce.runtime import cache_retrieval as cr
from triforce.runtime.cache_full import FullCache

ctx = int(sys.argv[1]); W = int(sys.argv[2]) if len(sys.argv) > 2 else 16
budgets = [int(b) for b in sys.argv[3].split(",")] if len(sys.argv) > 3 else [1024]
budget = budgets[0]
rope = sys.argv[4] if len(sys.argv) > 4 else None
args = argparse.Namespace(model=None, draft_model=None, dtypes=["bf16"], rope_scaling=rope, new_tokens=128,
                          budget=budget, chunk_size=8, gamma1=None, gamma2=None, top_p=0.9, corpus="essays", prompt_file=None)
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
from triforce.runtime.bench.suites import corpus_text
OFFSETS = [int(o) for o in (sys.argv[5].split(",") if len(sys.argv) > 5 else ["0"])]
TEXT = corpus_text("essays")
models = {"same": engine.model, "int4": lower_level_copy(engine.model, "int4")}
POLICY = {"name": "mean"}
WINDOW = {}

orig_fill = cr.RetrievalCache.fill_from
def fill_from(self, full, n):
    pol = POLICY["name"]
    if pol == "mean":
        return orig_fill(self, full, n)
    whole = n // self.chunk * self.chunk
    tail = n - whole
    n_chunks = (self.budget - tail) // self.chunk
    for layer in range(self.k.shape[0]):
        keys, values = (t[:, :, :n] for t in full.layer_kv(layer))
        B, Hkv, _, D = keys.shape
        q = WINDOW[layer]  # [B, H, W, D]
        Wn = POLICY.get("W", q.shape[2]) if pol.endswith("w") else 1
        q = q[:, :, -Wn:].float()
        G = q.shape[1] // Hkv
        kk = keys[:, :, :whole].float()
        if pol.startswith("meanw"):
            means = kk.view(B, Hkv, -1, self.chunk, D).mean(3)
            scores = torch.einsum("bhgwd,bhcd->bhc", q.view(B, Hkv, G, Wn, D), means)
        else:
            kfull = keys.float()
            logits = torch.einsum("bhgwd,bhsd->bhgws", q.view(B, Hkv, G, Wn, D), kfull) / D ** 0.5
            probs = logits.softmax(-1)[..., :whole]        # over the whole context, causal-ish (window is at end)
            pc = probs.reshape(B, Hkv, G, Wn, -1, self.chunk)
            if pol.startswith("mass"):
                scores = pc.sum(-1).sum((2, 3))
            elif pol.startswith("maxp"):
                scores = pc.amax(-1).sum((2, 3))
            elif pol.startswith("hmax"):   # max over heads/queries of chunk mass
                scores = pc.sum(-1).amax(3).sum(2)
        pos = cr.select_positions(scores, self.chunk, n_chunks, tail, self.recent_chunks)
        index = pos[..., None].expand(-1, -1, -1, self.k.shape[-1])
        kept = pos.shape[-1]
        self.k[layer, :, :, :kept] = keys.gather(2, index)
        self.v[layer, :, :, :kept] = values.gather(2, index)
    self.selected = self.length = kept
    self.context = n
cr.RetrievalCache.fill_from = fill_from

orig_update = FullCache.update
def cap_update(self, layer, q, k, v):
    WINDOW[layer] = q[:, :, -W:].detach().clone()
    return orig_update(self, layer, q, k, v)

rows = []
import os
POLICIES = [("int4", p, w, b) for b in budgets for p, w in (("mean", 1), ("meanw", 16), ("mass1", 1), ("massw", 8), ("massw", 16), ("hmaxw", 16))
            if p in os.environ.get("POLICIES", p).split(",") and (p != "massw" or w == 16 or "POLICIES" not in os.environ)]
with torch.inference_mode():
 for off in OFFSETS:
  ids = engine.tokenizer.encode(TEXT[off:off + ctx * 8])[:ctx]
  for temperature in (0.0, 0.6):
    params = SamplingParams(temperature=temperature, top_p=0.9)
    request = dataclasses.replace(run, temperature=temperature, max_new_tokens=128)
    cont = engine.generate(ids, request).token_ids
    seq, n = ids + cont, len(cont)
    stack, _ = engine.build_stack(request, len(seq) + 8)
    engine.prefill(stack, ids, None)
    target = stack[-1]
    prompt_query = target.cache.last_query.clone()
    target_logits = target.feed(seq[:-1], keep_last=n)
    p = probs_from_logits(target_logits, params)
    # capture window queries via the python path
    target.feed(ids[:-1])
    target.cache.crop(len(ids) - 1 - W)
    FullCache.update = cap_update
    import triforce.runtime.model as tm
    dp = tm.decoder_plan; tm.decoder_plan = lambda m: None
    target.model.logits(torch.tensor([ids[len(ids) - 1 - W:len(ids) - 1]]), target.cache, last_only=1)
    tm.decoder_plan = dp
    FullCache.update = orig_update
    target.cached = list(ids[:-1])
    target.cache.last_query.copy_(prompt_query)
    for wname, pol, Wn, b in POLICIES:
            POLICY["name"] = pol; POLICY["W"] = Wn
            request = dataclasses.replace(request, retrieval_budget=b)
            t0 = time.time()
            middle = middle_level(engine, request, models[wname], target, len(ids) - 1, len(seq) + 8)
            tb = time.time() - t0
            logits = middle.feed(seq[:-1], keep_last=n)
            if temperature > 0:
                for qt, qp in ((0.6, 1.0), (0.5, 0.9), (0.7, 0.9), (0.7, 1.0), (0.5, 1.0), (0.6, 0.95)):
                    qq = probs_from_logits(logits, SamplingParams(temperature=qt, top_p=qp))
                    print(" q", pol, qt, qp, round(torch.minimum(p, qq).sum(-1).mean().item(), 4), flush=True)
                    rows.append(dict(off=off, pol=pol, qt=qt, qp=qp, ea=round(torch.minimum(p, qq).sum(-1).mean().item(), 4)))
            q = probs_from_logits(logits, params)
            agree = (logits.argmax(-1) == target_logits.argmax(-1)).float().mean().item()
            ea = torch.minimum(p, q).sum(-1).mean().item()
            r = dict(off=off, ctx=ctx, T=temperature, w=wname, pol=pol, W=Wn, budget=b, agree=round(agree, 3), ea=round(ea, 3), build_s=round(tb, 2))
            print(r, flush=True); rows.append(r)
json.dump(rows, open(f"/tmp/sel/r_{ctx}_{W}_{sys.argv[3]}_{sys.argv[5]}.json", "w"))
