"""`triforce bench --suite passes`: one forward pass of each level, timed against its roofline.

For each context S and each pass length T (1..16 by default), the three levels of `triforce` as
the runtime builds them (Engine.build_stack):
  target     the target on its full cache of S tokens
  retrieval  the target on the retrieval cache (the budget, selected from that full cache)
  drafter    the drafter on its StreamingLLM window (sinks + window)
A pass feeds T tokens and computes the T rows of logits a verify pass needs; the cache is rolled
back after each pass (crop is O(1)), so every repeat sees the same S.

Roofline of a pass = max(bytes / read bandwidth, FLOPs / matmul peak), both measured here:
  bytes = every weight matrix once + the KV the level attends to (L * 2 * Hkv * D * S_level * dtype)
  FLOPs = 2 * (matmul parameters, head included) * T  +  4 * L * H * D * S_level * T (QK^T and PV)
The full cache is filled with random K/V (attention's cost does not depend on the values), so a
32K context needs no 32K prefill; the tokens fed are the prompt's (`--prompt-file`, or the corpus).

The read bandwidth is probed once at the start (the roofline's figure), and again just before and
just after each row's passes (`paired_read_gbs`, their mean; `x_roofline_paired`, the row's
median against the roofline at that bandwidth): on a shared host whose bandwidth drifts within a
run, the paired ratio is what the pass made of the bandwidth it had. (Not a probe between repeats:
reading the probe's buffer would evict what consecutive passes, as in decoding, find in the caches.)

Where a level runs its decoder layers in one native call (a CPU with the native kernels), each row
also has `stages_ms`: the layers' wall time per pass by stage (norms, qkv, attention, o, gate_up,
silu_mul, down; DecoderPlan.set_timing), so a pass far from its roofline says which part is.
"""
from __future__ import annotations

import argparse
import statistics

import torch

from triforce.runtime.bench import plots
from triforce.runtime.bench.measure import interleaved, pass_cost, timed
from triforce.runtime.probes import read_bandwidth_gbs
from triforce.runtime.bench.registry import register
from triforce.runtime.bench.report import fmt, markdown_table
from triforce.runtime.bench.suites import base_run, prompt_ids
from triforce.runtime.engine import Engine, rebuild_retrieval
from triforce.runtime.model import decoder_plan
from triforce.runtime.errors import UserError
from triforce.runtime.graphs import GraphedForward, whole_tokens

LEVELS = ("target", "retrieval", "drafter")


def matmul_peak_gflops(dtype: torch.dtype, device: torch.device = torch.device("cpu"), repeats: int = 5) -> float:
    """GFLOP/s of a large square matrix product in `dtype` on `device` (the compute roof). bf16 on a
    CPU without bf16 instructions (ops.cpu_bf16: AVX2) is timed in fp32, which the kernels there
    compute in (torch's bf16 GEMM runs at ~0.3-1 GFLOP/s there: no roof, and minutes to time)."""
    from triforce.runtime.ops import cpu_bf16
    if device.type == "cpu" and dtype == torch.bfloat16 and not cpu_bf16():
        dtype = torch.float32
    size = 8192 if device.type == "cuda" else 2048
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    best = min(interleaved({"matmul": timed(lambda: a @ b, device)}, repeats)["matmul"])  # 1 warm-up: thread pool, kernel choice
    return 2 * size ** 3 / best / 1e9


def fill_full_cache(cache, S: int, seed: int = 0) -> None:
    """Random K/V at positions [0, S) of every layer, drawn where the cache lives (timing only:
    values do not change the cost)."""
    g = torch.Generator(cache.k.device).manual_seed(seed)
    for layer in range(cache.k.shape[0]):
        k, v = cache.storage(layer)                                   # [B, Hkv, capacity, D]
        k[:, :, :S].normal_(generator=g)
        v[:, :, :S].normal_(generator=g)
    cache.last_query.normal_(generator=g)
    cache.length = S


def time_pass(level, tokens: list[int], repeats: int) -> tuple[list[float], dict | None]:
    """Seconds of `repeats` T-token passes (after two warm-ups), each rolled back after, and where
    the decoder layers' time went: {stage: ms per pass} where the level runs its layers in one
    native call (model.decoder_plan; the warm-ups counted too), else None."""
    x = torch.tensor([tokens], device=level.model.device)            # [1, T]
    n = level.cache.get_seq_length()
    forward = timed(lambda: level.model(x, level.cache), x.device)  # [1, T, V]: T rows, as verify needs
    plan = decoder_plan(level.model) if level.model.device.type == "cpu" else None

    def one_pass() -> float:
        seconds = forward()
        level.cache.crop(n)                                           # rolled back, untimed
        return seconds

    if plan is None:
        return interleaved({"pass": one_pass}, repeats, warmup=2)["pass"], None
    plan.set_timing(True)
    try:
        seconds = interleaved({"pass": one_pass}, repeats, warmup=2)["pass"]
        return seconds, {name: round(1000 * s, 3) for name, s in plan.stage_seconds()}
    finally:
        plan.set_timing(False)


def time_graph_pass(level, tokens: list[int], repeats: int, capture: bool | None = None) -> list[float] | str:
    """Seconds of the same pass replayed as the runtime replays the level's passes
    (runtime/graphs.py: inputs at fixed addresses; a lower level's passes and the target's 1-token
    ones whole, attention over the whole buffer under a mask; the target's longer ones in pieces
    around its attention), or why capture failed. capture=False: the static pass run eagerly (the
    CPU tests)."""
    x = torch.tensor([tokens], device=level.model.device)            # [1, T]
    n = level.cache.get_seq_length()
    forward = GraphedForward(level.model, level.cache, capture=capture, whole_tokens=whole_tokens(level.role))
    replay = timed(lambda: forward(x, level.cache, last_only=x.shape[1]), x.device)

    def one_pass() -> float:
        seconds = replay()
        level.cache.crop(n)                                           # rolled back, untimed
        return seconds

    forward.prime(x, level.cache, last_only=x.shape[1])
    if forward.failed:
        return forward.failed
    return interleaved({"graph": one_pass}, repeats, warmup=2)["graph"]


def built_levels(engine: Engine, run, ids: list[int], S: int) -> dict:
    """The triforce levels of `run` over a context of S tokens, each ready for a pass."""
    stack, _ = engine.build_stack(run, S + max(run.gammas[1], 64) + 2)
    drafter, middle, target = stack
    fill_full_cache(target.cache, S)
    target.cached = ids[:S]
    rebuild_retrieval(middle, target, S)
    window = min(S, drafter.cache.sinks + drafter.cache.window)      # as a run over S tokens holds
    drafter.feed(ids[:window])                                        # real tokens
    drafter.commit(ids[:window])
    return dict(target=target, retrieval=middle, drafter=drafter)


@torch.inference_mode()
def suite_passes(args: argparse.Namespace) -> dict:
    run = base_run(args, mode="triforce", temperature=0.0)
    engine = Engine(run)
    dtype, device = engine.model.dtype, engine.device
    megabytes = max(args.bandwidth_mb, 8192) if device.type == "cuda" else args.bandwidth_mb  # far beyond the L2
    bandwidth = read_bandwidth_gbs(megabytes=megabytes, device=device)
    # the paired probes' buffer: past the caches (a GPU's L2 holds tens of MB), small beside the levels' memory
    paired_mb = min(megabytes, 512 if device.type == "cuda" else 2048)
    probe_buffer = torch.ones(paired_mb * 2**20 // 4, dtype=torch.float32, device=device)
    probe = timed(probe_buffer.sum, device)
    peak = matmul_peak_gflops(dtype, device)
    print(f"[passes] {device}: read bandwidth {bandwidth:.1f} GB/s, matmul peak {peak:.0f} GFLOP/s ({dtype} passes)", flush=True)
    graphs = getattr(args, "cuda_graph", False)
    if graphs and device.type != "cuda":
        raise UserError(f"--cuda-graph needs a CUDA device; this run is on {device}")
    contexts = [int(c) for c in args.contexts if c != "max"]
    need = max(contexts) + max(args.pass_tokens) + 66
    if need > engine.cfg.max_context:
        raise UserError(f"context {max(contexts)} needs {need} positions, more than the model's "
                        f"{engine.cfg.max_context}; pass --rope-scaling yarn:{-(-need // engine.cfg.max_context) * 2}")
    ids = prompt_ids(engine, args, max(max(contexts), max(args.pass_tokens)) + 1)
    rows = []
    for S in contexts:
        levels = built_levels(engine, run, ids, S)
        ar_like = {}
        for name in args.levels:
            level = levels[name]
            kv_tokens = level.cache.length  # the slots a pass attends to
            for T in args.pass_tokens:
                tokens = ids[S - T + 1:S + 1] if S >= T else ids[:T]
                before = probe()
                seconds, stages = time_pass(level, tokens, args.repeats)
                paired = probe_buffer.numel() * 4 / ((before + probe()) / 2) / 1e9   # GB/s around the row
                ms = 1000 * statistics.median(seconds)
                nbytes, flops = pass_cost(level.model, kv_tokens, T)
                roof = 1000 * max(nbytes / (bandwidth * 1e9), flops / (peak * 1e9))
                roof_paired = 1000 * max(nbytes / (paired * 1e9), flops / (peak * 1e9))
                ar_like.setdefault(name, ms)
                row = dict(context=S, level=name, T=T, kv_tokens=kv_tokens, ms=round(ms, 3),
                           bytes=nbytes, flops=flops, gb_per_s=round(nbytes / ms / 1e6, 2),
                           gflop_per_s=round(flops / ms / 1e6, 1), roofline_ms=round(roof, 3),
                           memory_floor_ms=round(1000 * nbytes / (bandwidth * 1e9), 3),
                           x_roofline=round(ms / roof, 2), x_t1=round(ms / ar_like[name], 2),
                           paired_read_gbs=round(paired, 2), x_roofline_paired=round(ms / roof_paired, 2),
                           ms_all=[round(1000 * t, 3) for t in seconds])   # every repeat: a noisy host's spread
                if stages is not None:   # the decoder layers' stages, ms per pass (the rest: embedding, head, Python)
                    row["stages_ms"] = stages
                if graphs:
                    replayed = time_graph_pass(level, tokens, args.repeats)
                    row["graph_ms"] = replayed if isinstance(replayed, str) else \
                        round(1000 * statistics.median(replayed), 3)
                rows.append(row)
                print(table_passes(dict(rows=[row])).splitlines()[-1], flush=True)
                if stages is not None:
                    print(f"[passes] {name} T={T}: layers' stages (ms per pass) "
                          + ", ".join(f"{k} {v:.2f}" for k, v in stages.items()), flush=True)
        del levels
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the next context's cache is larger: give the blocks back
    return dict(suite="passes", device=str(device), dtype=str(dtype).removeprefix("torch."),
                read_bandwidth_gbs=round(bandwidth, 2), matmul_peak_gflops=round(peak, 1), budget=run.retrieval_budget,
                draft_window=run.draft_sinks + run.draft_window, repeats=args.repeats,
                prompt=args.prompt_file or args.corpus, rows=rows)


def table_passes(report: dict) -> str:
    graphs = any("graph_ms" in r for r in report["rows"])
    body = [[str(r["context"]), r["level"], str(r["kv_tokens"]), str(r["T"]), fmt(r["ms"], ".2f"),
             fmt(r["gb_per_s"], ".1f"), fmt(r["gflop_per_s"], ".0f"), fmt(r["roofline_ms"], ".2f"),
             fmt(r["x_roofline"], ".2f"), fmt(r.get("paired_read_gbs"), ".1f"), fmt(r.get("x_roofline_paired"), ".2f"),
             fmt(r["x_t1"], ".2f")]
            + ([graph_cell(r.get("graph_ms"))] if graphs else []) for r in report["rows"]]
    table = markdown_table(["context", "level", "KV tokens", "T", "ms", "GB/s", "GFLOP/s", "roofline ms",
                            "x roofline", "paired GB/s", "x roofline (paired)", "x T=1"]
                           + (["CUDA graph ms"] if graphs else []), body)
    if "read_bandwidth_gbs" in report:
        table += (f"\n\nRoofline = max(bytes / {report['read_bandwidth_gbs']} GB/s, FLOPs / "
                  f"{report['matmul_peak_gflops']} GFLOP/s), both measured in this run on "
                  f"{report.get('device', 'cpu')}; {report['dtype']}. Paired: the bandwidth read just before "
                  f"and after the row's passes (their mean), and the row against the roofline at it.")
    if "weights" in report:
        table += f" Weights: {report['weights']}."
    return table


def graph_cell(value) -> str:
    return "" if value is None else value if isinstance(value, str) else fmt(value, ".2f")


def plot_passes(report: dict, out) -> list:
    plt = plots.pyplot()
    contexts = sorted({r["context"] for r in report["rows"]})
    fig, axes = plt.subplots(1, len(contexts), figsize=plots.SIZE, squeeze=False, sharey=True)
    for S, ax in zip(contexts, axes[0]):
        for name in dict.fromkeys(r["level"] for r in report["rows"]):
            rows = [r for r in report["rows"] if r["context"] == S and r["level"] == name]
            line, = ax.plot([r["T"] for r in rows], [r["ms"] for r in rows], marker="o", label=name)
            ax.plot([r["T"] for r in rows], [r["roofline_ms"] for r in rows], linestyle="--",
                    color=line.get_color(), linewidth=0.8)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("tokens per pass (T)")
        ax.set_title(f"context {S} (dashed: roofline)", fontsize=10)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("ms per pass")
    axes[0][0].legend(fontsize=8)
    return [plots.save(fig, out / "passes_ms.png")]


register("passes", table=table_passes, plots=plot_passes,
         help="one T-token pass per level (target/full, target/retrieval, drafter) against its roofline")(suite_passes)
