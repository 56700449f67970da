"""Which head the middle level gets, and in which dtype its dense rows, for an fp32 and a bf16 engine (both read the
copy's own bf16 embedding through the native rescore_top), and a short request on each: python head_dtypes.py"""
import torch
import triforce.runtime
from triforce.runtime.engine import Engine
from triforce.runtime.config import RunConfig
from triforce.runtime.quant import RescoredHead
torch.set_num_threads(2)
for dtype in ("fp32", "bf16"):
    run = RunConfig(dtype=dtype, mode="triforce", max_new_tokens=16)
    eng = Engine(run)
    m = eng.level_model(run, "middle")
    h = m.lm_head
    print(dtype, type(h).__name__, getattr(h, "dense", torch.empty(0)).dtype, m.dtype, "shares the copy's embedding:",
          isinstance(h, RescoredHead) and h.dense.data_ptr() == m.model.embed_tokens.weight.data_ptr())
    res = eng.generate(eng.tokenizer.encode("In the beginning God created the heaven and the earth. " * 20), run)
    print(dtype, res.stats["ms_per_token"], res.stats["levels"]["retrieval"]["weights"], res.stats["levels"]["retrieval"]["weight_bytes"])
