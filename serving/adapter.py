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

:func:`attach` builds a fresh runtime of any of :data:`~patton.serving.capacity.RUNTIMES`, sized
by :func:`~patton.serving.capacity.capacity`, ready to attach.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.baselines import BASELINES, Geometry
from patton.runtime.errors import PattonError
from patton.runtime.interface import KvRuntime
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS as PATTON_VARIANTS
from patton.runtime.patton.variants import variant as patton_variant
from patton.serving.block_pool import BlockPool
from patton.serving.capacity import Capacity, capacity, layer_config
from patton.serving.events import BlockEvent, EventKind
from patton.sim.device import DEVICE, Device
from patton.sim.extensions import DEFAULT_EXT
from patton.sim.extensions import device_ext as extension_set

__all__ = ["AdapterError", "Attached", "Usage", "attach", "executor_ext", "mirror_errors"]


class AdapterError(RuntimeError):
    """The runtime rejected an engine event (a bug: the two disagree about a block)."""


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
        self._calls = {EventKind.ALLOC: self._alloc, EventKind.SHARE: self._share,
                       EventKind.CACHE: self._cache, EventKind.UNSHARE: self._free,
                       EventKind.RELEASE: self._free, EventKind.EVICT: self._evict}

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
        if e.kind == EventKind.RELEASE and e.block_id not in self.keyed:
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


def executor_ext(executor: object) -> str:
    """The device extension set of ``executor``: its timing table's (``CycleExecutor``,
    ``RtlExecutor``), or ``"aim"`` for an executor without one (``FunctionalExecutor``,
    ``None``)."""
    timing = getattr(executor, "timing", None)
    return getattr(timing, "ext", DEFAULT_EXT)


def attach(variant: str, model: ModelSpec, *, num_blocks: int | None = None,
           block_size: int | None = None, device: Device = DEVICE,
           fill: bool = True, token_op: str | None = None,
           device_ext: str = DEFAULT_EXT) -> Attached:
    """Return a fresh runtime of ``variant`` sized by :func:`capacity`, ready to attach.

    Pass ``attached.observe`` as the engine's observer and ``attached.placement`` as its
    placement; the engine needs ``attached.capacity.num_blocks`` blocks. ``token_op``
    overrides how a PATTON variant without the Commit Zone writes a single Value token
    (:class:`~patton.runtime.patton.variants.Variant`; None: the variant's own).
    ``device_ext`` is the device's extension set: a PATTON variant's programs use what it
    offers (:class:`~patton.runtime.patton.lifecycle.Runtime`); the baselines' programs are
    the same on every set (they run on any of them).

    Raises:
        ValueError: ``token_op`` for a runtime that has no such choice.
        UnknownExtensionError: ``device_ext`` is not an extension set (a ``ValueError``).
    """
    extension_set(device_ext)
    if token_op is not None and (variant not in PATTON_VARIANTS
                                 or PATTON_VARIANTS[variant].commit_zone):
        raise ValueError(f"token_op applies to a PATTON variant without the Commit Zone, not "
                         f"{variant!r}")
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
    chosen = patton_variant(variant)
    if token_op is not None:
        chosen = dataclasses.replace(chosen, token_op=token_op)
    return Attached(cap, chosen.runtime(cfg, device_ext), fill)


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
