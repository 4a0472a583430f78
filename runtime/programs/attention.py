"""The per-step attention batch cache: per-request tables and the batches laid out from them.

An :class:`AttentionCache` keeps each live request's
:class:`~patton.runtime.programs.tables.KeyTable` and
:class:`~patton.runtime.programs.tables.ValueTable` up to date with its block table (from the first
position the lifecycle marked dirty, :class:`~patton.runtime.patton.metadata.RequestState`) and, per
layer and kind, the last :class:`~patton.runtime.programs.batch.Batch` of attention programs,
keyed by
its requests' versions. A step whose requests did not change reuses the batch (QK^T does not
depend on Value visibility, ``kversion``, so a commit step reuses it); one where a few tables
changed at their ends patches it (:mod:`patton.runtime.programs.layout_patch`); any other lays
it out
anew (:mod:`patton.runtime.programs.layout`).
"""

from __future__ import annotations

import numpy as np
from patton.runtime.errors import ShapeError, UnknownRequest
from patton.runtime.inputs import bf16_bits, check_layer, check_shape
from patton.runtime.patton.config import Config
from patton.runtime.patton.metadata import CLEAN, BlockMeta, CzPlace, RequestState, request_of
from patton.runtime.programs import layout_patch as patch
from patton.runtime.programs.batch import Batch
from patton.runtime.programs.plans import Contiguous, QkPlan, SvPlan, group_masks
from patton.runtime.programs.tables import KeyTable, ValueTable
from patton.sim.program import Program

__all__ = ["AttentionCache"]


class AttentionCache:
    """The attention programs of one runtime, kept step to step (see the module docstring).

    Shares the runtime's block and request maps (it only reads them, and clears the dirty
    positions it has caught up with). Invariants: a request's tables, once brought up to date,
    equal tables built afresh from its block table; a cached batch equals the layout of its
    requests' tables at the versions it is keyed by.

    Args:
        config: geometry.
        blocks: the runtime's bound blocks by id.
        requests: the runtime's live requests by id.
    """

    def __init__(self, config: Config, blocks: dict[int, BlockMeta],
                 requests: dict[int, RequestState]) -> None:
        self.config = config
        self.blocks = blocks
        self.requests = requests
        # per request: its QK^T groups and SV segments, kept in step with its table
        self._ktabs: dict[int, KeyTable] = {}
        self._vtabs: dict[int, ValueTable] = {}
        # per (layer, kind): the last batch, by its requests' versions and data width, and
        # what it was laid out from (layout_patch.QkLayout / SvLayout, to patch it)
        self._batches: dict[tuple[int, str],
                            tuple[tuple, Batch, list, patch.QkLayout | patch.SvLayout]] = {}

    def forget(self, request: int) -> None:
        """Drop a finished request's tables, and every batch (its id may come back)."""
        self._ktabs.pop(request, None)
        self._vtabs.pop(request, None)
        self._batches.clear()  # the id may come back with the same version

    def keys(self, request: int) -> KeyTable:
        """Return ``request``'s :class:`KeyTable`, brought up to date with its table."""
        state = request_of(self.requests, request)
        tb = self._ktabs.get(request)
        if tb is None:
            tb = self._ktabs[request] = KeyTable(group_masks(self.config)[1])
        if state.kdirty != CLEAN or tb.blocks != len(state.table):
            first = tb.cut(state.kdirty)
            blocks = self.blocks
            tb.extend([blocks[b].key for b in state.table[first:]])
            state.kdirty = CLEAN
        return tb

    def values(self, request: int) -> ValueTable:
        """Return ``request``'s :class:`ValueTable`, brought up to date with its table."""
        state = request_of(self.requests, request)
        tb = self._vtabs.get(request)
        if tb is None:
            tb = self._vtabs[request] = ValueTable()
        table = state.table
        n = len(tb.values)
        if state.vdirty != CLEAN or n != len(table):
            blocks = self.blocks
            if state.vdirty == n - 1 == len(table) - 1 and \
                    tb.publish_last(blocks[table[-1]].visible):  # a commit
                state.vdirty = CLEAN
                return tb
            after = None
            if state.vdirty >= n and len(table) > n:  # appends only
                after = blocks[table[n]].visible
                if len(table) == n + 1 and isinstance(after, CzPlace) and tb.append_cz(after):
                    state.vdirty = CLEAN  # a boundary: the new block is in its CZ slot
                    return tb
            first = tb.cut(state.vdirty, after)
            tb.extend([blocks[b].visible for b in table[first:]])
            state.vdirty = CLEAN
        return tb

    def batch(self, requests: list[int], layer: int, kind: str,
              width: int) -> tuple[Batch, list]:
        """Return the ``kind`` (``"qk"`` or ``"sv"``) batch of ``requests``' programs and plans.

        Cached by the requests' versions and ``width``; when some tables changed, the last batch
        of the same requests is patched for them (:mod:`patton.runtime.programs.layout_patch`),
        else (or when the patch does not apply) the batch is laid out anew.

        Raises:
            UnknownRequest: a request is not live.
        """
        reqs = self.requests
        try:
            if kind == "qk":
                versions = tuple([reqs[r].kversion for r in requests])
            else:
                versions = tuple([reqs[r].version for r in requests])
        except KeyError:
            missing = next(r for r in requests if r not in reqs)
            raise UnknownRequest(f"request {missing!r} is not live") from None
        key = (tuple(requests), versions, width)
        hit = self._batches.get((layer, kind))
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        c = self.config
        refresh = self.keys if kind == "qk" else self.values
        lay: patch.QkLayout | patch.SvLayout | None = None
        if hit is not None and hit[0][0] == key[0]:  # same requests: patch the changed ones
            old = hit[3]
            changed = [k for k, (a, b) in enumerate(zip(hit[0][1], versions)) if a != b]
            if len(changed) <= patch.MAX_CHANGED:
                tabs: list = list(old.tables)
                for k in changed:
                    tabs[k] = refresh(requests[k])
                if isinstance(old, patch.QkLayout):
                    lay = patch.qk_patch(c, layer, old, tabs, changed)
                else:
                    lay = patch.sv_patch(c, layer, old, tabs, changed, width)
        if lay is None:
            tabs = [refresh(r) for r in requests]
            lay = patch.qk_layout(c, layer, tabs) if kind == "qk" else \
                patch.sv_layout(c, layer, tabs, width)
        batch = lay.batch
        plans = Contiguous.of([tb.plan for tb in lay.tables], c)
        self._batches[(layer, kind)] = (key, batch, plans, lay)
        return batch, plans

    def _live(self, requests: list[int]) -> None:
        """Raise :class:`UnknownRequest` for the first request that is not live."""
        reqs = self.requests
        for r in requests:
            try:
                live = r in reqs
            except TypeError:  # unhashable
                live = False
            if not live:
                raise UnknownRequest(f"request {r!r} is not live")

    def _width(self, requests: list[int], width: object) -> int:
        """Return the SV data width, or raise :class:`ShapeError` unless it is a multiple of
        ``T`` covering every request's table (``blocks * T``)."""
        t = self.config.block_size
        need = max((len(self.requests[r].table) for r in requests), default=0) * t
        if isinstance(width, bool | np.bool_) or not isinstance(width, int | np.integer):
            raise ShapeError(f"SV data width {width!r} is not an integer")
        if width < need:
            raise ShapeError(f"SV data width {width} below the {need} the longest table needs "
                             f"(its blocks x {t})")
        if width % t:
            raise ShapeError(f"SV data width {width} is not a multiple of the block size {t}")
        return int(width)

    def _inputs(self, requests: list[int], layer: int, data: np.ndarray,
                name: str) -> tuple[int, np.ndarray]:
        """Check the requests, the layer and the data's dtype (in that order); return the
        layer and the data as bf16 bits."""
        self._live(requests)
        return check_layer(layer, self.config.n_layers), bf16_bits(data, name)

    def qk_step(self, requests: list[int], layer: int,
                queries: np.ndarray) -> tuple[Program, list[QkPlan]]:
        """Do :meth:`Runtime.qk_step <patton.runtime.patton.lifecycle.Runtime.qk_step>`.

        Raises:
            UnknownRequest, LayerError, DtypeError, ShapeError: checked in that order, before
                anything changes.
        """
        c = self.config
        layer, queries = self._inputs(requests, layer, queries, "queries")
        check_shape(queries, (len(requests), c.heads, c.d_head), "queries",
                    "(requests, heads, d_head)")
        batch, plans = self.batch(requests, layer, "qk", c.device.gb_columns * c.device.lanes)
        return batch.fill(queries[:, :, None, :]), plans

    def sv_buffer(self, requests: list[int], layer: int, width: int) -> np.ndarray:
        """Do :meth:`Runtime.sv_buffer <patton.runtime.patton.lifecycle.Runtime.sv_buffer>`."""
        self._live(requests)
        layer = check_layer(layer, self.config.n_layers)
        width = self._width(requests, width)
        return self.batch(requests, layer, "sv", width)[0].buffer()

    def sv_step(self, requests: list[int], layer: int,
                probs: np.ndarray) -> tuple[Program, list[SvPlan]]:
        """Do :meth:`Runtime.sv_step <patton.runtime.patton.lifecycle.Runtime.sv_step>`.

        Raises:
            UnknownRequest, LayerError, DtypeError, ShapeError: checked in that order, before
                anything changes.
        """
        c = self.config
        layer, probs = self._inputs(requests, layer, probs, "probs")
        if probs.ndim != 3 or probs.shape[:2] != (len(requests), c.heads):
            raise ShapeError(f"probs must have shape (requests, heads, width) = "
                             f"({len(requests)}, {c.heads}, width), got {probs.shape}")
        width = self._width(requests, probs.shape[2])
        batch, plans = self.batch(requests, layer, "sv", width)
        return batch.fill(probs), plans
