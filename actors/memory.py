"""The host memory tier of one node, owned by one memory actor per node.

HostTier (plain Python) owns named arenas of host memory that any process on the node can map by
name, and accounts for them. On CPU an arena is a `multiprocessing.shared_memory` block; the
offload issue's pinned CUDA tier and offloaded full cache are to be placed here too (see
MemoryActor), so that the node has one owner of its host memory and one account of it.

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
from multiprocessing import resource_tracker, shared_memory
from pathlib import Path

import torch
from safetensors import safe_open

from runtime.config import ModelConfig
from runtime.model import TORCH_DTYPES, Transformer, checkpoint_files

ALIGN = 64   # bytes: every tensor starts on a cache line
_CREATED: set[str] = set()   # arenas this process created (its resource tracker owns them)


class HostArena:
    """A named block of host memory; create=True makes it, otherwise it maps an existing one."""

    def __init__(self, name: str, nbytes: int = 0, create: bool = False):
        self.shm = shared_memory.SharedMemory(name=name, create=create, size=nbytes if create else 0)
        self.name, self.nbytes, self.owner = name, self.shm.size, create
        if create:
            _CREATED.add(name)
        elif name not in _CREATED:
            # Python < 3.13 registers a mapped (not created) block with its resource tracker, which
            # would unlink it when this process exits: the owner alone decides when it goes.
            resource_tracker.unregister(self.shm._name, "shared_memory")

    def view(self, offset: int, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A tensor over the arena's bytes [offset, offset + its size) (no copy)."""
        return torch.frombuffer(self.shm.buf, dtype=dtype, count=math.prod(shape), offset=offset).view(shape)

    def release(self) -> None:
        """The owner frees the block (mappings elsewhere stay valid until they close)."""
        if self.owner:
            self.shm.unlink()


class HostTier:
    """The arenas of one node and their accounting."""

    def __init__(self, prefix: str):
        self.prefix, self.instance = prefix, secrets.token_hex(3)
        self.arenas: dict[str, HostArena] = {}
        self.manifests: dict[str, dict] = {}

    def create(self, key: str, nbytes: int) -> HostArena:
        if key in self.arenas:
            raise ValueError(f"host arena {key!r} exists ({self.arenas[key].nbytes} bytes); free it first")
        # unique per tier and key: a block leaked by a killed predecessor never collides
        name = f"{self.prefix}-{self.instance}-{hashlib.sha1(key.encode()).hexdigest()[:10]}"
        self.arenas[key] = HostArena(name, nbytes, create=True)
        return self.arenas[key]

    def free(self, key: str) -> None:
        self.arenas.pop(key).release()
        self.manifests.pop(key, None)

    def usage(self) -> dict:
        return dict(arenas={k: a.nbytes for k, a in self.arenas.items()},
                    total_bytes=sum(a.nbytes for a in self.arenas.values()))

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
        arena = self.create(key, max(offset, 1))
        for path in files:
            with safe_open(str(path), framework="pt") as f:
                for name in layout:
                    if name in f.keys():
                        off, shape = layout[name]
                        arena.view(off, tuple(shape), torch_dtype).copy_(f.get_tensor(name).to(torch_dtype))
        self.manifests[key] = dict(arena=arena.name, dtype=dtype, tensors=layout)
        return self.manifests[key]

    def close(self) -> None:
        for key in list(self.arenas):
            self.free(key)


def model_from_manifest(manifest: dict, cfg: ModelConfig, device: torch.device) -> tuple[Transformer, HostArena]:
    """A Transformer whose tensors are the arena's (views on CPU, copies on a device). Keep the
    returned arena alive as long as the model."""
    arena = HostArena(manifest["arena"])
    dtype = TORCH_DTYPES[manifest["dtype"]]
    state = {name: arena.view(off, tuple(shape), dtype).to(device) for name, (off, shape) in manifest["tensors"].items()}
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
    return model.eval().requires_grad_(False), arena


class MemoryActor:
    """Thin Ray shell over HostTier, one per node of a pipeline, pinned to its node. To wire when offload/ lands: the offloaded full cache's host arenas and the pinned
    CUDA tier are created here (create/free/usage), and shards map them as they map the weights."""

    def __init__(self, node_id: str):
        self.tier = HostTier(prefix=f"tf{node_id[:8]}")

    def publish_checkpoint(self, model_dir: str, dtype: str) -> dict:
        return self.tier.publish_checkpoint(model_dir, dtype)

    def create(self, key: str, nbytes: int) -> str:
        return self.tier.create(key, nbytes).name

    def free(self, key: str) -> None:
        self.tier.free(key)

    def usage(self) -> dict:
        return self.tier.usage()

    def close(self) -> None:
        """Frees every arena (called before the actor is killed; a crash leaves the cleanup to
        Python's resource tracker)."""
        self.tier.close()


def memory_actor(node_id: str):
    """A memory actor pinned to the node (owned by the caller: the coordinator, whose pipeline's
    shards on that node map its arenas; it outlives shard restarts)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    return ray.remote(MemoryActor).options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote(node_id)
