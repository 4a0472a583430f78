"""The block pool's free queue, ref counts and prefix-cache map (``serving/block_pool.py``), each
rule of its docstring (vLLM 0.33's ``FreeKVCacheBlockQueue`` and ``BlockPool``) on its own.

The golden vLLM runs (``tests/test_serving_engine.py``) check the pool inside the engine; these
pin the queue's order directly, so that a change to it fails here, in the module's own file."""

from __future__ import annotations

import pytest
from patton.serving.block_pool import NULL_BLOCK, BlockPool
from patton.serving.events import BlockEvent, EventKind


def test_the_queue_starts_with_every_block_but_the_null_block_in_order():
    pool = BlockPool(6)
    assert pool.free_order() == [1, 2, 3, 4, 5] and pool.num_free == 5
    assert NULL_BLOCK not in pool.free_order()
    with pytest.raises(ValueError, match="num_blocks must be >= 2"):
        BlockPool(1)


def test_take_pops_from_the_head():
    pool = BlockPool(6)
    assert pool.take(2, "a") == [1, 2]
    assert pool.free_order() == [3, 4, 5]
    assert pool.ref[1:3] == [1, 1]
    with pytest.raises(ValueError, match="cannot take 4 blocks, 3 free"):
        pool.take(4, "a")
    assert pool.free_order() == [3, 4, 5]


def test_unhashed_blocks_are_prepended_to_the_head_in_the_given_order():
    pool = BlockPool(8)
    blocks = pool.take(3, "a")  # [1, 2, 3]
    pool.free([3, 1, 2], "a")  # eviction priority: 3 first
    assert pool.free_order() == [3, 1, 2, 4, 5, 6, 7]
    assert pool.take(1, "b") == [3]  # LIFO reuse: the first given is reused first
    assert blocks == [1, 2, 3]


def test_hashed_blocks_are_appended_to_the_tail_in_the_given_order():
    pool = BlockPool(8)
    pool.take(3, "a")
    for block, key in ((1, 11), (2, 12), (3, 13)):
        pool.cache(block, key, "a")
    pool.free([2, 3, 1], "a")
    assert pool.free_order() == [4, 5, 6, 7, 2, 3, 1]  # LRU: the first given is evicted first
    assert [pool.lookup(k) for k in (11, 12, 13)] == [1, 2, 3]  # still hits while free


def test_one_free_sends_unhashed_to_the_head_and_hashed_to_the_tail():
    pool = BlockPool(8)
    pool.take(4, "a")
    pool.cache(2, 22, "a")
    pool.cache(4, 44, "a")
    pool.free([4, 3, 2, 1], "a")
    assert pool.free_order() == [3, 1, 5, 6, 7, 4, 2]


def test_a_shared_block_joins_the_queue_when_its_last_reference_goes():
    events = []
    pool = BlockPool(6, observer=events.append)
    pool.take(1, "a")
    pool.cache(1, 7, "a")
    pool.touch([1], "b")
    pool.free([1], "a")
    assert pool.ref[1] == 1 and 1 not in pool.free_order()
    pool.free([1], "b")
    assert pool.ref[1] == 0 and pool.free_order()[-1] == 1
    assert [e.kind for e in events] == [EventKind.ALLOC, EventKind.CACHE, EventKind.SHARE,
                                        EventKind.UNSHARE, EventKind.RELEASE]


def test_touch_takes_a_free_hit_block_out_of_the_middle():
    pool = BlockPool(8)
    pool.take(3, "a")
    pool.cache(2, 5, "a")
    pool.free([1, 2, 3], "a")  # queue: 1, 3, 4..7, 2
    pool.touch([2], "b")
    assert pool.free_order() == [1, 3, 4, 5, 6, 7] and pool.ref[2] == 1


def test_taking_a_cached_block_evicts_its_key():
    pool = BlockPool(3)
    pool.take(2, "a")
    pool.cache(1, 9, "a")
    pool.free([1, 2], "a")  # queue: 2, 1 (1 hashed, at the tail)
    assert pool.lookup(9) == 1
    assert pool.take(2, "b") == [2, 1]
    assert pool.lookup(9) is None and not pool.cached(1)


def test_evict_first_takes_the_cached_block_nearest_the_head_and_moves_it_there():
    pool = BlockPool(8)
    pool.take(3, "a")
    pool.cache(1, 10, "a")
    pool.cache(3, 30, "a")
    pool.free([3, 1, 2], "a")  # queue: 2, 4, 5, 6, 7, 3, 1
    assert pool.evict_first(keep=[3]) == 1
    assert pool.free_order() == [1, 2, 4, 5, 6, 7, 3]
    assert pool.lookup(10) is None and pool.lookup(30) == 3
    assert pool.evict_first() == 3 and pool.evict_first() is None


def test_one_key_may_name_several_blocks_and_a_lookup_gives_the_oldest():
    pool = BlockPool(6)
    pool.take(2, "a")
    pool.cache(2, 5, "a")
    pool.cache(1, 5, "a")
    assert pool.lookup(5) == 2
    pool.cache(2, 5, "a")  # the same key again: nothing changes
    assert pool.lookup(5) == 2


def test_the_smallest_pool_and_what_it_refuses():
    pool = BlockPool(2)
    assert (pool.num_blocks, pool.free_order(), NULL_BLOCK) == (2, [1], 0)
    assert pool.ref == [0, 0] and pool.key == [None, None]
    with pytest.raises(ValueError,
                       match=r"^num_blocks must be >= 2 \(block 0 is the null block\), got 1$"):
        BlockPool(1)
    with pytest.raises(ValueError, match=r"^cannot take 2 blocks, 1 free$"):
        pool.take(2, "a")


def test_every_event_carries_the_reference_count_after_it():
    events: list[BlockEvent] = []
    pool = BlockPool(5, observer=events.append)
    a, b = pool.take(2, "r")
    pool.cache(a, 7, "r")
    pool.touch([a], "s")
    pool.free([a, b], "r")
    pool.free([a], "s")
    assert events == [BlockEvent(EventKind.ALLOC, a, "r", None, 1),
                      BlockEvent(EventKind.ALLOC, b, "r", None, 1),
                      BlockEvent(EventKind.CACHE, a, "r", 7, 1),
                      BlockEvent(EventKind.SHARE, a, "s", None, 2),
                      BlockEvent(EventKind.UNSHARE, a, "r", None, 1),
                      BlockEvent(EventKind.RELEASE, b, "r", None, 0),
                      BlockEvent(EventKind.RELEASE, a, "s", None, 0)]


def test_a_key_cached_twice_keeps_its_other_block_when_one_is_evicted():
    pool = BlockPool(6)
    a, b = pool.take(2, "r")
    pool.cache(a, 7, "r")
    pool.cache(b, 7, "r")  # a duplicate: both blocks under one key, oldest first
    pool.cache(b, 7, "r")  # again: no change
    assert pool.lookup(7) == a
    pool.free([a, b], "r")  # hashed: to the tail, a first
    assert pool.evict_first() == a  # a leaves the map; b is still found under the key
    assert pool.lookup(7) == b and pool.cached(b) and not pool.cached(a)
    assert pool.evict_first() == b and pool.lookup(7) is None
