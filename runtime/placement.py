"""Where a run's pieces live (FlexLLMGen's Policy): the device(s) it computes on, where the
target's decoder-layer weights live, and how many layers keep their full KV on the device.

Resolved once, before the engine is built (offload/plan.py placement_for_run: from the flags, or
for `offload: auto` from one plan of the engine's one device), then read by whoever needs it: the
engine loads the weights and builds each request's full cache from it, and reports it as
stats["placement"]. A request may name its own on_chip_layers (for_request); nothing else moves.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

WEIGHT_PLACES = ("resident", "streamed")


@dataclass(frozen=True)
class Placement:
    device: str                  # where the target computes: cpu | cuda | cuda:N (Ray: the shards' device type)
    layers: int                  # the target's decoder layers
    on_chip_layers: int          # layers whose full KV stays on the device; the rest live in the host tier
    weights: str = "resident"    # the target's decoder-layer weights: resident | streamed (host tier, a layer ahead)
    planned_context: int | None = None  # offload auto: tokens (prompt + new) the plan placed; None: the flags did
    tp: int = 1                  # shards per pipeline stage (Ray; 1 in-process)
    pp: int = 1                  # pipeline stages (Ray; 1 in-process)

    def __post_init__(self):
        if self.weights not in WEIGHT_PLACES:
            raise ValueError(f"placement weights {self.weights!r} must be one of {', '.join(WEIGHT_PLACES)}")
        if not 0 <= self.on_chip_layers <= self.layers:
            raise ValueError(f"on_chip_layers {self.on_chip_layers} must be in [0, {self.layers}]")

    @classmethod
    def from_flags(cls, layers: int, device: str, on_chip_layers: int | None, offload_weights: bool,
                   tp: int = 1, pp: int = 1) -> "Placement":
        """As the run's flags say (on_chip_layers None or beyond the model: every layer on chip)."""
        on_chip = layers if on_chip_layers is None else min(on_chip_layers, layers)
        return cls(device, layers, on_chip, "streamed" if offload_weights else "resident", None, tp, pp)

    @property
    def weights_streamed(self) -> bool:
        return self.weights == "streamed"

    @property
    def kv_offloaded(self) -> bool:
        """Some layers' full KV lives in the host tier."""
        return self.on_chip_layers < self.layers

    @property
    def devices(self) -> int:
        """Devices the target is split over."""
        return self.tp * self.pp

    def weights_of(self, role: str) -> str:
        """Where a level's weights live: the drafter's always on the device, the target's as placed."""
        return "resident" if role == "drafter" else self.weights

    def for_request(self, on_chip_layers: int | None) -> "Placement":
        """This placement with a request's own on_chip_layers (None: the engine's)."""
        if on_chip_layers is None:
            return self
        return dataclasses.replace(self, on_chip_layers=min(on_chip_layers, self.layers))

    def stats(self, roles: dict[str, str]) -> dict:
        """stats["placement"]: the fields, and where each level's weights live ({level name: role})."""
        return dict(dataclasses.asdict(self), devices=self.devices, kv_offloaded=self.kv_offloaded,
                    level_weights={name: self.weights_of(role) for name, role in roles.items()})
