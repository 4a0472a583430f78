"""Which runtimes a serving run can attach, what each requires of the engine, and its capacity.

Runtimes by name (:data:`RUNTIMES`): ``gpu`` (vLLM's own cache: no runtime, no placement
constraint), then PATTON's variants (:data:`patton.runtime.patton.variants.VARIANTS`):
``patton``, ``patton-wo-cz`` (no Commit Zone) and ``patton-no-o2v`` (an O2V as wide as a VRS),
then the translated baselines (:data:`patton.runtime.baselines.BASELINES`): ``neupims``,
``attacc``, ``blockpim``, ``pimphony``. :data:`REQUIREMENTS` says what each requires of the
engine (block size, prefix caching, context limit); :func:`capacity` sizes every runtime from
one nominal memory (the 16 GiB AiM device by default).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from patton.runtime.baselines import BASELINES, Geometry
from patton.runtime.errors import PattonError
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS as PATTON_VARIANTS
from patton.runtime.patton.variants import variant as patton_variant
from patton.sim.device import DEVICE, Device

__all__ = ["RUNTIMES", "REQUIREMENTS", "Requirements", "Capacity", "capacity", "config_blocks",
           "device_bytes", "kv_bytes_per_token", "layer_config", "max_context"]

#: The runtimes a serving run can attach, by name: vLLM's own cache, PATTON's variants, then
#: the translated baselines.
RUNTIMES = ("gpu", *PATTON_VARIANTS, *BASELINES)


@dataclass(frozen=True, slots=True)
class Requirements:
    """What a runtime requires of the engine that serves it.

    ``block_size`` is the engine's block size (BlockPIM's blocks are bound to a row: 128);
    without ``prefix_caching`` the engine runs with vLLM's prefix caching off (the runtime's
    system defines none: every turn prefills its whole history); ``max_context`` (tokens) is
    the longest request the runtime can hold (None: capacity only).
    """

    name: str
    block_size: int = 16
    prefix_caching: bool = True
    max_context: int | None = None


#: Every runtime's requirements, by name.
REQUIREMENTS: dict[str, Requirements] = {
    **{name: Requirements(name) for name in ("gpu", *PATTON_VARIANTS)},
    **{b.name: Requirements(b.name, b.block_size, b.prefix_caching, b.max_context)
       for b in BASELINES.values()},
}


def max_context(variant: str, model: ModelSpec, device: Device = DEVICE) -> int | None:
    """Tokens one request of ``model`` may reach on ``variant`` (None: capacity only).

    A baseline's own limit (:data:`REQUIREMENTS`), lowered to what one channel holds where its
    system confines a request to one (NeuPIMs: 1,024 tokens for a 32-KV-head model, whose
    every token takes 16 KB per layer, on a 512 MB channel).
    """
    if variant not in RUNTIMES:
        raise ValueError(f"unknown runtime {variant!r}; known: {', '.join(RUNTIMES)}")
    if variant not in BASELINES:
        return REQUIREMENTS[variant].max_context
    b = BASELINES[variant]
    return b.context_limit(Geometry(model, device, block_size=b.block_size))


def kv_bytes_per_token(model: ModelSpec) -> int:
    """Bytes of bf16 KV cache one token takes in every layer: 2 x layers x kv_heads x d_head x 2."""
    return 2 * model.layers * model.kv_heads * model.d_head * 2


def device_bytes(device: Device = DEVICE) -> int:
    """Bytes of an AiM device: channels x banks x rows x row bytes (16 GiB for the default)."""
    return device.channels * device.banks * device.rows * device.row_bytes


@dataclass(frozen=True, slots=True)
class Capacity:
    """What a run's KV memory holds, for one variant.

    Invariants: ``num_blocks >= 2`` (vLLM's ``num_gpu_blocks``, null block included); for
    ``gpu``, ``blocks == num_blocks - 1`` and ``layer_rows`` is None; for a PIM variant,
    ``layer_rows`` rows of every channel per layer hold ``blocks`` blocks (the fewer of the
    O1K and O1V positions of its KRSs and VRSs, after the ``crs_rows`` Commit Zone rows), and
    ``bytes`` is the device memory those rows are in every layer.
    """

    variant: str  # one of RUNTIMES
    model: str  # model preset name
    num_blocks: int  # the engine's blocks (vLLM's num_gpu_blocks)
    block_size: int  # tokens per block
    bytes: int  # nominal memory: num_blocks blocks of KV (gpu), or the device rows (PIM)
    blocks: int  # blocks the memory can hold at once (the runtime's capacity)
    layer_rows: int | None = None  # PIM: rows per layer
    crs_rows: int | None = None  # PIM: Commit Zone rows per layer
    o2v_blocks: int | None = None  # PIM: O1Vs per O2V (the VRS width for no-O2V)

    @property
    def tokens(self) -> int:
        """Tokens :attr:`blocks` hold."""
        return self.blocks * self.block_size

    def as_dict(self) -> dict[str, object]:
        """Return the record as plain JSON data (with :attr:`tokens`)."""
        out = dataclasses.asdict(self)
        out["tokens"] = self.tokens
        return out


def layer_config(model: ModelSpec, layer_rows: int, *, variant: str = "patton",
                 block_size: int = 16, device: Device = DEVICE) -> Config | Geometry:
    """Return the one-layer runtime geometry of ``variant`` with ``layer_rows`` rows per layer.

    One layer is enough: the runtime's allocator is shared by every layer and layer ``l`` is
    layer 0 shifted by ``l * layer_rows`` rows (``Config``), so every layer's placement is the
    same (``tests/test_serving_runtime.py`` checks it against the 32-layer geometry).
    """
    if variant in BASELINES:
        return Geometry(model, device, block_size=block_size, layers=1, layer_rows=layer_rows)
    cfg = Config(model, device, block_size=block_size, layers=1, layer_rows=layer_rows)
    return patton_variant(variant).config(cfg)


def config_blocks(cfg: Config) -> int:
    keys = cfg.krs_count * cfg.o2k_per_krs * cfg.n_o1p2
    values = cfg.vrs_count * cfg.o2v_per_vrs * cfg.o2v_width
    return min(keys, values)


def capacity(variant: str, model: ModelSpec, *, num_blocks: int | None = None,
             block_size: int | None = None, device: Device = DEVICE) -> Capacity:
    """Size ``variant``'s KV memory; every variant gets the same nominal memory.

    ``num_blocks`` None is the whole AiM ``device`` (16 GiB): the GPU reference gets that many
    bytes of the model's KV cache in blocks (``device_bytes // (block_size *
    kv_bytes_per_token)``, 8192 for Llama-3-8B), and a PIM variant the device's rows split
    evenly over the model's layers (``rows // layers``, 512), as ``Config(model)`` lays them
    out. A given ``num_blocks`` N is N blocks of KV memory: the GPU reference has N engine
    blocks, a PIM variant the fewest rows per layer that hold N blocks' bytes (at most
    ``rows // layers``), laid out by its ``Config``, behind an engine of N blocks too.

    ``block_size`` None is the variant's (:data:`REQUIREMENTS`). A baseline's ``blocks`` is what its
    units hold when every slot is used (its policy may strand some: ``Usage.stranded``).

    Raises:
        ValueError: unknown variant, ``num_blocks < 2``, or rows too few for one KRS and VRS.
    """
    if variant not in RUNTIMES:
        raise ValueError(f"unknown runtime {variant!r}; known: {', '.join(RUNTIMES)}")
    if block_size is None:
        block_size = REQUIREMENTS[variant].block_size
    if block_size < 1:
        raise ValueError(f"block size must be >= 1, got {block_size}")
    block_bytes = block_size * kv_bytes_per_token(model)
    if num_blocks is None:
        num_blocks = device_bytes(device) // block_bytes
    if num_blocks < 2:
        raise ValueError(f"num_blocks must be >= 2 (block 0 is vLLM's null block), "
                         f"got {num_blocks}")
    if variant == "gpu":
        return Capacity(variant, model.name, num_blocks, block_size, num_blocks * block_bytes,
                        num_blocks - 1)
    # one row index of every channel and bank holds row_bytes x channels x banks per layer
    row_bytes = device.row_bytes * device.channels * device.banks
    rows = min(-(-num_blocks * (block_bytes // model.layers) // row_bytes),
               device.rows // model.layers)
    if variant in BASELINES:
        try:
            geo = Geometry(model, device, block_size=block_size, layers=1, layer_rows=rows)
        except PattonError as e:
            raise ValueError(f"{num_blocks} blocks of {model.name} give {rows} rows per layer, "
                             f"which {variant} cannot lay out: {e}") from None
        held = geo.channels * geo.slots // (geo.heads * geo.units)
        return Capacity(variant, model.name, num_blocks, block_size,
                        rows * row_bytes * model.layers, held, rows)
    try:
        cfg = layer_config(model, rows, variant=variant, block_size=block_size, device=device)
    except PattonError as e:  # ConfigError: too few rows, or a block size it cannot lay out
        raise ValueError(f"{num_blocks} blocks of {model.name} give {rows} rows per layer, "
                         f"which the runtime cannot lay out: {e}") from None
    return Capacity(variant, model.name, num_blocks, block_size,
                    rows * row_bytes * model.layers, config_blocks(cfg), rows, cfg.crs_rows,
                    cfg.o2v_width)
