"""The serving engine driving a KV-cache runtime: block events in, placement answers out.

:class:`Attached` is both halves of the engine's runtime interface (``docs/serving.md``,
"The engine drives the PATTON runtime"):

* the engine's **observer**: every :class:`~patton.serving.block_pool.BlockEvent` becomes
  the runtime call it stands for, in program order (alloc -> ``allocate``, share -> ``share``,
  cache -> the block is made full, unshare/release -> ``free``, a request's last reference
  dropped -> ``finish``, evict -> ``evict``);
* the engine's **placement** (:class:`~patton.serving.kv_cache.Placement`):
  ``can_place(request_id, n)`` is the runtime's own granule capacity for that request (its
  open O2K/O2V plus whole free Order-2 granules), so a runtime may refuse a block while the
  engine still has free blocks.

Engine block ids are the runtime's block ids unchanged (block 0, vLLM's null block, never
reaches it); an engine request id (``"<conversation>:<turn>"``) gets a runtime request number
the first time it is seen and keeps it across preemptions. The runtime's bound blocks are
always the engine's running plus cached blocks (:func:`mirror_errors` checks it).

Variants by name (:data:`VARIANTS`): ``gpu`` (vLLM's own cache: no runtime, no placement
constraint), then the runtime's variants (:data:`patton.runtime.patton.variants.VARIANTS`):
``patton``, ``patton-wo-cz`` (no Commit Zone) and ``patton-no-o2v`` (an O2V as wide as a
VRS), then the translated baselines (:data:`patton.runtime.baselines.BASELINES`):
``neupims``, ``attacc``, ``blockpim``, ``pimphony``. :data:`PROFILES` says what each asks of
the engine (block size, prefix caching, context limit); :func:`capacity` sizes every variant
from one nominal memory (the 16 GiB AiM device by default) and :func:`attach` builds one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.baselines import BASELINES, Geometry
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.errors import PattonError
from patton.runtime.interface import KvRuntime
from patton.runtime.patton.variants import VARIANTS as RUNTIME_VARIANTS
from patton.runtime.patton.variants import variant as runtime_variant
from patton.sim.device import DEVICE, Device
from patton.serving.block_pool import (
    ALLOC,
    CACHE,
    EVICT,
    RELEASE,
    SHARE,
    UNSHARE,
    BlockEvent,
    BlockPool,
)

__all__ = [
    "PROFILES",
    "VARIANTS",
    "Profile",
    "AdapterError",
    "Attached",
    "Capacity",
    "Usage",
    "attach",
    "capacity",
    "config_blocks",
    "device_bytes",
    "kv_bytes_per_token",
    "layer_config",
    "max_context",
    "mirror_errors",
]

#: The runtimes a serving run can attach, by name: vLLM's own cache, PATTON's variants, then
#: the translated baselines.
VARIANTS = ("gpu", *RUNTIME_VARIANTS, *BASELINES)


@dataclass(frozen=True, slots=True)
class Profile:
    """What a runtime asks of the engine that serves it.

    ``block_size`` is the engine's block size (BlockPIM's blocks are bound to a row: 128);
    without ``prefix_caching`` the engine runs with vLLM's prefix caching off (the runtime's
    system defines none: every turn prefills its whole history); ``max_context`` (tokens) is
    the longest request the runtime can hold (None: capacity only).
    """

    name: str
    block_size: int = 16
    prefix_caching: bool = True
    max_context: int | None = None


#: Every variant's profile, by name.
PROFILES: dict[str, Profile] = {
    **{name: Profile(name) for name in ("gpu", *RUNTIME_VARIANTS)},
    **{b.name: Profile(b.name, b.block_size, b.prefix_caching, b.max_context)
       for b in BASELINES.values()},
}


class AdapterError(RuntimeError):
    """The runtime rejected an engine event (a bug: the two disagree about a block)."""


# ------------------------------------------------------------------------------ capacity


def max_context(variant: str, model: ModelSpec, device: Device = DEVICE) -> int | None:
    """Tokens one request of ``model`` may reach on ``variant`` (None: capacity only).

    A baseline's own limit (:data:`PROFILES`), lowered to what one channel holds where its
    system confines a request to one (NeuPIMs: 1,024 tokens for a 32-KV-head model, whose
    every token takes 16 KB per layer, on a 512 MB channel).
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown runtime {variant!r}; known: {', '.join(VARIANTS)}")
    if variant not in BASELINES:
        return PROFILES[variant].max_context
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

    variant: str  # one of VARIANTS
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
    return runtime_variant(variant).config(cfg)


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

    ``block_size`` None is the variant's (:data:`PROFILES`). A baseline's ``blocks`` is what its
    units hold when every slot is used (its policy may strand some: ``Usage.stranded``).

    Raises:
        ValueError: unknown variant, ``num_blocks < 2``, or rows too few for one KRS and VRS.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown runtime {variant!r}; known: {', '.join(VARIANTS)}")
    if block_size is None:
        block_size = PROFILES[variant].block_size
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


# ------------------------------------------------------------------------------ the adapter


@dataclass(slots=True)
class Usage:
    """Capacity use sampled after every step (:meth:`Attached.sample`).

    Invariants: ``samples`` steps were sampled; the sums and peaks are over them; for a PIM
    runtime ``stranded = capacity - bound - free`` where ``free`` is what a new request could
    allocate (whole free Order-2 granules): positions inside Order-2 granules that no live
    request can allocate into (0 for ``gpu``).
    """

    samples: int = 0
    bound_sum: int = 0  # blocks bound (engine: running + cached)
    bound_peak: int = 0
    held_sum: int = 0  # blocks referenced by requests (ref > 0)
    held_peak: int = 0
    stranded_sum: int = 0
    stranded_peak: int = 0

    def as_dict(self, capacity_blocks: int) -> dict[str, object]:
        """Return the means and peaks as plain JSON data (fractions of ``capacity_blocks``)."""
        n = max(self.samples, 1)
        cap = max(capacity_blocks, 1)
        return {"blocks_mean": round(self.bound_sum / n, 1), "blocks_peak": self.bound_peak,
                "blocks_peak_fraction": round(self.bound_peak / cap, 4),
                "referenced_mean": round(self.held_sum / n, 1),
                "referenced_peak": self.held_peak,
                "stranded_mean": round(self.stranded_sum / n, 1),
                "stranded_peak": self.stranded_peak}


@dataclass(slots=True)
class Attached:
    """An engine's view of a runtime: its observer (:meth:`observe`) and placement.

    Invariants (after every event): the runtime's bound blocks are exactly the engine blocks
    with ``ref > 0`` or a key (running plus cached), with the engine's ref counts; ``held[r]``
    is the blocks request ``r`` references; a request with none is finished in the runtime.

    Args:
        capacity: the variant and its sizes (:func:`capacity`).
        runtime: the runtime (None for ``gpu``: only the block set is mirrored).
        fill: make a block full in the runtime when the engine caches it (a metadata-only
            whole-block write). Placement bookkeeping needs it (only full blocks can be
            shared or stay cached); a driver that writes the tokens itself turns it off.
    """

    capacity: Capacity
    runtime: KvRuntime | None
    fill: bool = True
    ids: dict[str, int] = field(default_factory=dict)  # engine request id -> runtime request
    held: dict[int, int] = field(default_factory=dict)  # runtime request -> blocks referenced
    bound: set[int] = field(default_factory=set)  # engine ids of bound blocks
    keyed: set[int] = field(default_factory=set)  # engine ids of cached (keyed) blocks
    refused: int = 0  # can_place answers False
    placement_evictions: int = 0  # evictions the engine made because of a refusal
    usage: Usage = field(default_factory=Usage)
    _zeros: np.ndarray | None = field(default=None, repr=False)  # a zero block (fill writes)
    _calls: dict[str, Callable[[BlockEvent], None]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.runtime is not None:
            c = self.runtime.config
            self._zeros = np.zeros((c.n_layers, c.block_size, c.heads, c.d_head), np.uint16)
        self._calls = {ALLOC: self._alloc, SHARE: self._share, CACHE: self._cache,
                       UNSHARE: self._free, RELEASE: self._free, EVICT: self._evict}

    # -------------------------------------------------------------------- placement

    @property
    def placement(self) -> Attached | None:
        """The engine's ``placement``: this adapter, or None for ``gpu``."""
        return None if self.runtime is None else self

    def can_place(self, request_id: str, num_blocks: int) -> bool:
        """Whether the runtime can bind ``num_blocks`` new blocks for ``request_id`` now."""
        rt = self.runtime
        if rt is None:
            return True
        r = self.ids.get(request_id)
        room = rt.free_blocks() if r is None or r not in self.held else _room(rt, r)
        if room >= num_blocks:
            return True
        self.refused += 1
        return False

    # ---------------------------------------------------------------------- events

    def observe(self, event: BlockEvent) -> None:
        """Apply one engine block event to the runtime (the engine's ``observer``)."""
        try:
            self._calls[event.kind](event)
        except PattonError as e:
            raise AdapterError(f"{event}: the runtime refused it: {e}") from e

    def _request(self, request_id: str | None) -> int:
        assert request_id is not None, "a request-less event for a request"
        r = self.ids.get(request_id)
        if r is None:
            r = self.ids[request_id] = len(self.ids)
        return r

    def _alloc(self, e: BlockEvent) -> None:
        r = self._request(e.request_id)
        self.bound.add(e.block_id)
        self.held[r] = self.held.get(r, 0) + 1
        if self.runtime is not None:
            self.runtime.allocate(r, e.block_id)

    def _share(self, e: BlockEvent) -> None:
        r = self._request(e.request_id)
        self.held[r] = self.held.get(r, 0) + 1
        if self.runtime is not None:
            self.runtime.share(r, e.block_id)

    def _cache(self, e: BlockEvent) -> None:
        self.keyed.add(e.block_id)
        if self.runtime is not None and self.fill:
            z = self._zeros
            self.runtime.write_many([(e.block_id, 0, z, z)], emit=False)

    def _free(self, e: BlockEvent) -> None:
        r = self._request(e.request_id)
        rt = self.runtime
        if e.kind == RELEASE and e.block_id not in self.keyed:
            self.bound.discard(e.block_id)  # an unhashed block at ref 0 is free
        if rt is not None:
            rt.free(r, e.block_id)
            if e.block_id not in self.bound and e.block_id in rt.blocks:
                # the engine let it go unkeyed (prefix caching off): the runtime keeps no
                # block the engine does not, though its contract lets it cache a full one
                rt.evict(e.block_id)
        n = self.held[r] - 1
        if n:
            self.held[r] = n
        else:  # finished or preempted: the runtime forgets its open Order-2 granules
            del self.held[r]
            if rt is not None:
                rt.finish(r)

    def _evict(self, e: BlockEvent) -> None:
        if e.request_id is None:
            self.placement_evictions += 1
        self.keyed.discard(e.block_id)
        self.bound.discard(e.block_id)
        if self.runtime is not None:
            self.runtime.evict(e.block_id)

    # ---------------------------------------------------------------------- queries

    def sample(self, pool: BlockPool) -> None:
        """Add the capacity use after a step (``pool``: the engine's block pool)."""
        u = self.usage
        bound = len(self.bound)
        held = pool.num_blocks - 1 - pool.num_free
        u.samples += 1
        u.bound_sum += bound
        u.held_sum += held
        u.bound_peak = max(u.bound_peak, bound)
        u.held_peak = max(u.held_peak, held)
        if self.runtime is not None:
            stranded = self.capacity.blocks - bound - self.runtime.free_blocks()
            u.stranded_sum += stranded
            u.stranded_peak = max(u.stranded_peak, stranded)

    def report(self) -> dict[str, object]:
        """Return the capacity and its use as plain JSON data."""
        out: dict[str, object] = {"capacity": self.capacity.as_dict()}
        out["usage"] = self.usage.as_dict(self.capacity.blocks)
        out["refusals"] = self.refused
        out["placement_evictions"] = self.placement_evictions
        return out


def _room(rt: KvRuntime, request: int) -> int:
    """Blocks ``request`` could bind now: its open O2K/O2V plus whole free Order-2 granules."""
    return rt.free_blocks_for(request)


def attach(variant: str, model: ModelSpec, *, num_blocks: int | None = None,
           block_size: int | None = None, device: Device = DEVICE,
           fill: bool = True) -> Attached:
    """Return a fresh runtime of ``variant`` sized by :func:`capacity`, ready to attach.

    Pass ``attached.observe`` as the engine's observer and ``attached.placement`` as its
    placement; the engine needs ``attached.capacity.num_blocks`` blocks.
    """
    cap = capacity(variant, model, num_blocks=num_blocks, block_size=block_size,
                   device=device)
    if variant == "gpu":
        return Attached(cap, None, fill)
    assert cap.layer_rows is not None
    cfg = layer_config(model, cap.layer_rows, variant=variant, block_size=cap.block_size,
                       device=device)
    if variant in BASELINES:
        assert isinstance(cfg, Geometry)
        return Attached(cap, BASELINES[variant].runtime(cfg), fill)
    assert isinstance(cfg, Config)
    return Attached(cap, runtime_variant(variant).runtime(cfg), fill)


def mirror_errors(pool: BlockPool, attached: Attached) -> list[str]:
    """Return how the runtime's blocks differ from the engine's running + cached blocks.

    Empty when they agree: the same block ids, each with the engine's ref count (and, for a
    runtime, full exactly when the engine cached it). For tests; O(num_blocks).
    """
    engine = {b: pool.ref[b] for b in range(1, pool.num_blocks)
              if pool.ref[b] > 0 or pool.key[b] is not None}
    out = []
    if set(engine) != attached.bound:
        out.append(f"mirrored blocks differ: engine only {sorted(set(engine) - attached.bound)}"
                   f", mirror only {sorted(attached.bound - set(engine))}")
    rt = attached.runtime
    if rt is None:
        return out
    blocks = rt.blocks
    if set(engine) != set(blocks):
        out.append(f"runtime blocks differ: engine only {sorted(set(engine) - set(blocks))}, "
                   f"runtime only {sorted(set(blocks) - set(engine))}")
    for b, ref in engine.items():
        meta = blocks.get(b)
        if meta is None:
            continue
        if meta.ref_cnt != ref:
            out.append(f"block {b}: engine ref {ref}, runtime ref_cnt {meta.ref_cnt}")
        if attached.fill and meta.full != (pool.key[b] is not None):
            out.append(f"block {b}: engine cached {pool.key[b] is not None}, runtime full "
                       f"{meta.full}")
    return out
