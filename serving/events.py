"""Block events: every transition of a KV block, as the engine reports it to the runtime.

vLLM's own KV events (``BlockStored``, ``BlockRemoved``) carry no block ids; these do, and they
are the arrow from the serving engine to the runtime (``docs/architecture.md``). Both engines
emit them in program order (the embedded block pool, :mod:`patton.serving.block_pool`, and
real vLLM through :mod:`patton.serving.vllm_engine`'s hooks), the engine's adapter
(:mod:`patton.serving.adapter`) turns each into the runtime call it stands for, and the golden
conformance tests compare the two engines' streams event for event.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EventKind", "BlockEvent", "Observer"]


class EventKind(enum.StrEnum):
    """What happened to a block (the values are vLLM's words for it, lower case)."""

    ALLOC = "alloc"  # a free block popped and given to a request (ref 0 -> 1)
    SHARE = "share"  # a cached block hit by a request (touch: ref + 1; leaves the queue at 0)
    CACHE = "cache"  # a full block's key attached (it is immutable from now on)
    UNSHARE = "unshare"  # a request dropped its reference; others still hold it (ref > 0)
    RELEASE = "release"  # a request dropped the last reference (ref 0): it joins the queue
    EVICT = "evict"  # a cached free block's key dropped (on reuse, or for a placement)


@dataclass(frozen=True, slots=True)
class BlockEvent:
    """One block transition.

    Invariants: ``block_id`` is never the null block; ``key`` is the block's prefix key for
    CACHE and EVICT (None otherwise); ``ref`` is the block's reference count after the
    transition; ``request_id`` is the request whose operation caused it (for EVICT, the
    request the block is taken for, or None when a runtime's placement evicts it ahead of the
    pop).
    """

    kind: EventKind
    block_id: int
    request_id: str | None
    key: int | None = None
    ref: int = 0


#: Receives every :class:`BlockEvent` in program order.
Observer = Callable[[BlockEvent], None]
