"""Teacher-forced, one prompt: where the middle level's int8 and rescored int4 heads miss the target's argmax, the int4
head's logit error, and each head's confidence (python head_error.py S NEW)."""
import sys, dataclasses, argparse, torch
import triforce.runtime
from triforce.runtime.bench import add_bench_parser
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.bench.lower import teacher_forced, middle_logits
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy
from triforce.runtime.sampling import SamplingParams, probs_from_logits
S, NEW = int(sys.argv[1]), int(sys.argv[2])
p = argparse.ArgumentParser(); sub = p.add_subparsers(dest="command"); add_bench_parser(sub)
args = p.parse_args(["bench", "--suite", "lower", "--contexts", str(S), "--dtypes", "bf16", "--threads", "2", "--corpus", "essays", "--new-tokens", str(NEW)])
torch.set_num_threads(2)
run = base_run(args, mode="ar", temperature=0.0)
engine = Engine(run, keep_prefill=True)
models = {"int8": lower_level_copy(engine.model, "int4", head="int8"), "resc": lower_level_copy(engine.model, "int4")}
with torch.inference_mode():
    ids = prompt_ids(engine, args, S)
    request = dataclasses.replace(run, temperature=0.0, max_new_tokens=NEW)
    target, seq, tl = teacher_forced(engine, request, ids)
    out = {}
    for name, m in models.items():
        lg, _ = middle_logits(engine, request, m, target, ids, seq)
        out[name] = lg
    ta = tl.argmax(-1)
    for name, lg in out.items():
        conf = probs_from_logits(lg, SamplingParams(temperature=0.0001)).amax(-1) if False else torch.softmax(lg, -1).amax(-1)
        miss = (lg.argmax(-1) != ta).nonzero().flatten().tolist()
        print(name, "misses at", miss, "sure(>=0.9) share", (conf >= 0.9).float().mean().item())
    d = (out["int8"].argmax(-1) != out["resc"].argmax(-1)).nonzero().flatten().tolist()
    print("int8 vs resc argmax differ at", d)
    for i in d[:10]:
        for name, lg in out.items():
            v, ix = lg[i].topk(3)
            print(i, name, ix.tolist(), [round(x, 3) for x in v.tolist()], "target", tl[i].topk(3).indices.tolist(), [round(x,3) for x in tl[i].topk(3).values.tolist()])
    # the int4 head's error on real hidden states, and confidences
    from triforce.runtime import quant
    resc = models["resc"].lm_head
    h = {}
    def hook(mod, inp, outp): h["x"] = inp[0]
    handle = resc.register_forward_hook(hook)
    middle_logits(engine, request, models["resc"], target, ids, seq)
    handle.remove()
    x = h["x"].reshape(-1, 576)
    approx = resc.approx(x).float(); exact = (x.float() @ resc.dense.float().T)
    err = approx - exact
    print("int4 head logit error: std %.4f, max %.3f" % (err.std().item(), err.abs().max().item()))
    i8 = models["int8"].lm_head(x).float()
    print("int8 head logit error: std %.4f" % (i8 - exact).std().item())
    for name, lg in (("exact", exact), ("int8", i8), ("int4", approx), ("resc", out["resc"])):
        c = torch.softmax(lg, -1).amax(-1)
        print(name, "mean top prob %.4f" % c.mean().item(), "sure share %.4f" % (c >= 0.9).float().mean().item())
