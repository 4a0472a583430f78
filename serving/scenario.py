"""Random serving scenarios: replayable event logs of a small vLLM-like scheduler, and their data.

:func:`generate` drives a PATTON runtime like a small vLLM scheduler (multi-turn
conversations, chunk-free prefill, decode across block boundaries, prefix sharing with cached
blocks of a conversation's previous turn, LRU eviction under capacity pressure, block-id
reuse) and records every block event (:data:`Event`); :mod:`patton.serving.loop` replays a
log on any runtime mode. Token data is a pure function of (seed, conversation, position)
(:class:`Tokens`), so a replay writes what the generator meant.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.errors import CapacityError
from patton.runtime.patton.lifecycle import Runtime
from patton.sim import datapath as dp

__all__ = ["Event", "Tokens", "token_kv", "generate", "origins"]

#: One block event: ``(kind, *args)``; kinds ``alloc`` (req, bid), ``share`` (req, bid),
#: ``prefill`` / ``decode`` ([(bid, start, n, conv, pos0), ...]), ``finish`` (req),
#: ``evict`` (bid), ``attend`` (req, conv, step).
Event = tuple


class Tokens:
    """Deterministic Key/Value data per (conversation, position): recomputation reproduces it."""

    def __init__(self, config: Config, seed: int) -> None:
        self.config = config
        self.seed = seed
        self.cache: dict[tuple[int, int], tuple[np.ndarray, np.ndarray]] = {}

    def __call__(self, conv: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
        hit = self.cache.get((conv, pos))
        if hit is None:
            c = self.config
            rng = np.random.default_rng([self.seed, conv, pos])
            x = rng.standard_normal((2, c.n_layers, c.heads, c.d_head))
            hit = (dp.to_bf16(x[0]), dp.to_bf16(x[1]))
            self.cache[(conv, pos)] = hit
        return hit

    def span(self, conv: int, pos0: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Return ``(layers, n, heads, D)`` Keys and Values of positions ``pos0 ..``."""
        kv = [self(conv, p) for p in range(pos0, pos0 + n)]
        return (np.stack([k for k, _ in kv], axis=1), np.stack([v for _, v in kv], axis=1))


def token_kv(config: Config, seed: int, conv: int, pos: int) -> tuple[np.ndarray, np.ndarray]:
    """Return the ``(layers, heads, D)`` Key and Value of one token of a conversation."""
    return Tokens(config, seed)(conv, pos)


@dataclass(slots=True)
class _Conv:
    """A conversation: its tokens so far and the blocks of its last finished turn."""

    length: int = 0  # tokens of the finished turns
    blocks: list[int] = field(default_factory=list)  # block ids holding positions 0..


@dataclass(slots=True)
class _Live:
    """A running request."""

    conv: int  # conversation
    length: int  # tokens written
    target: int  # length at which it finishes
    blocks: list[int] = field(default_factory=list)  # its table


def generate(config: Config, *, requests: int = 4, steps: int = 40, seed: int = 0,
             attend_every: int = 8, evict_rate: float = 0.05,
             prompt: tuple[int, int] = (1, 40), decode: tuple[int, int] = (4, 40)) -> list[Event]:
    """Return the event log of a random scenario (driven against a PATTON runtime).

    Args:
        config: geometry.
        requests: concurrent requests.
        steps: decode steps.
        seed: randomness (the log is a pure function of the arguments).
        attend_every: emit attention checks every this many steps (and at the end).
        evict_rate: chance per step of evicting one cached block without pressure.
        prompt: range of new prompt tokens per turn.
        decode: range of decoded tokens per turn.
    """
    rng = np.random.default_rng(seed)
    rt = Runtime(config)
    t = config.block_size
    log: list[Event] = []
    convs: dict[int, _Conv] = {}
    live: dict[int, _Live] = {}
    lru: OrderedDict[int, None] = OrderedDict()  # cached block ids, least recent first
    free_ids: list[int] = []
    content: dict[int, tuple[int, int]] = {}  # bound block id -> (conversation, position)
    next_id = [0]
    next_req = [0]

    def new_id() -> int:
        if free_ids:
            return free_ids.pop(0)
        next_id[0] += 1
        return next_id[0] - 1

    def evict_one() -> bool:
        if not lru:
            return False
        bid, _ = lru.popitem(last=False)
        rt.evict(bid)
        log.append(("evict", bid))
        free_ids.append(bid)
        return True

    def allocate(req: int) -> int | None:
        while True:
            bid = new_id()
            try:
                rt.allocate(req, bid)
            except CapacityError:
                free_ids.insert(0, bid)
                if not evict_one():
                    return None
                continue
            log.append(("alloc", req, bid))
            return bid

    def finish(req: int) -> None:
        lv = live.pop(req)
        if req not in rt.requests:  # never got a block
            return
        table = rt.table(req)
        rt.finish(req)
        log.append(("finish", req))
        conv = convs[lv.conv]
        conv.length = lv.length
        conv.blocks = table
        for b in table:
            if b in rt.blocks and rt.blocks[b].ref_cnt == 0:
                lru[b] = None
                lru.move_to_end(b)
            elif b not in rt.blocks:
                free_ids.append(b)

    def admit() -> None:
        req = next_req[0]
        next_req[0] += 1
        done = [cid for cid, cv in convs.items()
                if cv.length and all(lv.conv != cid for lv in live.values())]
        if done and rng.random() < 0.6:
            cid = int(rng.choice(done))
        else:
            cid = len(convs)
            convs[cid] = _Conv()
        conv = convs[cid]
        lv = _Live(cid, 0, 0)
        # Prefix hits: full blocks of the previous turn that are still mapped, in order.
        for pos, bid in enumerate(conv.blocks):
            meta = rt.blocks.get(bid)
            if meta is None or not meta.full or content.get(bid) != (cid, pos * t) \
                    or (pos + 1) * t > conv.length:
                break
            rt.share(req, bid)
            lru.pop(bid, None)
            log.append(("share", req, bid))
            lv.blocks.append(bid)
            lv.length += t
        total = conv.length + int(rng.integers(*prompt))
        lv.target = total + int(rng.integers(*decode))
        live[req] = lv
        writes = []
        while lv.length < total:
            bid = allocate(req)
            if bid is None:
                break
            n = min(t, total - lv.length)
            content[bid] = (cid, lv.length)
            writes.append((bid, 0, n, cid, lv.length))
            lv.blocks.append(bid)
            lv.length += n
        if writes:
            try:
                rt.write_many([(b, s, *_zeros(config, n)) for b, s, n, _, _ in writes])
            except CapacityError:  # no CZ slot for the partial block: give up this request
                lv.length = 0
                writes = []
            else:
                log.append(("prefill", writes))
        if lv.length < total:  # out of memory: give up this request
            finish(req)

    for step in range(steps):
        for _ in range(requests - len(live)):  # admissions may fail when memory is short
            admit()
        if lru and rng.random() < evict_rate:
            evict_one()
        writes = []
        for req, lv in list(live.items()):
            if lv.length % t == 0:
                bid = allocate(req)
                if bid is None:  # out of memory: preempt (end) the request
                    finish(req)
                    continue
                lv.blocks.append(bid)
                content[bid] = (lv.conv, lv.length)
            writes.append((lv.blocks[-1], lv.length % t, 1, lv.conv, lv.length))
            lv.length += 1
        if writes and rt.free_slots() < sum(1 for w in writes if w[1] == 0):
            # not enough CZ slots for the new partial blocks: preempt those requests
            starting = {w[0] for w in writes if w[1] == 0}
            for req, lv in list(live.items()):
                if lv.blocks and lv.blocks[-1] in starting:
                    finish(req)
            writes = [w for w in writes if w[0] not in starting]
        if writes:
            rt.write_many([(b, s, *_zeros(config, n)) for b, s, n, _, _ in writes])
            log.append(("decode", writes))
        if (step + 1) % attend_every == 0 or step == steps - 1:
            for req, lv in live.items():
                log.append(("attend", req, lv.conv, step))
        for req, lv in list(live.items()):
            if lv.length >= lv.target:
                finish(req)
    return log


def _zeros(config: Config, n: int) -> tuple[np.ndarray, np.ndarray]:
    shape = (config.n_layers, n, config.heads, config.d_head)
    z = np.zeros(shape, dtype=np.uint16)
    return z, z


def origins(log: list[Event]) -> dict[int, tuple[int, int]]:
    """Return, per block id, the (conversation, position) its latest binding was written from."""
    out: dict[int, tuple[int, int]] = {}
    for ev in log:
        if ev[0] in ("prefill", "decode"):
            for bid, start, _, conv, pos0 in ev[1]:
                if start == 0:
                    out[bid] = (conv, pos0)
    return out
