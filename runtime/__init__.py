"""TriForce runtime: Llama-family model, caches, sampling, speculation, generation.

Shape glossary (used in every shape comment of this project):
    B    batch (sequences decoded together)
    T    new tokens in this forward pass (query length)
    S    key/value positions visible to the pass (cache length after the update)
    H    query heads            Hkv  key/value heads        G = H // Hkv (queries per KV head)
    D    head dim               E    hidden size            F    MLP intermediate size
    V    vocabulary             L    decoder layers         K    drafted tokens (gamma)

One KV layout everywhere: keys and values are [B, Hkv, S, D] per layer (heads-major, as
SDPA wants them; flash-attn receives a transposed view, never a copy).
"""

from triforce.runtime.allocator import ask_for_huge_pages, keep_freed_memory

keep_freed_memory()   # before the decode loop's first allocations (runtime/allocator.py)
ask_for_huge_pages()  # before torch's first allocation, where triforce is imported first
