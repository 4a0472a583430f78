"""PATTON's granule allocator (``runtime/patton/allocator.py``) on its own: each rule of its
docstrings on Llama-3-8B's geometry (4 channels per KV head group, 16 O1Ks per O2K, 2 O2Ks
per KRS row set, 16 O1Vs per O2V, 4 O2Vs per VRS row set, 32 CZ slots per CRS row).

The runtime's tests (``test_runtime_*.py``) check the allocator inside the runtime; these pin
its choices directly, so that a change to them fails here, in the module's own file."""

from __future__ import annotations

import pytest
from patton.runtime.errors import CapacityError
from patton.runtime.models import model
from patton.runtime.patton.allocator import Allocator, Binding
from patton.runtime.patton.config import Config

CONFIG = Config(model("llama3-8b"), layers=1)


def grow(alloc: Allocator, request: int, blocks: int) -> list[Binding]:
    out = []
    for _ in range(blocks):
        b = alloc.plan(request)
        alloc.apply(request, b)
        out.append(b)
    return out


def state(alloc: Allocator) -> tuple:
    """What the allocator has taken (a pool's heap of empty sets is cleaned lazily: not
    state)."""
    pools = [(list(p.used), list(p.count), set(p.partial), p.live)
             for p in (alloc.krs, alloc.vrs, alloc.crs)]
    return (pools,
            {p: (o.used, o.owner) for p, o in alloc.o2k.items()},
            {p: (o.used, o.owner) for p, o in alloc.o2v.items()},
            list(alloc.channel_load), alloc.rr, dict(alloc.open_k), dict(alloc.open_v))


def test_the_geometry():
    assert (CONFIG.ch_per_head, CONFIG.n_o1p2, CONFIG.o2v_width, CONFIG.o2k_per_krs,
            CONFIG.o2v_per_vrs, CONFIG.cz_slots_per_crs) == (4, 16, 16, 2, 4, 32)


def test_a_request_fills_its_granules_across_the_channels_in_turn():
    """Its first block opens an O2K and an O2V; the next ones bind the least-used channel,
    round robin from the channel after the last one bound; a full granule is followed by a
    new one, packed into the row set the full one is in."""
    alloc = Allocator(CONFIG)
    first = grow(alloc, 1, 17)
    assert first[0] == Binding(0, 0, True, 0, 0, True)
    assert [b.k_slot for b in first[:16]] == list(range(16))
    assert [b.v_index for b in first[:16]] == list(range(16))
    assert not any(b.new_o2k or b.new_o2v for b in first[1:16])
    assert first[16] == Binding(1, 0, True, 1, 0, True)
    assert alloc.channel_load == [5, 4, 4, 4] and alloc.rr == 1
    assert alloc.open_k == {1: 1} and alloc.open_v == {1: 1}


def test_a_second_request_starts_on_the_least_loaded_channel():
    alloc = Allocator(CONFIG)
    grow(alloc, 1, 1)  # channel 0 bound once
    b = alloc.plan(2)
    assert b == Binding(1, 1, True, 1, 0, True)  # its own O2K and O2V; channel 1 (slot 1)
    alloc.apply(2, b)
    grow(alloc, 1, 1)  # request 1: least-used channel of its O2K after the rr pointer
    assert alloc.o2k[0].used == 0b101 and alloc.channel_load == [1, 1, 1, 0]
    assert alloc.rr == 3


def test_within_a_granule_the_channel_it_uses_least_comes_first():
    """The first criterion is the O2K's own use of each channel, before the channels' load."""
    alloc = Allocator(CONFIG)
    grow(alloc, 1, 1)  # request 1: slot 0, channel 0
    for request in (2, 3, 4):  # load channels 1, 2, 3 through other requests
        grow(alloc, request, 1)
    assert alloc.channel_load == [1, 1, 1, 1] and alloc.rr == 0
    grow(alloc, 5, 2)  # request 5: channels 0 and 1 of its own O2K
    assert alloc.channel_load == [2, 2, 1, 1] and alloc.rr == 2
    # request 1's O2K has channel 0 used: channel 2 (rr) is the least used by it and by load
    assert alloc.plan(1).k_slot == 2


def test_planning_changes_nothing():
    alloc = Allocator(CONFIG)
    grow(alloc, 1, 5)
    before = state(alloc)
    alloc.plan(1)
    alloc.plan(2)
    assert state(alloc) == before


def test_releasing_the_last_block_of_a_granule_returns_it():
    alloc = Allocator(CONFIG)
    a, b = grow(alloc, 1, 2)
    alloc.release_key(a.o2k, a.k_slot)
    alloc.release_value(a.o2v, a.v_index)
    assert alloc.channel_load == [0, 1, 0, 0] and alloc.open_k == {1: 0}
    assert alloc.krs.live == alloc.vrs.live == 1
    alloc.release_key(b.o2k, b.k_slot)
    alloc.release_value(b.o2v, b.v_index)
    assert alloc.o2k == {} and alloc.o2v == {} and alloc.open_k == {} and alloc.open_v == {}
    assert alloc.krs.live == alloc.vrs.live == 0 and alloc.channel_load == [0, 0, 0, 0]


def test_a_finished_request_disowns_its_granules_and_they_stay_while_bound():
    alloc = Allocator(CONFIG)
    grow(alloc, 1, 2)
    grow(alloc, 2, 1)
    alloc.disown(1)
    assert alloc.open_k == {2: 1} and alloc.open_v == {2: 1}
    assert alloc.o2k[0].owner is None and alloc.o2v[0].owner is None
    assert alloc.o2k[1].owner == 2
    alloc.release_key(0, 0)
    alloc.release_key(0, 1)  # its O2K goes; request 2's stays open
    assert 0 not in alloc.o2k and alloc.open_k == {2: 1}


def test_free_blocks_count_whole_granules_and_a_requests_open_ones():
    alloc = Allocator(CONFIG)
    o2ks, o2vs = CONFIG.krs_count * 2, CONFIG.vrs_count * 4
    assert alloc.free_blocks() == min(o2ks, o2vs) * 16
    grow(alloc, 1, 3)
    assert alloc.free_blocks() == min(o2ks - 1, o2vs - 1) * 16
    assert alloc.free_blocks_for(1) == min(o2ks - 1, o2vs - 1) * 16 + 13
    assert alloc.free_blocks_for(2) == alloc.free_blocks()


def test_the_value_side_bounds_free_blocks_when_it_is_smaller():
    alloc = Allocator(CONFIG)
    assert CONFIG.vrs_count * 4 != CONFIG.krs_count * 2
    alloc.vrs.take()  # one O2V fewer than the O2Ks would allow
    k, v = alloc.krs.free * 16, alloc.vrs.free * 16
    assert alloc.free_blocks() == min(k, v)


def test_cz_slots_fill_a_crs_row_before_the_next():
    alloc = Allocator(CONFIG)
    taken = [alloc.take_slot() for _ in range(33)]
    assert taken == list(range(33))
    alloc.release_slot(5)
    assert alloc.take_slot() == 5


def test_no_granule_left_is_a_capacity_error_that_changes_nothing():
    alloc = Allocator(CONFIG)
    requests = min(CONFIG.krs_count * 2, CONFIG.vrs_count * 4)
    for r in range(requests):  # every request opens its own O2K and O2V
        grow(alloc, r, 1)
    before = state(alloc)
    with pytest.raises(CapacityError, match="no free O2"):
        alloc.plan(requests)
    assert state(alloc) == before


def test_ties_on_load_go_round_robin_from_the_channel_after_the_last_bound():
    alloc = Allocator(CONFIG)
    bound = [grow(alloc, r, 1)[0] for r in range(5)]  # channels 0, 1, 2, 3, 0
    assert alloc.channel_load == [2, 1, 1, 1] and alloc.rr == 1
    alloc.release_key(bound[4].o2k, bound[4].k_slot)  # every channel at 1; rr still 1
    assert alloc.channel_load == [1, 1, 1, 1]
    assert alloc.plan(9).k_slot % 4 == 1  # channel 1 first, not channel 0


def test_a_full_granule_released_leaves_the_requests_open_one_open():
    alloc = Allocator(CONFIG)
    blocks = grow(alloc, 1, 17)  # O2K 0 full, O2K 1 open
    assert alloc.open_k == {1: 1} and alloc.open_v == {1: 1}
    for b in blocks[:16]:
        alloc.release_key(b.o2k, b.k_slot)
        alloc.release_value(b.o2v, b.v_index)
    assert 0 not in alloc.o2k and 0 not in alloc.o2v
    assert alloc.open_k == {1: 1} and alloc.open_v == {1: 1}


def test_disowning_clears_every_granule_the_request_owned():
    alloc = Allocator(CONFIG)
    grow(alloc, 1, 17)  # a full O2K and O2V, and open ones
    alloc.disown(1)
    assert [o.owner for o in alloc.o2k.values()] == [None, None]
    assert [o.owner for o in alloc.o2v.values()] == [None, None]
    assert alloc.open_k == {} and alloc.open_v == {}


def test_a_requests_free_blocks_when_the_value_side_is_the_smaller():
    alloc = Allocator(CONFIG)
    grow(alloc, 1, 3)
    while alloc.vrs.free * 16 >= alloc.krs.free * 16:
        alloc.vrs.take()
    assert alloc.free_blocks_for(1) == alloc.vrs.free * 16 + 13
    assert alloc.free_blocks() == alloc.vrs.free * 16
