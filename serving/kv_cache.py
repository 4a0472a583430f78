"""vLLM 0.33's KV cache manager restated for one full-attention group: keys, hits, slots, free.

What ``KVCacheManager`` + ``UnitaryKVCacheCoordinator`` + ``FullAttentionManager`` do for this
workload (block size == hash block size, no sliding window, no connector, no spec decode,
no lookahead, watermark 0), in our own words:

* **Keys** (:class:`PrefixKeys`): block ``i`` of a token sequence has the key of
  ``(key of block i-1, tokens of block i)`` (the root's parent is a fixed "none" key), so a
  key names the whole prefix up to the end of its block. vLLM hashes the pair with sha256;
  we intern it to a small int, which is collision-free and gives the same hits. Only full
  blocks have keys.
* **Hits** (:meth:`KVCacheManager.hits`): walk the keys from block 0, take the first block
  cached under each, stop at the first miss; at most ``(num_tokens - 1) // block_size``
  blocks (the last token is always recomputed for its logits, so a block-aligned full hit
  loses its last block). No side effects.
* **Slots** (:meth:`KVCacheManager.allocate`), in vLLM's order: (1) with ``whole`` (vLLM's
  ``full_sequence_must_fit``, on for admissions by ``scheduler_reserve_full_isl``), the blocks
  for the whole sequence minus the hits and held blocks, plus the hit blocks that sit in the
  free queue (touching takes them out), must not exceed the free blocks; (2) the same count
  for the slots this step needs; (3) touch the hits and append them to the table; (4) pop
  the new blocks from the free-queue head (evicting); (5) cache every block that the
  computed-plus-scheduled tokens (capped at the sequence length) fill.
* **Free** (:meth:`KVCacheManager.free`): the table in reverse order (tail first), so a
  request's longest prefix is evicted before its root.

A :class:`Placement` (a PIM runtime) may refuse the new blocks of step (4); the manager then
evicts cached free blocks in vLLM's order (:meth:`BlockPool.evict_first`) until it accepts,
and fails the allocation when none is left, exactly as if the free blocks had run out (the
scheduler then preempts or stops admitting). Without one nothing changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from patton.serving.block_pool import BlockPool
from patton.serving.events import Observer

__all__ = ["ROOT_KEY", "PrefixKeys", "Placement", "KVCacheManager"]

#: The parent key of block 0 (vLLM's NONE_HASH).
ROOT_KEY = -1


class PrefixKeys:
    """Chained prefix keys of full blocks, interned to ints (one table per engine).

    Invariants: equal (parent key, block tokens) pairs get equal keys and different pairs
    different keys; keys are >= 0.
    """

    def __init__(self, block_size: int) -> None:
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.block_size = block_size
        self._ids: dict[tuple[int, tuple[int, ...]], int] = {}

    def extend(self, keys: list[int], tokens: Sequence[int]) -> None:
        """Append to ``keys`` (those of ``tokens``' first blocks) the keys of its new full blocks."""
        bs = self.block_size
        ids = self._ids
        parent = keys[-1] if keys else ROOT_KEY
        for start in range(len(keys) * bs, len(tokens) - bs + 1, bs):
            pair = (parent, tuple(tokens[start:start + bs]))
            k = ids.get(pair)
            if k is None:
                k = ids[pair] = len(ids)
            keys.append(k)
            parent = k

    def __len__(self) -> int:
        return len(self._ids)


class Placement(Protocol):
    """A runtime that must place each new KV block (a PIM runtime; the GPU reference has none)."""

    def can_place(self, request_id: str, num_blocks: int) -> bool:
        """Whether ``num_blocks`` new blocks for ``request_id`` fit now.

        Asked before the engine pops them from the free queue (after vLLM's own free-block
        checks passed). On False the engine evicts the next cached free block (an EVICT
        event) and asks again; the runtime learns of every transition through the
        engine's observer.
        """
        ...


class KVCacheManager:
    """Block tables of the requests over one :class:`BlockPool`.

    Args:
        num_blocks: vLLM's ``num_gpu_blocks`` (null block included).
        block_size: tokens per block.
        max_model_len: the context length (caps the slots of a request).
        observer: receives every block event, or None.
        placement: may refuse new blocks, or None.
        prefix_caching: vLLM's ``enable_prefix_caching``. Off, :meth:`hits` finds nothing and
            no block is ever cached (no CACHE events), so a freed block returns to the head of
            the free queue without a key, as vLLM's pool does with caching off.
    """

    def __init__(self, num_blocks: int, block_size: int, max_model_len: int, *,
                 observer: Observer | None = None, placement: Placement | None = None,
                 prefix_caching: bool = True) -> None:
        self.pool = BlockPool(num_blocks, observer)
        self.prefix_caching = prefix_caching
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.placement = placement
        self.tables: dict[str, list[int]] = {}  # request id -> block table
        self.num_cached: dict[str, int] = {}  # request id -> leading blocks already cached

    def hits(self, keys: Sequence[int], num_tokens: int) -> list[int]:
        """The longest run of cached blocks from block 0, capped at ``num_tokens - 1`` tokens."""
        if not self.prefix_caching:
            return []
        lookup = self.pool._map.get
        out: list[int] = []
        for i in range((num_tokens - 1) // self.block_size):
            if i >= len(keys):
                break
            blocks = lookup(keys[i])
            if not blocks:
                break
            out.append(blocks[0])
        return out

    def allocate(self, request_id: str, keys: Sequence[int], num_tokens: int,
                 num_computed: int, num_new: int, hits: Sequence[int] = (),
                 whole: bool = False) -> bool:
        """Give a request slots for ``num_new`` more tokens (vLLM's ``allocate_slots``).

        Args:
            request_id: the request.
            keys: its prefix keys (full blocks of its current tokens).
            num_tokens: its current length (prompt + output tokens so far).
            num_computed: its computed tokens before this step (0 on admission).
            num_new: tokens scheduled this step, >= 1.
            hits: prefix-cache hit blocks (admission only; the request holds no blocks).
            whole: the whole sequence must fit (admission of a waiting request).

        Returns False, changing nothing in vLLM's state (a placement may have evicted
        cached blocks), when the blocks do not fit.
        """
        bs = self.block_size
        pool = self.pool
        table = self.tables.get(request_id)
        held = len(table) if table is not None else 0
        num_hits = len(hits)
        have = held + num_hits
        total = min(num_computed + num_hits * bs, self.max_model_len)
        free = pool.num_free
        evictable = 0
        if num_hits:
            ref = pool.ref
            evictable = sum(1 for b in hits if ref[b] == 0)
        if whole:
            need = -(-min(num_tokens, self.max_model_len) // bs) - have
            if max(need, 0) + evictable > free:
                return False
        slots = min(total + num_new, self.max_model_len)
        new = max(-(-slots // bs) - have, 0)
        if new + evictable > free:
            return False
        placement = self.placement
        if placement is not None and new:
            while not placement.can_place(request_id, new):
                if pool.evict_first(hits) is None:
                    return False
        if table is None:
            table = self.tables[request_id] = []
        if num_hits:
            pool.touch(hits, request_id)
            table.extend(hits)
            self.num_cached[request_id] = len(table)
        if new:
            table.extend(pool.take(new, request_id))
        if not self.prefix_caching:
            return True
        # Cache the blocks the computed + scheduled tokens fill.
        done = self.num_cached.get(request_id, 0)
        full = min(total + num_new, num_tokens, len(keys) * bs) // bs
        if done < full:
            cache = pool.cache
            for i in range(done, full):
                cache(table[i], keys[i], request_id)
            self.num_cached[request_id] = full
        return True

    def limit(self, request_id: str) -> int:
        """The last token a running request can compute without needing :meth:`allocate`.

        Up to it the request holds the slots and every block its tokens fill is already
        cached, so :meth:`allocate` would succeed and change nothing (the decode fast path);
        -1 when it holds no table.
        """
        table = self.tables.get(request_id)
        if table is None:
            return -1
        bs = self.block_size
        if not self.prefix_caching:  # no block to cache: only the slots bound
            return len(table) * bs
        return min(len(table) * bs, (self.num_cached.get(request_id, 0) + 1) * bs - 1)

    def free(self, request_id: str) -> None:
        """Release a request's blocks, tail first (finish or preemption)."""
        table = self.tables.pop(request_id, None)
        self.num_cached.pop(request_id, None)
        if table:
            self.pool.free(reversed(table), request_id)

    def blocks(self, request_id: str) -> list[int]:
        """The request's block table (empty when it holds none)."""
        return list(self.tables.get(request_id, ()))
