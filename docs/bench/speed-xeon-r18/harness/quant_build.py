import sys, torch
from torch.utils import cpp_extension
def build(name, defs):
    return cpp_extension.load(name=name, sources=["/tmp/r18/v/var.cpp"], build_directory=None,
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native", *[f"-D{d}" for d in defs]], extra_ldflags=["-fopenmp"], verbose=False)
def spec(s):   # "16:T2:P"
    parts = s.split(":")
    defs = [f"PFG={parts[0]}", f"PFH=_MM_HINT_{parts[1]}"] + (["PRO"] if len(parts) > 2 else [])
    return build("q_" + s.replace(":", "_"), defs)
