"""The embedded engine: vLLM 0.33's block pool order, preemption, block events, conformance.

The unit tests restate traces of real vLLM 0.33.0 (block size 4, 12 blocks: the free-queue
order after frees, LRU eviction on reuse, the ``num_tokens - 1`` hit cap and the duplicate it
makes). The conformance tests replay every golden run in ``tests/data/serving/golden/``
(recorded from the real vLLM scheduler through ``vllm_engine.py``) through the client model
with the embedded engine and require the same steps, preemptions and per-request results.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest
from drive import serve
from patton.serving.block_pool import BlockPool
from patton.serving.conversations import read
from patton.serving.engine import SETTINGS, EmbeddedEngine
from patton.serving.events import BlockEvent, EventKind
from patton.serving.interface import EngineParams, Request
from patton.serving.kv_cache import KVCacheManager, PrefixKeys

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = sorted((ROOT / "tests/data/serving/golden").glob("*.json.gz"))


# --------------------------------------------------------------------------- helpers


class Manager:
    """A KVCacheManager driven like vLLM's scheduler drives it (block size 4)."""

    def __init__(self, num_blocks: int = 12, block_size: int = 4) -> None:
        self.events: list[BlockEvent] = []
        self.kv = KVCacheManager(num_blocks, block_size, 1024, observer=self.events.append)
        self.keys = PrefixKeys(block_size)
        self.seqs: dict[str, tuple[list[int], list[int], list[int]]] = {}  # tokens, keys, [computed]

    def admit(self, rid: str, tokens: list[int]) -> list[int]:
        """Admit a request and prefill it whole; return its hit blocks."""
        keys: list[int] = []
        self.keys.extend(keys, tokens)
        hits = self.kv.hits(keys, len(tokens))
        hit = len(hits) * self.kv.block_size
        assert self.kv.allocate(rid, keys, len(tokens), 0, len(tokens) - hit, hits, whole=True)
        self.seqs[rid] = (list(tokens), keys, [len(tokens)])
        return hits

    def decode(self, rid: str, token: int) -> None:
        """Append one output token (the model's), then schedule it (one decode step)."""
        tokens, keys, computed = self.seqs[rid]
        tokens.append(token)
        self.keys.extend(keys, tokens)
        assert self.kv.allocate(rid, keys, len(tokens), computed[0], 1)
        computed[0] += 1

    def free(self, rid: str) -> None:
        self.kv.free(rid)
        del self.seqs[rid]

    @property
    def queue(self) -> list[int]:
        return self.kv.pool.free_order()


def kinds(events: list[BlockEvent]) -> list[tuple[str, int]]:
    return [(e.kind, e.block_id) for e in events]


def load_golden(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def params_of(golden: dict) -> EngineParams:
    p = golden["params"]
    return EngineParams(block_size=p["block_size"], num_blocks=p["num_blocks"],
                      max_num_seqs=p["max_num_seqs"],
                      max_num_batched_tokens=p["max_num_batched_tokens"],
                      max_model_len=p["max_model_len"],
                      enable_prefix_caching=p.get("enable_prefix_caching", True))


def replay(golden: dict, **engine_kwargs):
    p = golden["params"]
    conversations = read(ROOT / p["conversations"])
    engine = EmbeddedEngine(params_of(golden), **engine_kwargs)
    result = serve(engine, conversations, clients=p["clients"], pool=p["pool"],
                 max_model_len=p["max_model_len"], max_steps=p["max_steps"])
    return engine, result


# ------------------------------------------------------------------ block pool order


def test_initial_queue_skips_null_block():
    pool = BlockPool(5)
    assert pool.free_order() == [1, 2, 3, 4]
    assert pool.num_free == 4
    assert pool.take(2, "r") == [1, 2]
    with pytest.raises(ValueError):
        BlockPool(1)


def test_prefix_keys_are_chained():
    keys = PrefixKeys(2)
    a: list[int] = []
    b: list[int] = []
    keys.extend(a, [1, 2, 3, 4, 5])  # two full blocks; the fifth token has no key yet
    keys.extend(b, [9, 9, 3, 4])  # same second block after a different first block
    assert len(a) == 2 and len(b) == 2
    assert a[1] != b[1]
    c: list[int] = []
    keys.extend(c, [1, 2, 3, 4])
    assert c == a


def test_free_queue_order_matches_vllm_trace():
    """vLLM 0.33 (its free_blocks): unhashed blocks to the head, hashed to the tail."""
    m = Manager()
    a = list(range(100, 110))  # 10 tokens
    assert m.admit("A", a) == []
    assert m.kv.tables["A"] == [1, 2, 3]
    assert [e.block_id for e in m.events if e.kind == EventKind.CACHE] == [1, 2]
    assert m.admit("B", a[:8] + [200, 201]) == [1, 2]  # shares A's 8-token prefix
    assert m.kv.tables["B"] == [1, 2, 4]
    assert m.kv.pool.ref[1:5] == [2, 2, 1, 1]
    m.decode("A", 110)
    m.decode("A", 111)  # block 3 full: cached
    assert m.kv.pool.cached(3)
    m.free("A")  # reversed [3, 2, 1]: only 3 reaches ref 0 (hashed: tail)
    assert m.queue == [5, 6, 7, 8, 9, 10, 11, 3]
    m.free("B")  # reversed [4, 2, 1]: 4 unhashed -> head; 2, 1 hashed -> tail
    assert m.queue == [4, 5, 6, 7, 8, 9, 10, 11, 3, 2, 1]
    m.events.clear()
    m.admit("C", list(range(300, 317)))  # 17 unrelated tokens: pops [4..8], no eviction
    assert m.kv.tables["C"] == [4, 5, 6, 7, 8]
    assert not [e for e in m.events if e.kind == EventKind.EVICT]
    assert m.admit("D", a + [110, 111, 400]) == [1, 2, 3]  # A's 12 tokens + 1
    assert m.kv.tables["D"] == [1, 2, 3, 9]
    m.free("C")
    m.free("D")
    assert m.queue == [9, 8, 10, 11, 7, 6, 5, 4, 3, 2, 1]


def test_lru_eviction_on_reuse_takes_chain_tails_first():
    m = Manager()
    m.admit("A", list(range(100, 113)))  # blocks 1..4, three cached
    m.free("A")  # [4 | 5..11 | 3, 2, 1]
    m.admit("B", list(range(200, 229)))  # 29 tokens: 8 blocks, pops 4..11; none cached yet
    assert m.kv.tables["B"] == [4, 5, 6, 7, 8, 9, 10, 11]
    assert m.queue == [3, 2, 1]
    m.events.clear()
    m.decode("B", 229)
    m.decode("B", 230)
    m.decode("B", 231)
    m.decode("B", 232)  # 33 tokens: a ninth block, taken from the head: A's chain tail
    assert kinds(m.events) == [(EventKind.CACHE, 11), (EventKind.EVICT, 3), (EventKind.ALLOC, 3)]
    assert m.queue == [2, 1]
    keys: list[int] = []
    m.keys.extend(keys, list(range(100, 113)))
    assert m.kv.hits(keys, 13) == [1, 2]  # A's surviving prefix is still a hit


def test_hit_capped_at_num_tokens_minus_one_and_duplicate_key():
    m = Manager()
    prompt = list(range(100, 108))  # block aligned: 2 full blocks
    m.admit("A", prompt)
    assert m.kv.tables["A"] == [1, 2] and m.kv.pool.cached(2)
    m.free("A")
    assert m.admit("B", prompt) == [1]  # the last block is recomputed...
    assert m.kv.tables["B"] == [1, 3]
    key = m.kv.pool.key[2]
    assert key is not None and m.kv.pool.key[3] == key  # ...into a second block, same key
    assert m.kv.pool._map[key] == [2, 3]
    assert m.kv.pool.lookup(key) == 2  # the first cached block serves hits
    m.free("B")
    # The queue is [4..11, 2, 3, 1]; popping up to block 2 evicts it, then 3 serves the key.
    m.admit("C", list(range(300, 333)))  # 33 tokens: 9 blocks = 4..11 and 2
    assert m.kv.tables["C"][-1] == 2
    assert m.kv.pool.lookup(key) == 3
    m.free("C")
    assert m.admit("D", prompt + [500]) == [1, 3]


def test_admission_counts_hit_blocks_in_the_free_queue():
    """A hit block with ref 0 counts against free blocks: touching takes it out of the queue."""
    m = Manager(num_blocks=4)  # 3 usable
    m.admit("A", list(range(100, 109)))  # 9 tokens: blocks 1, 2 (cached) and 3
    m.free("A")  # [3 | 2, 1]
    keys: list[int] = []
    tokens = list(range(100, 108)) + [7, 7, 7, 7, 7]  # 13 tokens: hits 1, 2; needs 2 more blocks
    m.keys.extend(keys, tokens)
    hits = m.kv.hits(keys, len(tokens))
    assert hits == [1, 2]
    # 2 new blocks + 2 hit blocks in the queue > 3 free: refused, nothing changed.
    assert not m.kv.allocate("B", keys, len(tokens), 0, len(tokens) - 8, hits, whole=True)
    assert m.queue == [3, 2, 1] and "B" not in m.kv.tables
    # Only the first chunk would fit, but the whole sequence must.
    assert not m.kv.allocate("B", keys, len(tokens), 0, 1, hits, whole=True)
    assert m.kv.allocate("B", keys, len(tokens), 0, 1, hits, whole=False)
    assert m.kv.tables["B"] == [1, 2, 3]


# ------------------------------------------------------------------------ preemption


def small_engine(num_blocks: int, **kw) -> tuple[EmbeddedEngine, list[BlockEvent]]:
    events: list[BlockEvent] = []
    params = EngineParams(block_size=4, num_blocks=num_blocks, max_num_seqs=4,
                        max_num_batched_tokens=64, max_model_len=64)
    return EmbeddedEngine(params, observer=events.append, **kw), events


def test_preemption_takes_the_last_running_request():
    engine, events = small_engine(num_blocks=7)  # 6 usable
    engine.add(Request("A", tuple(range(100, 107)), tuple(range(1000, 1008))))
    engine.add(Request("B", tuple(range(200, 207)), tuple(range(2000, 2008))))
    out = engine.step()
    assert [(s.request_id, s.num_tokens) for s in out.scheduled] == [("A", 7), ("B", 7)]
    for _ in range(5):  # both decode; blocks run out when they grow to 13 tokens
        out = engine.step()
        assert not out.preempted
    b = engine.requests["B"]
    assert len(b.tokens) == 13 and engine.num_free_blocks == 0
    tables = {rid: engine.kv.blocks(rid) for rid in "AB"}
    events.clear()
    out = engine.step()
    assert out.preempted == ("B",)
    assert [(s.request_id, s.num_tokens) for s in out.scheduled] == [("A", 1)]
    # B: computed tokens reset, output tokens kept, front of the waiting queue, no blocks.
    assert b.status == "preempted" and b.num_computed == 0 and b.num_output == 6
    assert engine.waiting[0] is b and [s.request_id for s in engine.running] == ["A"]
    assert engine.kv.blocks("B") == []
    # B's blocks are released tail first (all cached: to the tail); A's new block is B's
    # chain tail, evicted on reuse.
    b_blocks = tables["B"]
    assert kinds(events)[:3] == [(EventKind.RELEASE, b_blocks[2]), (EventKind.RELEASE, b_blocks[1]),
                                 (EventKind.RELEASE, b_blocks[0])]
    assert kinds(events)[3:5] == [(EventKind.EVICT, b_blocks[2]), (EventKind.ALLOC, b_blocks[2])]
    # The run goes on; B resumes with its outputs and keeps its first admission's hit (0).
    finished = {}
    for _ in range(40):
        for f in engine.step().finished:
            finished[f.request_id] = f.num_cached_tokens
        if len(finished) == 2:
            break
    assert finished == {"A": 0, "B": 0}
    assert engine.num_free_blocks == 6


def test_no_admission_in_a_step_that_preempted():
    engine, _ = small_engine(num_blocks=7)
    engine.add(Request("A", tuple(range(100, 107)), tuple(range(1000, 1008))))
    engine.add(Request("B", tuple(range(200, 207)), tuple(range(2000, 2008))))
    for _ in range(6):
        engine.step()
    engine.add(Request("C", (5,), (6,)))  # would fit in the blocks B frees
    out = engine.step()
    assert out.preempted == ("B",)
    assert "C" not in {s.request_id for s in out.scheduled}
    assert [s.request_id for s in engine.waiting] == ["B", "C"]


def test_cached_tokens_are_those_of_the_first_admission():
    engine, _ = small_engine(num_blocks=40)
    engine.add(Request("A", tuple(range(100, 109)), (1, 2)))
    while not engine.step().finished:
        pass
    engine.add(Request("B", tuple(range(100, 109)) + (1, 2, 3), (4,)))
    out = engine.step()
    assert out.scheduled[0].num_tokens == 12 - 8  # hit 8 (two blocks; the third has no key)
    assert out.finished[0].num_cached_tokens == 8


# ------------------------------------------------------------------------ events


def test_event_stream_program_order():
    m = Manager()
    a = list(range(100, 110))
    m.admit("A", a)
    assert kinds(m.events) == [(EventKind.ALLOC, 1), (EventKind.ALLOC, 2), (EventKind.ALLOC, 3),
                               (EventKind.CACHE, 1), (EventKind.CACHE, 2)]
    m.events.clear()
    m.admit("B", a[:8] + [1, 2])
    assert kinds(m.events) == [(EventKind.SHARE, 1), (EventKind.SHARE, 2), (EventKind.ALLOC, 4)]
    assert [e.ref for e in m.events] == [2, 2, 1]
    m.events.clear()
    m.free("A")
    assert kinds(m.events) == [(EventKind.RELEASE, 3), (EventKind.UNSHARE, 2),
                               (EventKind.UNSHARE, 1)]
    assert all(e.request_id == "A" for e in m.events)
    m.events.clear()
    m.admit("C", a + [5, 5, 5])  # hits 1, 2 (block 3 was never full): 3 is reused, unhashed
    assert kinds(m.events) == [(EventKind.SHARE, 1), (EventKind.SHARE, 2), (EventKind.ALLOC, 3),
                               (EventKind.ALLOC, 5), (EventKind.CACHE, 3)]
    e = m.events[-1]
    assert e.key == m.kv.pool.key[3] and e.request_id == "C"


def mirror(events: list[BlockEvent], num_blocks: int) -> tuple[list[int], list[bool]]:
    """Rebuild ref counts and the cached set from events alone."""
    ref = [0] * num_blocks
    cached = [False] * num_blocks
    for e in events:
        if e.kind in (EventKind.ALLOC, EventKind.SHARE):
            assert e.kind != EventKind.ALLOC or (ref[e.block_id] == 0 and not cached[e.block_id])
            ref[e.block_id] += 1
        elif e.kind in (EventKind.UNSHARE, EventKind.RELEASE):
            ref[e.block_id] -= 1
            assert (ref[e.block_id] == 0) == (e.kind == EventKind.RELEASE)
        elif e.kind == EventKind.CACHE:
            assert not cached[e.block_id]
            cached[e.block_id] = True
        elif e.kind == EventKind.EVICT:
            assert cached[e.block_id] and ref[e.block_id] == 0
            cached[e.block_id] = False
        assert ref[e.block_id] == e.ref
    return ref, cached


@pytest.mark.parametrize("name", ["c8-p32-preempt", "c8-p16-evict"])
def test_events_mirror_the_pool(name):
    golden = load_golden(ROOT / f"tests/data/serving/golden/{name}.json.gz")
    events: list[BlockEvent] = []
    engine, result = replay(golden, observer=events.append)
    pool = engine.kv.pool
    ref, cached = mirror(events, pool.num_blocks)
    assert ref == pool.ref
    assert cached == [k is not None for k in pool.key]
    assert sum(e.kind == EventKind.EVICT for e in events) > 0
    assert result.as_dict()["steps"] == golden["steps"]  # observing changes nothing


# ----------------------------------------------------------------------- placement


class Capacity:
    """A toy runtime holding at most ``limit`` blocks of KV (allocated or cached)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held: set[int] = set()
        self.cached: set[int] = set()
        self.refusals = 0
        self.peak = 0

    def can_place(self, request_id: str, num_blocks: int) -> bool:
        ok = len(self.held) + num_blocks <= self.limit
        self.refusals += not ok
        return ok

    def __call__(self, e: BlockEvent) -> None:
        if e.kind == EventKind.ALLOC:
            self.held.add(e.block_id)
        elif e.kind == EventKind.CACHE:
            self.cached.add(e.block_id)
        elif e.kind == EventKind.RELEASE and e.block_id not in self.cached:
            self.held.discard(e.block_id)
        elif e.kind == EventKind.EVICT:
            self.cached.discard(e.block_id)
            self.held.discard(e.block_id)
        self.peak = max(self.peak, len(self.held))


def test_placement_that_always_accepts_changes_nothing():
    golden = load_golden(ROOT / "tests/data/serving/golden/c8-p16-evict.json.gz")

    class Yes:
        def can_place(self, request_id: str, num_blocks: int) -> bool:
            return True

    _, result = replay(golden, placement=Yes())
    assert result.as_dict()["steps"] == golden["steps"]


def test_refused_placement_evicts_then_preempts():
    golden = load_golden(ROOT / "tests/data/serving/golden/c8-p16-evict.json.gz")
    golden["params"]["max_steps"] = 600
    _, gpu = replay(golden)
    runtime = Capacity(limit=120)  # of 255 usable blocks
    _, pim = replay(golden, observer=runtime, placement=runtime)
    assert runtime.refusals > 0
    assert runtime.peak <= runtime.limit
    assert pim.report().preemptions > gpu.report().preemptions
    assert pim.report().cached_tokens < gpu.report().cached_tokens


def test_placement_eviction_follows_vllm_order():
    m = Manager()
    runtime = Capacity(limit=4)
    m.kv.placement = runtime
    m.kv.pool.observer = lambda e: (m.events.append(e), runtime(e))
    m.admit("A", list(range(100, 113)))  # 4 blocks, 3 cached
    m.free("A")  # queue [4 | 5..11 | 3, 2, 1]; the runtime holds 3, 2, 1
    m.events.clear()
    m.admit("B", list(range(200, 209)))  # 3 new blocks: room for 1, so evict 3 then 2
    assert kinds(m.events)[:2] == [(EventKind.EVICT, 3), (EventKind.EVICT, 2)]
    assert m.kv.tables["B"] == [2, 3, 4]  # evicted blocks move to the head: reused first
    assert runtime.held == {1, 2, 3, 4} and m.queue[-1] == 1


# ---------------------------------------------------------------------- conformance


def first_difference(ours: dict, vllm: dict) -> str | None:
    """Describe the first step or request where two runs differ, or None."""
    for i, (a, b) in enumerate(zip(ours["steps"], vllm["steps"])):
        if a != b:
            sa, sb = dict(map(tuple, a["scheduled"])), dict(map(tuple, b["scheduled"]))
            what = []
            if list(sa) != list(sb):
                what.append(f"scheduled order/ids: embedded {list(sa)} vs vLLM {list(sb)}")
            tokens = {r: (sa.get(r), sb.get(r)) for r in sa.keys() | sb.keys()
                      if sa.get(r) != sb.get(r)}
            if tokens:
                what.append(f"tokens (embedded, vLLM): {tokens}")
            if a["preempted"] != b["preempted"]:
                what.append(f"preempted: embedded {a['preempted']} vs vLLM {b['preempted']}")
            return f"step {i}: " + "; ".join(what)
    if len(ours["steps"]) != len(vllm["steps"]):
        return f"steps: embedded ran {len(ours['steps'])}, vLLM {len(vllm['steps'])}"
    for rid in vllm["requests"].keys() | ours["requests"].keys():
        a, b = ours["requests"].get(rid), vllm["requests"].get(rid)
        if a != b:
            return f"request {rid}: embedded {a} vs vLLM {b}"
    if list(ours["requests"]) != list(vllm["requests"]):
        return "request order differs"
    for key in ("report", "complete"):
        if ours[key] != vllm[key]:
            return f"{key}: embedded {ours[key]} vs vLLM {vllm[key]}"
    return None


def test_golden_files_exist():
    assert GOLDEN, "no golden runs in tests/data/serving/golden/"


@pytest.mark.parametrize("path", GOLDEN, ids=[p.name.removesuffix(".json.gz") for p in GOLDEN])
def test_conformance_with_vllm(path):
    golden = load_golden(path)
    settings = golden["vllm"]
    restated = dict(SETTINGS, enable_prefix_caching=params_of(golden).enable_prefix_caching)
    differs = {k: (settings.get(k), v) for k, v in restated.items() if settings.get(k) != v}
    assert not differs, f"recorded with vLLM settings the engine does not restate: {differs}"
    assert settings["max_num_scheduled_tokens"] == golden["params"]["max_num_batched_tokens"]
    conversations = ROOT / golden["params"]["conversations"]
    assert hashlib.sha256(conversations.read_bytes()).hexdigest() == \
        golden["params"]["conversations_sha256"], f"{conversations} changed since recording"
    _, result = replay(golden)
    diff = first_difference(result.as_dict(), golden)
    assert diff is None, diff


# ------------------------------------------------------------------ prefix caching off

def test_prefix_caching_off_finds_no_hit_and_frees_to_the_head():
    events: list[BlockEvent] = []
    kv = KVCacheManager(12, 4, 1024, observer=events.append, prefix_caching=False)
    keys: list[int] = []
    tokens = list(range(9))
    PrefixKeys(4).extend(keys, tokens)
    assert kv.allocate("a", keys, 9, 0, 9, whole=True)
    assert kv.blocks("a") == [1, 2, 3]
    assert kv.limit("a") == 12  # nothing to cache: the decode fast path covers the slots
    kv.free("a")
    assert kv.hits(keys, 9) == []
    assert kv.pool.free_order()[:4] == [3, 2, 1, 4]  # freed tail first, to the head (LIFO)
    assert {e.kind for e in events} == {EventKind.ALLOC, EventKind.RELEASE}
    assert all(k is None for k in kv.pool.key)


@pytest.mark.parametrize("name", ["c8-p16-evict-nopc", "c8-p32-preempt-nopc"])
def test_prefix_caching_off_is_recorded_from_vllm_and_uses_no_key(name):
    """The two pressure runs with prefix caching off are golden files recorded from real vLLM
    (``benchmarks/record_vllm_golden.py``; ``test_conformance_with_vllm`` replays them step by
    step): no hit, and the engine neither caches nor evicts a block under them."""
    golden = load_golden(ROOT / f"tests/data/serving/golden/{name}.json.gz")
    assert golden["params"]["enable_prefix_caching"] is False
    assert golden["vllm"]["enable_prefix_caching"] is False
    assert golden["report"]["cached_tokens"] == 0 and golden["report"]["preemptions"] > 0
    events: list[BlockEvent] = []
    replay(golden, observer=events.append)
    assert {e.kind for e in events} <= {EventKind.ALLOC, EventKind.RELEASE, EventKind.UNSHARE}
    assert EngineParams().enable_prefix_caching is True  # the default path is unchanged
