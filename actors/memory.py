"""The host memory tier of one node, owned by one memory actor per node.

NodeMemory is the offload tier of that node (offload.tier.HostTier: named shared-memory arenas that
any process on the node maps by name, reserved up front) with its accounting, so the node has one
owner of its host memory and one account of it.

Today the tier holds the target's weights: the memory actor reads the checkpoint once per node
into an arena and returns a manifest (tensor -> offset, shape); each shard actor on that node maps
the arena and takes its tensors from it (zero-copy on CPU: pipeline stages keep views; a CUDA
shard copies them to its device). A restarted shard maps the arena again instead of reading the
disk. Mapping views is safe across a later unlink (POSIX): a shard keeps its mapping alive.
"""
from __future__ import annotations

import hashlib
import math
import secrets
from pathlib import Path

import torch
from safetensors import safe_open

from triforce.offload.tier import HostTier, owned_prefix, remove_dead_segments
from triforce.runtime.config import ModelConfig
from triforce.runtime.model import TORCH_DTYPES, Transformer, checkpoint_files

ALIGN = 64   # bytes: every tensor starts on a cache line


class NodeMemory:
    """The host tier of one node (offload.tier.HostTier: named shared-memory arenas that any
    process on the node maps by name) with its accounting and the weights published in it."""

    def __init__(self, prefix: str):
        # unique per instance: an arena leaked by a killed predecessor never collides, and is
        # removed here (its owner pid is dead) before this one allocates
        remove_dead_segments()
        self.tier = HostTier(torch.device("cpu"), prefix=owned_prefix(f"{prefix}-{secrets.token_hex(3)}"))
        self.names: dict[str, str] = {}      # key -> arena name in the tier
        self.manifests: dict[str, dict] = {}

    def create(self, key: str, nbytes: int) -> torch.Tensor:
        """A zeroed arena of nbytes for `key` (bytes, [nbytes] uint8)."""
        if key in self.names:
            raise ValueError(f"host arena {key!r} exists; free it first")
        self.names[key] = hashlib.sha1(key.encode()).hexdigest()[:10]
        return self.tier.allocate(self.names[key], (max(nbytes, 1),), torch.uint8)

    def free(self, key: str) -> None:
        self.tier.free(self.names.pop(key))
        self.manifests.pop(key, None)

    def usage(self) -> dict:
        return dict(arenas={k: self.tier.arenas[n].size for k, n in self.names.items()}, total_bytes=self.tier.bytes)

    def publish_checkpoint(self, model_dir: str, dtype: str) -> dict:
        """The checkpoint's tensors (in `dtype`) in one arena, once per node; returns the manifest
        {"arena": name, "dtype": dtype, "tensors": {name: [offset, shape]}}."""
        key = f"weights:{Path(model_dir).resolve()}:{dtype}"
        if key in self.manifests:
            return self.manifests[key]
        torch_dtype = TORCH_DTYPES[dtype]
        cfg = ModelConfig.from_dir(model_dir)
        with torch.device("meta"):
            expected = set(Transformer(cfg).state_dict())
        layout, offset, files = {}, 0, checkpoint_files(Path(model_dir))
        for path in files:   # first pass: sizes only (safetensors reads headers)
            with safe_open(str(path), framework="pt") as f:
                for name in f.keys():
                    if name in expected:
                        shape = list(f.get_slice(name).get_shape())
                        layout[name] = [offset, shape]
                        offset += -(-math.prod(shape) * torch_dtype.itemsize // ALIGN) * ALIGN
        arena = self.create(key, offset)
        for path in files:
            with safe_open(str(path), framework="pt") as f:
                for name in layout:
                    if name in f.keys():
                        off, shape = layout[name]
                        _view(arena, off, tuple(shape), torch_dtype).copy_(f.get_tensor(name).to(torch_dtype))
        self.manifests[key] = dict(prefix=self.tier.prefix, arena=self.names[key], nbytes=arena.numel(), dtype=dtype,
                                   tensors=layout)
        return self.manifests[key]

    def close(self) -> None:
        self.tier.close()
        self.names.clear()
        self.manifests.clear()


def _view(arena: torch.Tensor, offset: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """A tensor over the arena's bytes [offset, offset + its size) (no copy; offsets are ALIGNed)."""
    return arena[offset:offset + math.prod(shape) * dtype.itemsize].view(dtype).view(shape)


def model_from_manifest(manifest: dict, cfg: ModelConfig, device: torch.device):
    """A Transformer whose tensors are the arena's (views on CPU, copies on a device). Keep the
    returned SharedMemory alive as long as the model."""
    arena, shm = HostTier.attach(manifest["prefix"], manifest["arena"], (manifest["nbytes"],), torch.uint8)
    dtype = TORCH_DTYPES[manifest["dtype"]]
    state = {name: _view(arena, off, tuple(shape), dtype).to(device) for name, (off, shape) in manifest["tensors"].items()}
    with torch.device("meta"):
        model = Transformer(cfg)
    if cfg.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    missing = sorted(set(model.state_dict()) - set(state) - ({"lm_head.weight"} if cfg.tie_word_embeddings else set()))
    if missing:
        raise ValueError(f"host arena {manifest['arena']!r} lacks {len(missing)} tensor(s), e.g. {missing[:3]}")
    model.load_state_dict(state, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return model.eval().requires_grad_(False), shm


class MemoryActor:
    """Thin Ray shell over HostTier, one per node of a pipeline, pinned to its node. To wire when offload/ lands: the offloaded full cache's host arenas and the pinned
    CUDA tier are created here (create/free/usage), and shards map them as they map the weights."""

    def __init__(self, node_id: str):
        self.tier = NodeMemory(prefix=f"tf{node_id[:8]}")

    def publish_checkpoint(self, model_dir: str, dtype: str) -> dict:
        return self.tier.publish_checkpoint(model_dir, dtype)

    def create(self, key: str, nbytes: int) -> str:
        self.tier.create(key, nbytes)
        return f"{self.tier.tier.prefix}-{self.tier.names[key]}"

    def free(self, key: str) -> None:
        self.tier.free(key)

    def usage(self) -> dict:
        return self.tier.usage()

    def close(self) -> None:
        """Frees every arena (called before the actor is killed; after a crash or a ray.kill the
        next start on the node removes them: offload.tier.remove_dead_segments)."""
        self.tier.close()


def memory_actor(node_id: str):
    """A memory actor pinned to the node (owned by the caller: the coordinator, whose pipeline's
    shards on that node map its arenas; it outlives shard restarts)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return ray.remote(MemoryActor).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(node_id)
