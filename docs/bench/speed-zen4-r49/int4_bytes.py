"""Bytes per layer of the int4 middle level's linears (what a pass reads), to set beside the passes suite's
stage times: python int4_bytes.py"""
import triforce.runtime   # first: its allocator settings
from triforce.runtime.config import RunConfig
from triforce.runtime.engine import Engine
from triforce.runtime.quant import lower_level_copy

layer = lower_level_copy(Engine(RunConfig(dtype="bf16")).model, "int4").model.layers[0]
for name, lin in (("qkv", layer.self_attn.qkv_proj), ("o", layer.self_attn.o_proj),
                  ("gate_up", layer.mlp.gate_up_proj), ("down", layer.mlp.down_proj)):
    n = sum(t.numel() * t.element_size() for t in list(lin.buffers(recurse=False)) + list(lin.parameters(recurse=False)))
    print(f"{name} {type(lin).__name__} {n / 1e3:.1f} KB per layer")
