"""Weight offloading as a transform of a plain model: the decoder layers' weights move to the host
tier and stream through two device slots, one layer ahead of compute.

    layer i computes with slot i % 2      while  layer i+1's weights load into the other slot
    after the last layer                         layer 0's weights load for the next pass

The embedding, final norm and lm_head stay on the device (every pass needs them). The layers'
own parameters become views of the host tier (so state_dict() still describes the model) and each
layer runs through torch.func.functional_call with the slot's tensors; model.py knows nothing of it.
"""
from __future__ import annotations

import torch
import torch.nn as nn
from torch.func import functional_call

from triforce.offload.tier import Copier, HostTier
from triforce.runtime.model import Transformer


class WeightStreamer:
    """The layers' weights in the host tier, [L, *shape] per parameter name, and two device slots."""

    def __init__(self, layers: nn.ModuleList, tier: HostTier, copier: Copier, device: torch.device,
                 prefetch: bool = True):
        first = dict(layers[0].named_parameters())
        self.names = list(first)
        self.host = {name: tier.allocate(f"w-{name}", (len(layers), *p.shape), p.dtype) for name, p in first.items()}
        for i, layer in enumerate(layers):
            for name, p in layer.named_parameters():
                self.host[name][i].copy_(p)
        self.slots = [{name: torch.empty(p.shape, dtype=p.dtype, device=device) for name, p in first.items()}
                      for _ in range(2)]
        self.holds = [-1, -1]                 # layer whose weights each slot holds
        self.loaded = [None, None]            # events: the slot's load finished
        self.released = [None, None]          # events: compute reading the slot finished
        self.num_layers, self.copier, self.prefetch = len(layers), copier, prefetch

    def acquire(self, i: int) -> dict[str, torch.Tensor]:
        """Layer i's weights on the device (waits for their load); starts loading layer i+1."""
        self.load(i)
        self.copier.wait(self.loaded[i % 2])
        if self.prefetch and i + 1 < self.num_layers:
            self.load(i + 1)
        return self.slots[i % 2]

    def release(self, i: int) -> None:
        """Compute on layer i's slot is issued; after the last layer, layer 0 starts loading."""
        self.released[i % 2] = self.copier.record()
        if self.prefetch and i == self.num_layers - 1:
            self.load(0)

    def load(self, i: int) -> None:
        s = i % 2
        if self.holds[s] == i:
            return
        after = [e for e in (self.released[s],) if e is not None]
        if not self.prefetch:
            after = [self.copier.record()]
        for name in self.names:
            event = self.copier.copy("load_weight", self.slots[s][name], self.host[name][i], after)
        self.loaded[s], self.holds[s] = event, i


class StreamedLayer(nn.Module):
    """A decoder layer whose weights come from the streamer's slot at call time."""

    def __init__(self, inner: nn.Module, index: int, streamer: WeightStreamer):
        super().__init__()
        self.inner, self.index = inner, index
        self.streamer = [streamer]  # a list: not a submodule

    def forward(self, x, cos, sin, cache):
        streamer = self.streamer[0]
        weights = streamer.acquire(self.index)
        out = functional_call(self.inner, weights, (x, cos, sin, cache))
        streamer.release(self.index)
        return out


def offload_weights(model: Transformer, tier: HostTier, copier: Copier, device: torch.device,
                    prefetch: bool = True) -> WeightStreamer:
    """Moves `model`'s decoder-layer weights to the host tier (the rest to `device`) and makes its
    layers stream them. The model may be loaded on the CPU first, so that it need not fit the device."""
    layers = model.model.layers
    streamer = WeightStreamer(layers, tier, copier, device, prefetch)
    for i, layer in enumerate(layers):
        for name, _ in list(layer.named_parameters()):
            owner, _, leaf = name.rpartition(".")
            module = layer.get_submodule(owner) if owner else layer
            module._parameters[leaf] = nn.Parameter(streamer.host[name][i], requires_grad=False)
        layers[i] = StreamedLayer(layer, i, streamer)
    for module in (model.model.embed_tokens, model.model.norm, model.lm_head):
        module.to(device)
    if model.cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    return streamer
