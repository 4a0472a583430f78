"""The models the evaluation serves, and the band of rows a layer takes on the device.

:class:`ModelSpec` is a model's attention shape (its KV cache in bf16); :data:`MODELS` the
paper's four (§5.1). :class:`LayerBand` is what PATTON's geometry
(:class:`~patton.runtime.patton.config.Config`) and a baseline's
(:class:`~patton.runtime.baselines.geometry.Geometry`) share: each layer is a band of rows, layer
``l`` layer 0's layout ``l * rows_per_layer`` rows further down.
"""

from __future__ import annotations

from dataclasses import dataclass

from patton.runtime.errors import ConfigError
from patton.sim.device import Device

__all__ = ["ModelSpec", "MODELS", "LayerBand", "model"]


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The attention shape of a model (bf16 KV cache).

    Invariants: every field positive; ``q_heads`` is a multiple of ``kv_heads``.
    """

    name: str  # preset name
    layers: int  # transformer layers
    kv_heads: int  # KV heads (== q_heads for MHA)
    q_heads: int  # query heads
    d_head: int  # head dimension

    def __post_init__(self) -> None:
        for f in ("layers", "kv_heads", "q_heads", "d_head"):
            v = getattr(self, f)
            if not isinstance(v, int) or v <= 0:
                raise ConfigError(f"ModelSpec.{f} must be a positive integer, got {v!r}")
        if self.q_heads % self.kv_heads:
            raise ConfigError(f"q_heads {self.q_heads} is not a multiple of kv_heads "
                              f"{self.kv_heads}")

    @property
    def mha(self) -> bool:
        """True when every query head has its own KV head."""
        return self.q_heads == self.kv_heads


#: The paper's evaluated models (Hugging Face configs).
MODELS: dict[str, ModelSpec] = {
    "llama3-8b": ModelSpec("llama3-8b", layers=32, kv_heads=8, q_heads=32, d_head=128),
    "qwen3-8b": ModelSpec("qwen3-8b", layers=36, kv_heads=8, q_heads=32, d_head=128),
    "opt-6.7b": ModelSpec("opt-6.7b", layers=32, kv_heads=32, q_heads=32, d_head=128),
    "qwen1.5-7b": ModelSpec("qwen1.5-7b", layers=32, kv_heads=32, q_heads=32, d_head=128),
}


def model(name: str) -> ModelSpec:
    """Return a preset by name (``llama3-8b``, ``qwen3-8b``, ``opt-6.7b``, ``qwen1.5-7b``)."""
    try:
        return MODELS[name]
    except KeyError:
        raise ConfigError(f"unknown model {name!r}; presets: {', '.join(MODELS)}") from None


class LayerBand:
    """What PATTON's geometry and a baseline's share: a model's layers, each a band of rows.

    A subclass has ``model``, ``device``, ``layers`` (None: all of the model's) and
    ``layer_rows`` (None: ``rows // model.layers``); layer ``l`` is layer 0's layout
    ``l * rows_per_layer`` rows further down.
    """

    __slots__ = ()
    model: ModelSpec
    device: Device
    layers: int | None
    layer_rows: int | None

    @property
    def n_layers(self) -> int:
        """Layers laid out."""
        return self.model.layers if self.layers is None else self.layers

    @property
    def rows_per_layer(self) -> int:
        """Rows of every channel given to one layer."""
        if self.layer_rows is not None:
            return self.layer_rows
        return self.device.rows // self.model.layers

    @property
    def heads(self) -> int:
        """KV heads (PATTON: head groups)."""
        return self.model.kv_heads

    @property
    def d_head(self) -> int:
        """Head dimension."""
        return self.model.d_head

    def row(self, layer: int, rel: int) -> int:
        """Return the device row of row ``rel`` of a layer's band."""
        return layer * self.rows_per_layer + rel
