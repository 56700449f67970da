"""Llama-family decoder (Llama 1-3, Mistral, Qwen2, SmolLM2): forward(tokens, cache) -> logits.

Module names mirror Hugging Face checkpoints (model.layers.N.self_attn.q_proj, ...), so a
checkpoint's tensors are assigned to the modules as they are: the model is built on the meta
device and loaded with load_state_dict(assign=True), with no random init and no second copy.
The model knows nothing about caches beyond the KVCache interface, nor about parallelism or
offloading (those transform a plain model).
"""
from __future__ import annotations

import json
import weakref
from pathlib import Path

import torch
import torch.nn as nn
from safetensors import safe_open

from triforce.runtime.attention import attend
from triforce.runtime.cache import KVCache
from triforce.runtime.config import ModelConfig
from triforce.runtime.errors import UserError
from triforce.runtime.ops import MAX_ROWS, Linear, rms_norm, silu_mul
from triforce.runtime.rope import Rope

TORCH_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)   # normalized in fp32 (runtime/ops.py)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.layer, self.H, self.Hkv, self.D = layer, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        E = cfg.hidden_size
        self.q_proj = Linear(E, self.H * self.D, bias=cfg.qkv_bias)
        self.k_proj = Linear(E, self.Hkv * self.D, bias=cfg.qkv_bias)
        self.v_proj = Linear(E, self.Hkv * self.D, bias=cfg.qkv_bias)
        self.o_proj = Linear(self.H * self.D, E, bias=cfg.o_bias)

    def project(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [B, T, E] -> q [B, H, T, D], k and v [B, Hkv, T, D] (k before RoPE): one matmul once
        fuse_projections has run, three on the checkpoint's own modules."""
        B, T, _ = x.shape
        if hasattr(self, "qkv_proj"):
            q, k, v = self.qkv_proj(x).split((self.H * self.D, self.Hkv * self.D, self.Hkv * self.D), -1)
        else:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return (q.view(B, T, self.H, self.D).transpose(1, 2),           # [B, H, T, D]
                k.view(B, T, self.Hkv, self.D).transpose(1, 2),         # [B, Hkv, T, D]
                v.view(B, T, self.Hkv, self.D).transpose(1, 2))         # [B, Hkv, T, D]

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: KVCache) -> torch.Tensor:
        q, k, v = self.queries(x, cos, sin)
        if hasattr(cache, "attend"):   # a cache that attends itself: packed sequences, a captured pass
            out = cache.attend(self.layer, q, k, v)                    # [B, T, H, D]
        else:
            k, v = cache.update(self.layer, q, k, v)                   # [B, Hkv, S, D]
            out = attend(q, k, v)                                      # [B, T, H, D]
        return self.output(out)

    def queries(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """x [B, T, E] -> q [B, H, T, D] after RoPE, k and v [B, Hkv, T, D] (k before): the part
        before attention (a pass replayed in pieces stops here: runtime/graphs.py)."""
        q, k, v = self.project(x)
        return Rope.rotate(q, cos, sin), k, v

    def output(self, out: torch.Tensor) -> torch.Tensor:
        """Attention's out [B, T, H, D] -> [B, T, E]: the part after it."""
        B, T = out.shape[:2]
        return self.o_proj(out.reshape(B, T, self.H * self.D))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        E, F_ = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = Linear(E, F_, bias=cfg.mlp_bias)
        self.up_proj = Linear(E, F_, bias=cfg.mlp_bias)
        self.down_proj = Linear(F_, E, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "gate_up_proj"):                              # fused: one [E] -> [2F] matmul
            gate, up = self.gate_up_proj(x).chunk(2, dim=-1)           # each [B, T, F]
        else:
            gate, up = self.gate_proj(x), self.up_proj(x)
        return self.down_proj(silu_mul(gate, up))                      # [B, T, F] -> [B, T, E]


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg, layer)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, cos, sin, cache):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return self.feed_forward(x)

    def feed_forward(self, x):
        """The residual stream after attention -> after the MLP (x [B, T, E])."""
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        # no random init (the checkpoint fills it): nn.Embedding's normal_ on the meta device imports
        # torch's compiler stack, 1.5 s of every start-up
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size,
                                         _weight=torch.empty(cfg.vocab_size, cfg.hidden_size))
        self.layers = nn.ModuleList(DecoderLayer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class Transformer(nn.Module):
    counts_rows = True  # forward(last_only=n) returns the last n rows (the Ray shards' proxy returns 1 or all)

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.model = Backbone(cfg)
        self.lm_head = Linear(cfg.hidden_size, cfg.vocab_size, bias=False)

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    def rope(self, run_length: int) -> Rope:
        """RoPE tables for a run of `run_length` positions (prompt + new tokens)."""
        return Rope(self.cfg, run_length, self.device, self.dtype)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache, last_only: int = False) -> torch.Tensor:
        """tokens [B, T] -> logits [B, R, V] float32 for the last R positions only.

        last_only is a row count (the name is the wire contract of the shard actors, which pass it
        through): False/0 = every position (R = T); True/1 = the last one, as prefill wants;
        n = the last n, as a verify pass wants (Level.feed's keep_last); a tensor of row indices
        picks each sequence's rows of a packed pass (runtime/cache_packed.py). The head is V wide
        (49152 x 576 for SmolLM2: a fifth of the target's weights, two thirds of its drafter's), so
        rows nobody reads are skipped."""
        return self.logits(tokens, cache, last_only)

    def logits(self, tokens: torch.Tensor, cache: KVCache, last_only: int = False) -> torch.Tensor:
        """forward() without inference mode, for training (distillation) through autograd."""
        cos, sin = cache.begin(tokens.shape[1])
        x = self.model.embed_tokens(tokens)                            # [B, T, E]
        plan = None if torch.is_grad_enabled() else decoder_plan(self)
        if plan is not None and tokens.numel() > MAX_ROWS and not plan_kernels()[0].has_avx512_bf16():
            plan = None   # AVX2 builds: prefill chunks run faster on torch's fp32 GEMM and flash kernel
        slots = cache.slots() if plan is not None and hasattr(cache, "slots") else None
        packed = cache.slots_each() if plan is not None and hasattr(cache, "slots_each") else None
        if slots is not None:   # the same kernels in the same order, in one native call
            x = plan.run(x, cos, sin, *slots)                          # [B, T, E]
        elif packed is not None:   # several sequences' new tokens, each with its own cache (cache_packed.py)
            k, v, starts, last_query = map(list, zip(*packed))
            x = plan.run_packed(x, cos, sin, k, v, starts, cache.sizes, last_query)   # [1, ΣT, E]
        else:
            for layer in self.model.layers:
                x = layer(x, cos, sin, cache)
        cache.end()
        return self.head(x, last_only)

    def head(self, x: torch.Tensor, last_only=False) -> torch.Tensor:
        """The last layer's x [B, T, E] -> logits [B, R, V] float32 of the rows last_only picks."""
        if isinstance(last_only, torch.Tensor):   # the rows' indices (a packed pass: PackedCache.rows)
            x = x[:, last_only]                                        # [B, R, E]
        elif 0 < int(last_only) < x.shape[1]:
            x = x[:, -int(last_only):]                                 # [B, R, E]
        return self.lm_head(self.model.norm(x)).float()                # [B, R, V]


def checkpoint_files(model_dir: Path) -> list[Path]:
    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return [model_dir / n for n in names]
    files = sorted(model_dir.glob("*.safetensors"))
    if not files:
        found = ", ".join(sorted(p.name for p in model_dir.iterdir())[:8])
        raise UserError(f"{str(model_dir)!r} has no *.safetensors weights (found: {found}); "
                        "convert the checkpoint to safetensors (save_pretrained(..., safe_serialization=True))")
    return files


def load_model(model_dir: str | Path, dtype: str = "fp32", device: str | torch.device = "cpu",
               cfg: ModelConfig | None = None) -> Transformer:
    """Builds the model on the meta device and assigns the checkpoint's tensors to it."""
    model_dir = Path(model_dir)
    cfg = cfg or ModelConfig.from_dir(model_dir)
    torch_dtype, device = TORCH_DTYPES[dtype], torch.device(device)
    with torch.device("meta"):
        model = Transformer(cfg)
    expected = set(model.state_dict())
    state = {}
    for path in checkpoint_files(model_dir):
        with safe_open(str(path), framework="pt", device=str(device)) as f:
            for name in f.keys():
                if name in expected:  # skips e.g. rotary inv_freq buffers some exports carry
                    state[name] = f.get_tensor(name).to(torch_dtype)
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
        expected.discard("lm_head.weight")
    missing = sorted(expected - set(state))
    if missing:
        raise UserError(f"checkpoint {str(model_dir)!r} lacks {len(missing)} tensor(s), e.g. {missing[:3]}; "
                        "is it a complete Llama-family checkpoint?")
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval().requires_grad_(False)


def _fused(parts: list[nn.Linear]) -> Linear:
    """One Linear computing the concatenation of `parts`' outputs (same input)."""
    weight = torch.cat([p.weight for p in parts])                      # [sum(out), in]
    bias = torch.cat([p.bias for p in parts]) if parts[0].bias is not None else None
    fused = Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    fused.weight = nn.Parameter(weight, requires_grad=False)
    if bias is not None:
        fused.bias = nn.Parameter(bias, requires_grad=False)
    return fused


def fuse_projections(model: Transformer) -> Transformer:
    """Fewer, larger matmuls per layer (a transform of a loaded model, in place): q/k/v become one
    qkv_proj [E] -> [(H + 2 Hkv) D] and gate/up one gate_up_proj [E] -> [2F]; 7 matmuls per layer
    become 4. Same arithmetic per output element, so logits equal the unfused model's up to the
    matmul kernel's blocking. State-dict names change (qkv_proj, gate_up_proj): fuse after loading,
    and after sharding (parallel.apply_tp slices the checkpoint's q/k/v and gate/up), never before
    exporting a checkpoint."""
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        if hasattr(attn, "q_proj"):
            attn.qkv_proj = _fused([attn.q_proj, attn.k_proj, attn.v_proj])
            del attn.q_proj, attn.k_proj, attn.v_proj
        if hasattr(mlp, "gate_proj"):
            mlp.gate_up_proj = _fused([mlp.gate_proj, mlp.up_proj])
            del mlp.gate_proj, mlp.up_proj
    return model


_PLANS: "weakref.WeakKeyDictionary[Transformer, object]" = weakref.WeakKeyDictionary()


def decoder_plan(model: Transformer):
    """layer_cpu.DecoderPlan over `model`'s layers (built once per model, kept outside it so that
    deep copies of the model stay plain), or None where its layers do not take the one-call path:
    not on a CPU with the native kernels, not bf16 or fp32, projections not fused, or a linear
    that is neither packed nor native int8/int4 (tensor-parallel shards, streamed weights)."""
    if model not in _PLANS:
        _PLANS[model] = _build_plan(model) or False
    return _PLANS[model] or None


def plan_kernels():
    """(layer, attention, quant) native modules when a bf16 or fp32 model's decoder plan can run on
    this CPU (quant may be None: only quantized linears need it), else None. Ask only for a CPU
    model: asking builds the CPU kernels (a GPU run must never compile them)."""
    from triforce.runtime import native
    layer_k, attention_k = native.layer_cpu(), native.attention_cpu()
    if layer_k is None or attention_k is None or not (layer_k.has_avx512_bf16() or attention_k.has_avx2()):
        return None
    return layer_k, attention_k, native.quant_cpu()


def _build_plan(model: Transformer):
    from triforce.runtime.ops import PackedLinear
    from triforce.runtime.quant import Int4Linear, Int8Linear
    if model.dtype not in (torch.bfloat16, torch.float32) or model.device.type != "cpu":
        return None    # before any native module is asked for: a GPU run never compiles the CPU kernels
    kernels = plan_kernels()
    if kernels is None:
        return None
    layer_k, attention_k, quant_k = kernels

    def spec(linear):
        bias = linear.bias
        if isinstance(linear, PackedLinear):
            return (0, linear.packed, None, bias, linear.out_features)
        if isinstance(linear, Int8Linear) and linear.native and quant_k is not None:
            return (1, linear.packed, linear.scales.float(), bias, linear.out_features)
        if isinstance(linear, Int4Linear) and linear.native and quant_k is not None:
            return (2, linear.packed, None, bias, linear.out_features)
        return None

    norm1, norm2, linears, eps = [], [], [], set()
    for layer in model.model.layers:
        if type(layer) is not DecoderLayer:   # e.g. offload.weights.StreamedLayer (weights arrive per pass)
            return None
        attn, mlp = layer.self_attn, layer.mlp
        if not hasattr(attn, "qkv_proj") or not hasattr(mlp, "gate_up_proj"):
            return None
        specs = [spec(m) for m in (attn.qkv_proj, attn.o_proj, mlp.gate_up_proj, mlp.down_proj)]
        if None in specs:
            return None
        linears += specs
        norm1.append(layer.input_layernorm.weight)
        norm2.append(layer.post_attention_layernorm.weight)
        eps |= {layer.input_layernorm.eps, layer.post_attention_layernorm.eps}
    if len(eps) != 1:
        return None
    cfg = model.cfg
    return layer_k.DecoderPlan(norm1, norm2, eps.pop(), linears, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                               cfg.head_dim ** -0.5, attention_k.attend_ptr,
                               getattr(quant_k, "int8_linear_ptr", None), getattr(quant_k, "int4_linear_ptr", None))
