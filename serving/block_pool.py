"""vLLM 0.33's KV block pool restated: ref counts, the free queue, the prefix-cache map, events.

One full-attention KV cache group, prefix caching on (``vllm/v1/core/block_pool.py`` and
``FreeKVCacheBlockQueue`` in ``kv_cache_utils.py``), in our own words:

* Blocks are ids ``0 .. num_blocks-1``. Block 0 is the **null block**: it is popped from the free
  queue at start-up and never handed out, freed or cached, so ``num_blocks - 1`` are usable.
* The **free queue** holds every block with ``ref == 0``, head first. At start-up it is
  ``1 .. num_blocks-1``. :meth:`BlockPool.take` pops from the head; :meth:`BlockPool.free`
  puts blocks that reach ref 0 back: the unhashed ones **prepended to the head** in the given
  order (LIFO reuse), the hashed ones **appended to the tail** in the given order (LRU).
  :meth:`BlockPool.touch` removes a ref-0 hit block from the middle of the queue.
* A free block may still be **cached**: its key stays in the map and it can be hit until it is
  popped for reuse. Eviction is lazy: :meth:`take` drops the key of each popped hashed block.
* The **map** sends a key to the blocks cached under it, oldest insertion first (no
  de-duplication: a block-aligned full hit recomputes its last block into a second block with
  the same key); a lookup returns the first.

Every transition is reported, in program order, to an optional observer as a
:class:`~patton.serving.events.BlockEvent`.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence

from patton.serving.events import BlockEvent, EventKind, Observer

__all__ = ["BlockPool", "NULL_BLOCK"]

#: vLLM's reserved placeholder block (never handed out).
NULL_BLOCK = 0


class BlockPool:
    """The block pool of one KV cache group with prefix caching on.

    Args:
        num_blocks: vLLM's ``num_gpu_blocks`` (null block included), >= 2.
        observer: called with every :class:`BlockEvent`, or None.
    """

    def __init__(self, num_blocks: int, observer: Observer | None = None) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is the null block), "
                             f"got {num_blocks}")
        self.num_blocks = num_blocks
        self.ref: list[int] = [0] * num_blocks  # reference count per block
        self.key: list[int | None] = [None] * num_blocks  # prefix key per block, None if unhashed
        # Head first; values unused. Block 0 is popped as the null block at start-up.
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(1, num_blocks))
        self._map: dict[int, list[int]] = {}  # key -> blocks cached under it, oldest first
        self.observer = observer

    # ------------------------------------------------------------------------- queries

    @property
    def num_free(self) -> int:
        """Blocks in the free queue (cached or not): what vLLM's admission checks count."""
        return len(self._free)

    def free_order(self) -> list[int]:
        """The free queue, head (next to be reused) first."""
        return list(self._free)

    def lookup(self, key: int) -> int | None:
        """The first block cached under ``key``, or None."""
        blocks = self._map.get(key)
        return blocks[0] if blocks else None

    def cached(self, block: int) -> bool:
        """Whether ``block`` carries a key (is in the map)."""
        return self.key[block] is not None

    # ------------------------------------------------------------------------ transitions

    def take(self, n: int, request_id: str | None) -> list[int]:
        """Pop ``n`` blocks from the head for ``request_id``, evicting cached ones (ref -> 1)."""
        if n > len(self._free):
            raise ValueError(f"cannot take {n} blocks, {len(self._free)} free")
        popleft = self._free.popitem
        out = [popleft(last=False)[0] for _ in range(n)]
        key, ref, emit = self.key, self.ref, self.observer
        for b in out:
            if key[b] is not None:
                self._drop(b, request_id)
            ref[b] = 1
            if emit is not None:
                emit(BlockEvent(EventKind.ALLOC, b, request_id, None, 1))
        return out

    def touch(self, blocks: Sequence[int], request_id: str | None) -> None:
        """Add a reference to each hit block, taking ref-0 ones out of the free queue."""
        ref, free, emit = self.ref, self._free, self.observer
        for b in blocks:
            if ref[b] == 0:
                del free[b]
            ref[b] += 1
            if emit is not None:
                emit(BlockEvent(EventKind.SHARE, b, request_id, None, ref[b]))

    def cache(self, block: int, key: int, request_id: str | None) -> None:
        """Attach ``key`` to a full block and enter it in the map (duplicates allowed)."""
        if self.key[block] == key:
            return
        # Full attention with hash block == block size: a newly full block is never hashed.
        assert self.key[block] is None, f"block {block} is already cached"
        self.key[block] = key
        blocks = self._map.get(key)
        if blocks is None:
            self._map[key] = [block]
        elif block not in blocks:
            blocks.append(block)
        if self.observer is not None:
            self.observer(BlockEvent(EventKind.CACHE, block, request_id, key, self.ref[block]))

    def free(self, ordered: Iterable[int], request_id: str | None) -> None:
        """Drop one reference to each block, given in eviction priority (first = reused first).

        Blocks reaching ref 0 join the queue: unhashed ones prepended to the head in the given
        order, hashed ones appended to the tail in the given order.
        """
        ref, key, emit = self.ref, self.key, self.observer
        first: list[int] = []
        last: list[int] = []
        for b in ordered:
            ref[b] -= 1
            if ref[b] == 0:
                (first if key[b] is None else last).append(b)
                if emit is not None:
                    emit(BlockEvent(EventKind.RELEASE, b, request_id, None, 0))
            elif emit is not None:
                emit(BlockEvent(EventKind.UNSHARE, b, request_id, None, ref[b]))
        free = self._free
        if first:
            for b in reversed(first):
                free[b] = None
                free.move_to_end(b, last=False)
        for b in last:
            free[b] = None

    def evict_first(self, keep: Sequence[int] = ()) -> int | None:
        """Evict the cached free block nearest the head (vLLM's next eviction), not in ``keep``.

        Its key is dropped and it moves to the head of the queue, so it is the next block
        handed out (a runtime refused a placement; the engine frees room in vLLM's order).
        Returns the block, or None when no free block is cached.
        """
        key = self.key
        for b in self._free:
            if key[b] is not None and b not in keep:
                break
        else:
            return None
        self._drop(b, None)
        self._free.move_to_end(b, last=False)
        return b

    def _drop(self, block: int, request_id: str | None) -> None:
        k = self.key[block]
        assert k is not None
        blocks = self._map[k]
        blocks.remove(block)
        if not blocks:
            del self._map[k]
        self.key[block] = None
        if self.observer is not None:
            self.observer(BlockEvent(EventKind.EVICT, block, request_id, k, self.ref[block]))
