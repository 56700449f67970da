"""Teacher-forced greedy agreement of the middle level (the runtime's retrieval cache) whose decoder linears are the
target's weights fake-quantized to asymmetric int4 in groups of G input columns (w ~ (q - 8) * s + z, bf16 s and z,
as quant.py's int4 is), run through the target's own bf16 kernels: what a larger int4 group would cost in
acceptance before any kernel is built. python simq.py S NEW OFFSETS VARIANTS...  (VARIANT: same | gN, e.g. g32 g128)"""
import copy, os, sys, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "speed-zen4-r48"))
from forcing import by_stretch, engine_at, forced, prompts
import torch
from torch import nn
from triforce.runtime.bench.lower import middle_level
from triforce.runtime.ops import PackedLinear, dense_weight


def fake_int4(w: torch.Tensor, group: int) -> torch.Tensor:
    O, K = w.shape
    g = w.float().view(O, K // group, group)
    low, high = g.amin(-1, keepdim=True), g.amax(-1, keepdim=True)
    scale = ((high - low) / 15).clamp_min(1e-12)
    q = ((g - low) / scale).round().clamp(0, 15)
    s, z = scale.bfloat16().float(), (low + 8 * scale).bfloat16().float()
    return ((q - 8) * s + z).view(O, K).to(w.dtype)


def quantized_copy(model: nn.Module, group: int) -> nn.Module:
    shared = {id(t): t for t in list(model.parameters()) + list(model.buffers())}
    out = copy.deepcopy(model, memo=shared)
    for parent in out.model.layers.modules():
        for name, child in list(parent.named_children()):
            if isinstance(child, (nn.Linear, PackedLinear)):
                w = dense_weight(child)
                lin = nn.Linear(w.shape[1], w.shape[0], bias=False, dtype=w.dtype)
                lin.weight.data = fake_int4(w, group)
                setattr(parent, name, PackedLinear(lin) if isinstance(child, PackedLinear) else lin)
    return out


S, NEW, offsets, variants = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4:]
engine, run = engine_at(S, NEW)
models = {v: engine.model if v == "same" else quantized_copy(engine.model, int(v[1:])) for v in variants}
with torch.inference_mode():
    for off, ids in prompts(engine, S, offsets):
        request, target, seq, logits, n, ctx = forced(engine, run, ids, NEW)
        for v in variants:
            t0 = time.time()
            mid = middle_level(engine, request, models[v], target, ctx, len(seq) + 8)
            hits = (mid.feed(seq[:-1], keep_last=n).argmax(-1) == logits.argmax(-1)).float()
            print(f"offset {off} {v:5s}: agreement {hits.mean().item():.3f}  [{by_stretch(hits)}]  ({time.time() - t0:.1f} s)", flush=True)
