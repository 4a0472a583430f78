"""Random multi-request scenarios: generate a replayable event log, execute it, check it.

:func:`generate` drives a PATTON runtime like a small vLLM scheduler (multi-turn
conversations, chunk-free prefill, decode across block boundaries, prefix sharing with cached
blocks of a conversation's previous turn, LRU eviction under capacity pressure, block-id
reuse) and records every block event. :func:`execute` replays a log on any runtime mode,
optionally on the functional model (checking every attention result and every token's
placement) and on the cycle model (Value writes of decode steps, commits included).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import numpy as np

from patton.sim import datapath as dp
from patton.sim.cycle_model import CycleModel
from patton.sim.energy import energy
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Instruction, Opcode

from . import reference as ref
from .config import Config
from .errors import CapacityError
from .lifecycle import Runtime
from .metadata import CzPlace, Mode

#: Stated float64 tolerance, relative to ``sum |a_i b_i|`` of each dot product: one bf16
#: read-out rounding per segment (at most 2**-8 of the partial, reached when one term dominates
#: and the result sits just above a power of two) plus 2**-16 for the accumulator's error
#: (below 1e-6, ``docs/numerics.md``) and the host's float32 sums of segment read-outs.
TOLERANCE = 2.0 ** -8 + 2.0 ** -16

__all__ = ["TOLERANCE", "Event", "Tokens", "generate", "execute", "origins", "Report", "token_kv",
           "check_placements"]

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


@dataclass(slots=True)
class Report:
    """What :func:`execute` measured."""

    attends: int = 0  # attention checks run
    max_abs_err_qk: float = 0.0  # vs float64
    max_abs_err_sv: float = 0.0  # vs float64
    max_tol_ratio: float = 0.0  # worst |err| / tolerance (<= 1 passes)
    exact_mismatches_qk: int = 0  # scores differing from the datapath reference
    exact_mismatches_sv: int = 0  # outputs differing from the datapath reference
    placement_mismatches: int = 0  # K/V elements not where the metadata says
    placement_checked: int = 0  # K/V elements checked
    decode_steps: int = 0  # decode events
    value_writes: int = 0  # single-token Value writes
    commits: int = 0  # CZ commits
    value_write_activations: int = 0  # bank-row activations of decode Value writes + commits
    value_write_cycles: int = 0  # cycle-model cycles of those programs
    value_write_commands: int = 0  # DRAM commands of those programs
    value_write_energy_nj: float = 0.0  # energy model of those programs


def _activations(counts: dict[int, dict[str, int]]) -> int:
    return sum(c.get("ACT", 0) + 4 * c.get("ACT4", 0) + 16 * c.get("ACT16", 0)
               for c in counts.values())


def apply_lifecycle(rt: Runtime, event: tuple) -> bool:
    """Apply an ``alloc``/``share``/``finish``/``evict`` event; return False for other kinds."""
    kind = event[0]
    if kind == "alloc":
        rt.allocate(event[1], event[2])
    elif kind == "share":
        rt.share(event[1], event[2])
    elif kind == "finish":
        rt.finish(event[1])
    elif kind == "evict":
        rt.evict(event[1])
    else:
        return False
    return True


def execute(config: Config, log: list[Event], mode: Mode = Mode.PATTON, *, seed: int = 0,
            functional: bool = True, cycles: bool = False, placements: bool = True,
            token_op: str = "abk", model: FunctionalModel | None = None,
            sink: list[Instruction] | None = None) -> tuple[Runtime, Report]:
    """Replay ``log`` on a fresh runtime; check on the functional model and time Value writes.

    Args:
        config: geometry (as for :func:`generate`).
        log: events.
        mode: runtime mode.
        seed: the data seed (as for :func:`generate`).
        functional: run every program on the functional model and check attention.
        cycles: run each decode step's Value writes (and commits) on the cycle model.
        placements: after the log, read every bound token back from the mats.
        token_op: the no-CZ single-token Value write (see :class:`Runtime`).
        model: the functional model to run on (default: a fresh one when ``functional``).
        sink: if given, every program run on the functional model is appended to it (in
            order; add an EOC and it is one replayable trace of the whole scenario).
    """
    rt = Runtime(config, mode, token_op=token_op)
    data = Tokens(config, seed)
    fm = model if model is not None else FunctionalModel(config.device) if functional else None
    cm = CycleModel(config.device) if cycles else None
    rep = Report()
    origin: dict[int, tuple[int, int]] = {}  # block id -> (conv, position of offset 0)
    eoc = Instruction(Opcode.EOC)
    for ev in log:
        kind = ev[0]
        if apply_lifecycle(rt, ev):
            continue
        if kind in ("prefill", "decode"):
            items = []
            for bid, start, n, conv, pos0 in ev[1]:
                if start == 0:
                    origin[bid] = (conv, pos0)
                items.append((bid, start, *data.span(conv, pos0, n)))
            w = rt.write_many(items)
            if fm is not None:
                fm.run(w.all)
                if sink is not None:
                    sink += w.all
            if kind == "decode":
                rep.decode_steps += 1
                rep.value_writes += len(items)
                rep.commits += sum(1 for bid, start, n, _, _ in ev[1]
                                   if start + n == config.block_size and start > 0)
                if cm is not None:
                    prog = w.value + w.commit
                    if prog:
                        res = cm.run(prog + [eoc])
                        rep.value_write_cycles += res.cycles
                        rep.value_write_activations += _activations(res.command_counts)
                        rep.value_write_commands += res.commands
                        rep.value_write_energy_nj += energy(
                            res.command_counts, res.bank_state_cycles, res.cycles).total
        elif kind == "attend":
            if fm is not None:
                _attend(rt, fm, data, config, ev[1], ev[2], ev[3], seed, rep, sink)
        else:
            raise ValueError(f"unknown event {kind!r}")
    if fm is not None and placements:
        bad, checked = check_placements(rt, fm, data, origin)
        rep.placement_mismatches += bad
        rep.placement_checked += checked
    return rt, rep


def _attend(rt: Runtime, fm: FunctionalModel, data: Tokens, c: Config, req: int, conv: int,
            step: int, seed: int, rep: Report, sink: list[Instruction] | None) -> None:
    """Run QK^T and SV of one request in every layer and compare with the references."""
    n = rt.seq_len(req)
    keys, values = data.span(conv, 0, n)  # the request's logical sequence
    idx = rt.token_index(req)
    blocks = len(rt.table(req))
    rng = np.random.default_rng([seed, req, step, 7])
    query = dp.to_bf16(rng.standard_normal((c.n_layers, c.heads, c.d_head)))
    rep.attends += 1
    for layer in range(c.n_layers):
        prog, plan = rt.qk(req, layer, query[layer])
        scores = plan.decode(fm.run(prog), c)[:, idx]
        if sink is not None:
            sink += prog
        sv_in = np.zeros((c.heads, n), dtype=np.uint16)
        for g in range(c.heads):
            k, q = keys[layer, :, g], query[layer, g]
            exact = ref.qk_exact(k, q)
            rep.exact_mismatches_qk += int((exact != scores[g]).sum())
            got = dp.from_bf16(scores[g])
            err = np.abs(got - ref.qk_float(k, q))
            bound = TOLERANCE * (np.abs(dp.from_bf16(k)) @ np.abs(dp.from_bf16(q))) + 1e-30
            rep.max_abs_err_qk = max(rep.max_abs_err_qk, float(err.max()))
            rep.max_tol_ratio = max(rep.max_tol_ratio, float((err / bound).max()))
            z = got / np.sqrt(c.d_head)
            p = np.exp(z - z.max())
            sv_in[g] = dp.to_bf16(p / p.sum())
        prog, splan = rt.sv(req, layer, sv_in)
        outs = splan.decode(fm.run(prog), c)
        if sink is not None:
            sink += prog
        for g in range(c.heads):
            vb = np.zeros((blocks * c.block_size, c.d_head), dtype=np.uint16)
            pb = np.zeros(blocks * c.block_size, dtype=np.uint16)
            vb[idx], pb[idx] = values[layer, :, g], sv_in[g]
            exact = ref.sv_exact(vb.reshape(blocks, c.block_size, -1),
                                 pb.reshape(blocks, c.block_size), splan)
            rep.exact_mismatches_sv += int((exact != outs[g]).sum())
            v, p = values[layer, :, g], sv_in[g]
            err = np.abs(outs[g] - ref.sv_float(v, p))
            bound = TOLERANCE * (np.abs(dp.from_bf16(p)) @ np.abs(dp.from_bf16(v))) + 1e-30
            rep.max_abs_err_sv = max(rep.max_abs_err_sv, float(err.max()))
            rep.max_tol_ratio = max(rep.max_tol_ratio, float((err / bound).max()))


def check_placements(rt: Runtime, fm: FunctionalModel, data: Tokens,
                     origin: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """Read every written token of every bound block from the mats; return (bad, checked).

    A Key element is checked at (channel, bank = offset, row, burst, lane) of its O1K; a Value
    element at its CZ slot (lane = offset) or O1V, as :meth:`Runtime.placements` says.
    """
    c = rt.config
    rows: dict[tuple[int, int, int], np.ndarray] = {}

    def peek(ch: int, bank: int, row: int) -> np.ndarray:
        key = (ch, bank, row)
        if key not in rows:
            rows[key] = fm.peek(ch, bank, row)
        return rows[key]

    bad = checked = 0
    e, banks = c.bursts, c.device.banks
    for bid, meta in rt.blocks.items():
        conv, pos0 = origin[bid]
        kp, vp = rt.placements(bid)
        keys, values = data.span(conv, pos0, meta.filled)
        for layer in range(c.n_layers):
            for g in range(c.heads):
                kch = c.channel(g, kp.p)
                krow = c.row(layer, kp.row)
                for t in range(meta.filled):
                    got = peek(kch, t, krow)[kp.col:kp.col + e].reshape(-1)
                    bad += int((got != keys[layer, t, g]).sum())
                    checked += c.d_head
                for p in range(c.ch_per_head):
                    ch = c.channel(g, p)
                    for i in range(c.v_rows):
                        if isinstance(vp, CzPlace):
                            row, col = c.row(layer, vp.row), vp.col0 + i
                        else:
                            row, col = c.row(layer, vp.row0 + i), vp.col
                        for b in range(banks):
                            got = peek(ch, b, row)[col, :meta.filled]
                            want = values[layer, :, g, c.value_dim(p, i, b)]
                            bad += int((got != want).sum())
                            checked += meta.filled
    return bad, checked


def origins(log: list[Event]) -> dict[int, tuple[int, int]]:
    """Return, per block id, the (conversation, position) its latest binding was written from."""
    out: dict[int, tuple[int, int]] = {}
    for ev in log:
        if ev[0] in ("prefill", "decode"):
            for bid, start, _, conv, pos0 in ev[1]:
                if start == 0:
                    out[bid] = (conv, pos0)
    return out
