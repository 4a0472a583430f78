"""Placement metadata, indexed by the serving engine's logical block id.

Rows in these records are relative to a layer's band (:meth:`Config.row` makes them absolute);
channels are relative to a head group (:meth:`Config.channel`). Every layer and head group uses
the same placement, so one record serves all of them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.errors import UnknownBlock, UnknownRequest
from patton.runtime.patton.allocator import Binding

#: Dirty-position sentinel of :class:`RequestState`: only appends since the last read.
CLEAN = 1 << 62

__all__ = ["CLEAN", "WriteMode", "KeyPlace", "ValuePlace", "CzPlace", "BlockMeta", "RequestState",
           "block_of", "request_of"]


class WriteMode(enum.Enum):
    """How partial Value blocks are written."""

    PATTON = "patton"  # partial Value blocks live in a Commit Zone slot
    NO_CZ = "no_cz"  # ablation: single-token Value writes go straight to the O1V


@dataclass(frozen=True, slots=True)
class KeyPlace:
    """An O1K: ``E`` bursts from ``col`` in every bank of one row of channel ``p``.

    Token offset ``t`` lives in bank ``t``.
    """

    p: int  # channel within the head group
    row: int  # row within the layer band
    col: int  # first burst column


@dataclass(frozen=True, slots=True)
class ValuePlace:
    """An O1V: burst column ``col`` of rows ``row0 .. row0 + Rv - 1`` in all P channels.

    Head dimension ``value_dim(p, i, b)`` is in channel ``p``, row ``row0 + i``, bank ``b``;
    token offset ``t`` is lane ``t``.
    """

    row0: int  # first VRS row within the layer band
    col: int  # burst column


@dataclass(frozen=True, slots=True)
class CzPlace:
    """A CZ slot: bursts ``col0 .. col0 + Rv - 1`` of one CRS row in all P channels.

    Head dimension ``value_dim(p, i, b)`` is in channel ``p``, burst ``col0 + i``, bank ``b``;
    token offset ``t`` is lane ``t`` (the paper's ``c_CZ(i, t) = c_slot + 16 i + t`` counted in
    lanes, with ``0 <= i < Rv``).
    """

    row: int  # CRS row within the layer band
    col0: int  # first burst column


@dataclass(slots=True)
class BlockMeta:
    """One bound logical block.

    Invariants: ``0 <= filled <= T``; ``cz`` (and ``slot``) is set iff the runtime is in
    :attr:`WriteMode.PATTON` and ``0 < filled < T`` (its O1V ``value`` is then reserved, not
    visible; a block written whole never takes a slot); ``ref_cnt == 0`` only for a full block (cached); a block with ``ref_cnt > 1`` or
    ``ref_cnt == 0`` is never written; ``shadow`` holds the written Value tokens (offsets
    ``< filled``; later ones undefined) while the block is in the Commit Zone (the commit's
    source: a view of the runtime's store for its CZ slot), else ``None``.
    """

    block_id: int  # the engine's block id
    owner: int  # request that allocated it
    binding: Binding  # granules (for release)
    key: KeyPlace  # O1K
    value: ValuePlace  # O1V (reserved while in the CZ)
    cz: CzPlace | None  # visible CZ slot of a partial block
    size: int  # T, token offsets per block
    slot: int | None = None  # CZ slot id while ``cz`` is set
    ref_cnt: int = 1  # requests whose table holds it
    filled: int = 0  # token offsets written (0 .. filled-1)
    shadow: np.ndarray | None = field(default=None, repr=False)  # (layers, T, heads, D) u16

    @property
    def full(self) -> bool:
        """True once every token offset is written."""
        return self.filled == self.size

    @property
    def cached(self) -> bool:
        """True for a full block no request references (kept mapped until evicted)."""
        return self.ref_cnt == 0

    @property
    def visible(self) -> ValuePlace | CzPlace:
        """The Value placement attention reads: the CZ slot while set, else the O1V."""
        return self.cz if self.cz is not None else self.value


@dataclass(slots=True)
class RequestState:
    """One request's view: its block table, in logical order.

    Invariants: every id in ``table`` is bound and counts this request in its ``ref_cnt``
    (once per occurrence); ``version`` changes whenever the placement of a table entry
    changes, ``kversion`` whenever the table does (a block's O1K never moves); ``kdirty`` /
    ``vdirty`` are at most the first table position whose O1K / visible Value placement
    changed since the runtime last read them (``CLEAN``, a huge value, when only appends
    happened). The versions key cached attention programs; the dirty positions say which
    part of the request's :mod:`patton.runtime.programs.tables` structure is stale.
    """

    request: int  # request id
    table: list[int] = field(default_factory=list)  # logical block ids, in order
    version: int = 0  # bumped on every table or visibility change
    kversion: int = 0  # bumped on every table change
    kdirty: int = CLEAN  # first table position whose O1K changed (not by an append)
    vdirty: int = CLEAN  # first table position whose visible Value placement changed


def block_of(blocks: dict[int, BlockMeta], block_id: int) -> BlockMeta:
    """Return the bound block ``block_id``.

    Raises:
        UnknownBlock: not bound.
    """
    meta = blocks.get(block_id)
    if meta is None:
        raise UnknownBlock(f"block {block_id!r} is not bound")
    return meta


def request_of(requests: dict[int, RequestState], request: int) -> RequestState:
    """Return the live request ``request``.

    Raises:
        UnknownRequest: not live.
    """
    state = requests.get(request)
    if state is None:
        raise UnknownRequest(f"request {request!r} is not live")
    return state
