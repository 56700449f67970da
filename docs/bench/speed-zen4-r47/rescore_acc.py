"""Teacher-forced acceptance of the middle level with an int4 head whose top-K candidates get the dense head's
exact logits (round 47's prototype in torch, fp32 values), against int4 layers + int8 head (the default before it)
and a plain int4 head. python rescore_acc.py S NEW K[,K...]"""
import os, sys, dataclasses, argparse, torch
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r45"))
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy, Int4Linear
from triforce.runtime.ops import dense_weight
from triforce.runtime.sampling import SamplingParams, probs_from_logits

class Rescored(torch.nn.Module):
    def __init__(self, approx, dense, k):
        super().__init__(); self.approx, self.dense, self.k = approx, dense, k
        self.register_buffer("weight", approx.weight, persistent=False)
    def forward(self, x):
        y = self.approx(x).float()
        idx = y.topk(self.k, dim=-1).indices
        ex = torch.einsum("...e,...ke->...k", x.float(), self.dense[idx].float())
        return y.scatter_(-1, idx, ex)

S, NEW = int(sys.argv[1]), int(sys.argv[2]); Ks = [int(k) for k in sys.argv[3].split(",")]
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2", "--corpus", "essays",
                     "--new-tokens", str(NEW)] + (["--rope-scaling", "yarn:4"] if S > 8000 else []))
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
dense = engine.model.model.embed_tokens.weight     # tied head
models = {"int4 (int8 head)": lower_level_copy(engine.model, "int4", head="int8"), "int4:int4": lower_level_copy(engine.model, "int4")}
models["int4:int4"].lm_head = models["int4:int4"].lm_head.approx          # the plain int4 head (RescoredHead's inner one)
for k in Ks:
    m = lower_level_copy(engine.model, "int4")
    m.lm_head = Rescored(m.lm_head.approx, dense, k)
    models[f"int4:int4 rescored top-{k}"] = m
with torch.inference_mode():
    ids = prompt_ids(engine, args, S)
    for T in (0.0, 0.6):
        params = SamplingParams(temperature=T, top_p=0.9)
        request = dataclasses.replace(run, temperature=T, max_new_tokens=NEW)
        target, seq, tl = teacher_forced(engine, request, ids)
        pt = probs_from_logits(tl, params)
        for name, m in models.items():
            lg, budget = middle_logits(engine, request, m, target, ids, seq)
            q = probs_from_logits(lg, params)
            agree = (lg.argmax(-1) == tl.argmax(-1)).float().mean().item()
            ov = torch.minimum(pt, q).sum(-1).mean().item()
            print(f"S={S} T={T} {name:28s} greedy agreement {agree:.4f} expected acceptance {ov:.4f}", flush=True)
