"""`triforce plan`: where the weights and the KV cache go on this machine, and what it will cost.

From a model's config.json, a context length and a machine (GPUs through NVML, or given by flags;
CPU-only machines through psutil), it places:
    weights      on the device if they fit beside the retrieval cache and the drafter, else the
                 decoder layers go to the host tier and stream one layer ahead
    full KV      `on_chip_layers` layers on the device, the rest in the host tier, streamed per layer
    retrieval    budget 4096 when the KV is on the device, 8192–12288 when it is offloaded (the
                 paper's choice: a verify pass is expensive, so a better middle level pays)
    γ2           the one minimizing the predicted time per token
and predicts the decode time per token of `ar` and `triforce` with a memory-bound cost model:

    layer pass   max(device reads / device bandwidth, host-tier reads / link bandwidth) + launch overhead
                 (the two overlap: layer i+1 streams in while layer i computes)
    E(α, γ)      = (1 - α^(γ+1)) / (1 - α), tokens a round commits at per-token acceptance α
    ar           = one full pass
    triforce     = (full pass + γ2 / E(α1, γ1) · (γ1 · drafter pass + middle pass)) / E(α2, γ2)

Decode at T ≤ 16 tokens per pass is memory-bound on GPUs, so arithmetic is not modelled; on CPUs
it is not (see docs/BENCHMARKS.md), which the printed notes say. Acceptance rates come from a
previous run's `--json` stats (`--stats`) or flags; the defaults are the paper's (α2 0.9, α1 0.35).
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

from triforce.runtime.gamma import expected_tokens
from triforce.runtime.config import ModelConfig, RunConfig, read_config_json, model_config_from_dict
from triforce.runtime.drafter import default_drafter_dir
from triforce.runtime.errors import UserError
from triforce.runtime.placement import Placement
from triforce.runtime.probes import GB, PCIE_GBS_PER_LANE, cpu_read_bandwidth, h2d_bandwidth, host_memory, nvml_gpus

GIB = 2**30
LINK_EFFICIENCY = 0.8       # achievable share of the PCIe line rate when not measured (DMA from page-locked memory)
DEVICE_RESERVE = 1.5 * GIB  # per GPU: CUDA context, allocator slack, activations of a prefill chunk
# Issuing a pass's kernels from Python (eager, no CUDA graphs) on a GPU: one H200 host, torch 2.11,
# measured by `bench --suite passes` (docs/BENCHMARKS.md "GPU, round 20"): a 32-layer pass 18-22 ms
# however small its reads (the middle level's 3.5 ms of HBM traffic included), a 2-layer one 1.4-1.6 ms;
# replayed from a CUDA graph the same passes took 6.5 and 0.23 ms. The GPU runs while the host issues,
# so a pass costs the larger of the two, not their sum.
ISSUE_S_PER_LAYER = 0.55e-3
ISSUE_S_PER_PASS = 0.4e-3   # embedding, final norm, head, the level's glue
# Every level's passes replay from CUDA graphs (runtime/graphs.py) where its weights and KV are
# resident. Replayed, a pass costs its memory time plus about 0.1 ms a layer of small kernels: on
# the H200 of round 33 (docs/BENCHMARKS.md "GPU, round 33", 1-token passes) the middle level took
# 6.86 ms over 3.65 of HBM traffic, the target at 32K 10.1 over 6.7-7.1 and at 120K 20.2 over
# 17.1-18.1 (3.1-3.4 ms above, for 32 layers); the 68M drafter's 2 layers 0.27-0.29 ms.
REPLAY_S_PER_LAYER = 0.1e-3
DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2}


@dataclass(frozen=True)
class Machine:
    gpus: int                    # devices the target is split over (tensor parallel); 0 = CPU only
    device_memory: float         # bytes per device usable by us (CPU only: available RAM)
    device_bandwidth: float      # bytes/s a device reads its own memory
    link_bandwidth: float        # bytes/s host tier -> one device (CPU only: memcpy)
    host_memory: float           # bytes of host RAM for the host tier
    description: str = ""        # what was found, for the printout
    notes: tuple[str, ...] = ()  # what could not be read, what was assumed

    @property
    def cpu_only(self) -> bool:
        return self.gpus == 0


@dataclass(frozen=True)
class Plan:
    context: int                 # prompt + new tokens the caches hold
    on_chip_layers: int          # full-KV layers on the device (== L: nothing offloaded)
    offload_weights: bool        # decoder-layer weights in the host tier
    retrieval_budget: int        # middle-level KV budget in tokens
    gamma2: int                  # tokens proposed per round to the full target
    ar_ms: float                 # predicted decode time per token, autoregressive
    triforce_ms: float           # predicted decode time per token, TriForce
    device_bytes: dict = field(default_factory=dict)  # what occupies the device memory (all devices)
    host_bytes: dict = field(default_factory=dict)    # what occupies the host tier
    notes: tuple[str, ...] = ()

    @property
    def speedup(self) -> float:
        return self.ar_ms / self.triforce_ms


# ---- the model's sizes --------------------------------------------------------------------------

def layer_weight_bytes(cfg: ModelConfig, dtype_bytes: int) -> int:
    E, F, H, Hkv, D = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    return dtype_bytes * (E * (H + 2 * Hkv) * D + H * D * E + 3 * E * F + 2 * E)


def outer_weight_bytes(cfg: ModelConfig, dtype_bytes: int) -> int:
    """Embedding, final norm and lm_head (one matrix when tied)."""
    matrices = 1 if cfg.tie_word_embeddings else 2
    return dtype_bytes * (matrices * cfg.vocab_size * cfg.hidden_size + cfg.hidden_size)


def kv_layer_bytes(cfg: ModelConfig, dtype_bytes: int, tokens: int) -> int:
    return cfg.kv_bytes_per_token(dtype_bytes) // cfg.num_layers * tokens


# ---- the cost model -----------------------------------------------------------------------------

def pass_seconds(cfg: ModelConfig, m: Machine, dtype_bytes: int, kv_tokens: int, offloaded_kv_layers: int,
                 weights_offloaded: bool, replayed: bool = False) -> float:
    """One forward pass over a cache of kv_tokens, split over m.gpus devices: on a GPU the larger of
    its memory time and the host's time to issue its kernels (issue_seconds), or for a pass
    replayed from a CUDA graph its memory time plus its small kernels' (replay_seconds)."""
    ways = max(1, m.gpus)
    w, kv = layer_weight_bytes(cfg, dtype_bytes) / ways, kv_layer_bytes(cfg, dtype_bytes, kv_tokens) / ways
    total = outer_weight_bytes(cfg, dtype_bytes) / m.device_bandwidth  # replicated: each device reads it
    for layer in range(cfg.num_layers):
        kv_off = layer >= cfg.num_layers - offloaded_kv_layers
        streamed = (w if weights_offloaded else 0) + (kv if kv_off else 0)
        device_reads = w + kv  # streamed tensors are read again from their device slot
        total += max(device_reads / m.device_bandwidth, streamed / m.link_bandwidth)
    return total + replay_seconds(cfg, m) if replayed else max(total, issue_seconds(cfg, m))


def issue_seconds(cfg: ModelConfig, m: Machine) -> float:
    """Host time to issue one pass's kernels on a GPU (each tensor-parallel shard's process issues
    its own, in parallel); 0 on a CPU, where the pass is one native call."""
    return 0.0 if m.cpu_only else ISSUE_S_PER_PASS + cfg.num_layers * ISSUE_S_PER_LAYER


def replay_seconds(cfg: ModelConfig, m: Machine) -> float:
    """What a pass replayed from a CUDA graph costs on a GPU beyond its memory time; 0 on a CPU."""
    return 0.0 if m.cpu_only else cfg.num_layers * REPLAY_S_PER_LAYER


def predict(cfg: ModelConfig, m: Machine, dtype_bytes: int, context: int, on_chip: int, weights_offloaded: bool,
            budget: int, gamma1: int, gamma2: int, alpha1: float, alpha2: float, draft: ModelConfig | None
            ) -> tuple[float, float]:
    """(ar, triforce) seconds per token."""
    offloaded = cfg.num_layers - on_chip
    full = pass_seconds(cfg, m, dtype_bytes, context, offloaded, weights_offloaded,
                        replayed=not weights_offloaded and not offloaded)   # a cache with slots only
    middle = pass_seconds(cfg, m, dtype_bytes, budget, 0, weights_offloaded, replayed=not weights_offloaded)
    drafter = pass_seconds(draft, dataclasses.replace(m, gpus=1), dtype_bytes, 256, 0, False, replayed=True) \
        if draft else 0.0
    rounds = gamma2 / expected_tokens(alpha1, gamma1)     # middle-level rounds to propose gamma2 tokens
    per_round = full + rounds * (gamma1 * drafter + middle)
    return full, per_round / expected_tokens(alpha2, gamma2)


def plan(cfg: ModelConfig, m: Machine, dtype: str, context: int, gamma1: int = 2, alpha1: float = 0.35,
         alpha2: float = 0.9, draft: ModelConfig | None = None, budget: int | None = None,
         generated: int = 256, weights_offloaded: bool | None = None) -> Plan:
    """Places weights and KV within m's memory and picks the budget and γ2 with the least predicted time.
    weights_offloaded: where the weights already are (a loaded engine), instead of choosing it."""
    b = DTYPE_BYTES[dtype]
    ways = max(1, m.gpus)
    usable = ways * m.device_memory - (0 if m.cpu_only else ways * DEVICE_RESERVE)
    weights = cfg.num_layers * layer_weight_bytes(cfg, b)
    outer = outer_weight_bytes(cfg, b) * ways
    drafter = 0 if draft is None else (draft.num_layers * (layer_weight_bytes(draft, b) + kv_layer_bytes(draft, b, 512))
                                       + outer_weight_bytes(draft, b))
    kv_layer = kv_layer_bytes(cfg, b, context)
    notes = list(m.notes)
    if not m.cpu_only:
        notes.append("every level's passes replay from CUDA graphs where its weights and KV are resident (about "
                     f"0.1 ms a layer above their memory time, an H200's, round 33); a level whose weights or KV "
                     f"stream is issued eagerly from Python: about {1000 * issue_seconds(cfg, m):.0f} ms a pass "
                     "(round 20) however little it reads")
    best = None
    budgets = [budget] if budget else [4096, 8192, 12288]
    for candidate in budgets:
        retrieval = cfg.num_layers * kv_layer_bytes(cfg, b, min(candidate, context) + generated)
        fixed = outer + drafter + retrieval
        offload_weights = fixed + weights + cfg.num_layers * kv_layer > usable and fixed + weights + 2 * kv_layer > usable
        if weights_offloaded is not None:
            offload_weights = weights_offloaded
        resident_weights = 2 * layer_weight_bytes(cfg, b) if offload_weights else weights
        room = usable - fixed - resident_weights
        if room < 0:
            continue
        if cfg.num_layers * kv_layer <= room:
            on_chip = cfg.num_layers
        else:
            on_chip = max(0, min(cfg.num_layers - 1, int((room - 2 * kv_layer) // kv_layer)))
            if room < 2 * kv_layer:
                continue  # not even the two streaming buffers fit
        if on_chip == cfg.num_layers and candidate != budgets[0] and budget is None:
            continue  # the bigger budgets are for the offloaded setting
        offloaded_kv = (cfg.num_layers - on_chip) * kv_layer
        host = offloaded_kv + (weights if offload_weights else 0)
        if host > m.host_memory:
            continue
        for gamma2 in range(1, 33):
            ar, tri = predict(cfg, m, b, context, on_chip, offload_weights, min(candidate, context), gamma1, gamma2,
                              alpha1, alpha2, draft)
            if best is None or tri < best[0]:
                device = dict(weights=resident_weights + outer, drafter=drafter, retrieval_cache=retrieval,
                              full_kv_on_chip=on_chip * kv_layer,
                              streaming_buffers=(2 * kv_layer if on_chip < cfg.num_layers else 0)
                              + (2 * layer_weight_bytes(cfg, b) if offload_weights else 0))
                best = (tri, Plan(context, on_chip, offload_weights, candidate, gamma2, 1000 * ar, 1000 * tri,
                                  {k: int(v) for k, v in device.items()},
                                  dict(full_kv=int(offloaded_kv), weights=int(weights if offload_weights else 0)),
                                  tuple(notes)))
    if best is None:
        need = (weights + outer + cfg.num_layers * kv_layer) / GB
        raise UserError(f"{cfg.architecture} at context {context} needs {need:.1f} GB in all and does not fit this "
                        f"machine ({ways} x {m.device_memory / GB:.1f} GB device, {m.host_memory / GB:.1f} GB host); "
                        "use a shorter context, a smaller dtype, or more GPUs")
    return best[1]


# ---- the machine ----------------------------------------------------------------------------------

def probe_machine(gpus: int | None = None) -> Machine:
    """GPUs through NVML (memory, PCIe generation and width, memory bus) and a measured host->device
    copy; CPU-only machines through psutil and measured memory bandwidths. Failures become notes."""
    notes: list[str] = []
    found = nvml_gpus(notes)
    if found and torch.cuda.is_available() and gpus != 0:  # gpus=0: the run is on the CPU
        n = min(len(found), gpus or len(found))
        g = found[0]
        link = h2d_bandwidth()
        if link is None:
            link = g["link_line_rate"] * LINK_EFFICIENCY
            notes.append(f"host->device bandwidth not measured; assumed {LINK_EFFICIENCY:.0%} of PCIe gen{g['pcie_gen']} "
                         f"x{g['pcie_width']}")
        return Machine(n, g["memory"], g["bandwidth"], link, host_memory(),
                       f"{n} x {g['name']} ({g['memory'] / GIB:.0f} GiB, PCIe gen{g['pcie_gen']} x{g['pcie_width']})",
                       tuple(notes))
    if found:
        why = "the run is on the CPU" if gpus == 0 else "torch has no CUDA"
        notes.append(f"NVML sees GPUs but {why}: planning for the CPU")
    import psutil
    usable, read = host_memory(), cpu_read_bandwidth()
    return Machine(0, usable, read, read / 2, usable,
                   f"CPU only ({psutil.cpu_count(logical=False)} cores, {usable / 0.8 / GIB:.1f} GiB available)",
                   tuple(notes + ["CPU-only: the host tier is the same RAM as the device tier, so offloading "
                                  "saves no memory; decode on CPUs is partly compute-bound (predictions are floors)"]))


def machine_from_flags(args) -> Machine:
    """The machine as probed, with any of --gpus/--gpu-memory-gb/--pcie-gen/... overriding it."""
    given = any(getattr(args, k) is not None for k in ("gpus", "gpu_memory_gb", "pcie_gen", "link_gbs",
                                                        "device_bandwidth_gbs"))
    if given and not (args.gpus and args.gpu_memory_gb):
        raise UserError("describing a machine by flags needs at least --gpus N and --gpu-memory-gb X")
    if not given:
        m = probe_machine()
    else:
        gen, width = args.pcie_gen or 4, args.pcie_width or 16
        link = args.link_gbs * GB if args.link_gbs else PCIE_GBS_PER_LANE[gen] * width * GB * LINK_EFFICIENCY
        notes = [] if args.link_gbs else [f"link bandwidth assumed {LINK_EFFICIENCY:.0%} of PCIe gen{gen} x{width} "
                                          f"= {link / GB:.1f} GB/s per GPU"]
        bw = (args.device_bandwidth_gbs or 1000) * GB
        if not args.device_bandwidth_gbs:
            notes.append("device memory bandwidth assumed 1000 GB/s (RTX 4090: 1008); pass --device-bandwidth-gbs")
        m = Machine(args.gpus, args.gpu_memory_gb * GIB, bw, link, (args.host_memory_gb or 128) * GIB,
                    f"{args.gpus} x GPU ({args.gpu_memory_gb} GiB, PCIe gen{gen} x{width}) (given by flags)", tuple(notes))
    if args.host_memory_gb:
        m = dataclasses.replace(m, host_memory=args.host_memory_gb * GIB)
    return m


def plan_for_run(cfg: ModelConfig, run: RunConfig, context: int, device: torch.device,
                 weights_offloaded: bool | None = None) -> Plan:
    """The plan `offload: auto` applies for an in-process run on `device`: one GPU (the engine's),
    or the CPU. weights_offloaded: the weights' placement when the flags fix it (offload_weights)."""
    m = probe_machine(1) if device.type == "cuda" else probe_machine(0)
    return plan(cfg, m, run.dtype, max(context, 1), run.gammas[0], budget=run.budget_for(context),
                weights_offloaded=weights_offloaded)


def placement_for_run(cfg: ModelConfig, run: RunConfig, device: torch.device, context: int) -> Placement:
    """The engine's Placement, resolved once before it is built: as the flags say, or for
    `offload: auto` from one plan for `context` tokens (prompt + new) on the engine's device; an
    on_chip_layers or offload_weights given beside `auto` is kept."""
    if run.offload != "auto":
        return Placement.from_flags(cfg.num_layers, str(device), run.on_chip_layers, run.offload_weights)
    p = plan_for_run(cfg, run, context, device, weights_offloaded=True if run.offload_weights else None)
    on_chip = p.on_chip_layers if run.on_chip_layers is None else min(run.on_chip_layers, cfg.num_layers)
    return Placement(str(device), cfg.num_layers, on_chip, "streamed" if p.offload_weights else "resident", context)


# ---- the command ----------------------------------------------------------------------------------

def add_plan_parser(sub) -> None:
    p = sub.add_parser("plan", help="place weights and KV for a model, a context and this machine; predict speed")
    p.add_argument("--model", help="checkpoint directory or config.json (default: the embedded SmolLM2-135M); "
                   "configs/models/ has Llama2-7B/13B-128K and Llama-3-70B configs")
    p.add_argument("--draft-model", help="drafter checkpoint directory or config.json (default: a 68M Llama drafter)")
    p.add_argument("--context", type=int, required=True, help="prompt + new tokens, e.g. 127000")
    p.add_argument("--dtype", choices=tuple(DTYPE_BYTES), help="default: fp16 on GPUs, fp32 on CPU")
    p.add_argument("--gpus", type=int, help="GPUs the target is split over")
    p.add_argument("--gpu-memory-gb", type=float, help="memory per GPU, GiB")
    p.add_argument("--pcie-gen", type=int, choices=sorted(PCIE_GBS_PER_LANE), help="PCIe generation")
    p.add_argument("--pcie-width", type=int, help="PCIe lanes per GPU (default 16)")
    p.add_argument("--link-gbs", type=float, help="measured host->device bandwidth per GPU, GB/s")
    p.add_argument("--device-bandwidth-gbs", type=float, help="GPU memory bandwidth, GB/s")
    p.add_argument("--host-memory-gb", type=float, help="host RAM for the host tier, GiB")
    p.add_argument("--gamma1", type=int, default=2)
    p.add_argument("--retrieval-budget", type=int, help="fix the budget instead of choosing it")
    p.add_argument("--acceptance", help="A1,A2: per-token acceptance drafter->middle and middle->target "
                   "(default 0.35,0.9, the paper's)")
    p.add_argument("--stats", help="a `triforce generate --json` result to take the acceptance rates from")
    p.add_argument("--json", help="write the plan to this JSON file")
    p.set_defaults(func=cmd_plan)


def _config(path: str | None, default) -> ModelConfig:
    if path is None:
        return default()
    p = Path(path).expanduser()
    if p.is_file():
        try:
            return model_config_from_dict(json.loads(p.read_text()), str(p))
        except json.JSONDecodeError as e:
            raise UserError(f"{str(p)!r} is not valid JSON ({e})") from None
    return model_config_from_dict(read_config_json(p), str(p / "config.json"))


def _default_target() -> ModelConfig:
    from triforce.runtime.assets import default_model_dir
    return ModelConfig.from_dir(default_model_dir())


def _llama_68m() -> ModelConfig:
    return model_config_from_dict(dict(architectures=["LlamaForCausalLM"], vocab_size=32000, hidden_size=768,
                                       intermediate_size=3072, num_hidden_layers=2, num_attention_heads=12,
                                       max_position_embeddings=2048))


def acceptance_from(args) -> tuple[float, float]:
    if args.stats:
        try:
            levels = json.loads(Path(args.stats).read_text())["stats"]["levels"]
            return levels["retrieval"]["acceptance"], levels["target"]["acceptance"]
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise UserError(f"--stats {args.stats!r}: expected the --json result of a triforce-mode run "
                            f"(stats.levels.retrieval/target.acceptance): {type(e).__name__} {e}") from None
    if args.acceptance:
        try:
            a1, a2 = (float(x) for x in args.acceptance.split(","))
        except ValueError:
            a1 = a2 = -1.0
        if not (0 <= a1 <= 1 and 0 <= a2 <= 1):
            raise UserError(f"--acceptance {args.acceptance!r}: expected A1,A2 with both in [0, 1], e.g. 0.35,0.9")
        return a1, a2
    return 0.35, 0.9


def cmd_plan(args) -> int:
    cfg = _config(args.model, _default_target)
    draft = _config(args.draft_model, _llama_68m if args.model else _default_drafter)
    if args.context < 1:
        raise UserError(f"--context {args.context} must be at least 1")
    m = machine_from_flags(args)
    dtype = args.dtype or ("fp32" if m.cpu_only else "fp16")
    a1, a2 = acceptance_from(args)
    p = plan(cfg, m, dtype, args.context, args.gamma1, a1, a2, draft, args.retrieval_budget)
    print(format_plan(cfg, m, dtype, p, a1, a2))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(machine=dataclasses.asdict(m), plan=dataclasses.asdict(p),
                                                   dtype=dtype, acceptance=[a1, a2]), indent=1))
    return 0


def _default_drafter() -> ModelConfig:
    return ModelConfig.from_dir(default_drafter_dir())


def format_plan(cfg: ModelConfig, m: Machine, dtype: str, p: Plan, a1: float, a2: float) -> str:
    lines = [f"machine   {m.description}",
             f"          device bandwidth {m.device_bandwidth / GB:.0f} GB/s, host->device {m.link_bandwidth / GB:.1f} GB/s"
             f" per device, host tier {m.host_memory / GIB:.0f} GiB",
             f"model     {cfg.architecture}, {cfg.num_layers} layers, {dtype}, context {p.context:,} tokens",
             f"placement weights {'host tier (streamed per layer)' if p.offload_weights else 'on the device'}; "
             f"full KV: {p.on_chip_layers} of {cfg.num_layers} layers on the device"
             + ("" if p.on_chip_layers == cfg.num_layers else f", {cfg.num_layers - p.on_chip_layers} in the host tier"),
             f"          retrieval budget {p.retrieval_budget}, gamma2 {p.gamma2}  "
             f"(flags: --on-chip-layers {p.on_chip_layers}{' --offload-weights' if p.offload_weights else ''} "
             f"--retrieval-budget {p.retrieval_budget} --gamma2 {p.gamma2})",
             "device    " + ", ".join(f"{k} {v / GB:.2f} GB" for k, v in p.device_bytes.items()),
             "host tier " + ", ".join(f"{k} {v / GB:.2f} GB" for k, v in p.host_bytes.items()),
             f"predicted ar {p.ar_ms:.1f} ms/token, triforce {p.triforce_ms:.1f} ms/token ({p.speedup:.2f}x) "
             f"at acceptance {a1:.2f} (drafter->middle), {a2:.2f} (middle->target)"]
    lines += [f"note      {n}" for n in p.notes]
    return "\n".join(lines)
