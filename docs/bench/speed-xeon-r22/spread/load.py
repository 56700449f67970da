"""Load one attention_cpu.cpp from a directory as its own module (old and new side by side)."""
import os, tempfile, torch
from torch.utils import cpp_extension
def load(srcdir, name):
    bd = os.path.join(tempfile.gettempdir(), f"triforce_ab_{name}"); os.makedirs(bd, exist_ok=True)
    return cpp_extension.load(name=f"attn_{name}", sources=[f"{srcdir}/attention_cpu.cpp"], build_directory=bd,
        extra_cflags=["-O3", "-std=c++17", "-fopenmp", "-march=native"], extra_ldflags=["-fopenmp"], verbose=False)
