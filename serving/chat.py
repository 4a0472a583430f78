"""A multi-turn chat served on an AiM device: engine, PATTON runtime and executor in one loop.

:class:`Chat` drives the embedded engine (vLLM 0.33's scheduler, :mod:`.engine`) with the
client model (:mod:`.clients`) over a conversation file, and gives the PATTON runtime the
engine's block events and the model's KV. The device is any executor
(:mod:`patton.sim.executor`): the functional and cycle models, or live RTL channels under
Verilator (:class:`patton.tb.executor.RtlExecutor`). One scheduler step is:

1. ``engine.schedule()``: every block event (allocate, share a prefix-cache hit, free on a
   preemption, evict) goes to the runtime (:class:`~.runtimes.Attached`, metadata only);
2. **KV writes**: every scheduled token's Key and Value, bf16 from a seeded generator as a
   function of the token prefix (so a prefix-cache hit finds the KV its request would have
   computed), in one program; then the step's **commits** (Commit Zone slot -> reserved O1V)
   in a second;
3. **attention** of every request in its decode phase, per layer: one batched QK^T program,
   the softmax on the host over the scores read back, one batched SV program (prefill
   attention is the GPU's: PATTON keeps the KV, the PIM runs decode attention);
4. ``engine.update()``: output tokens; finished requests release their blocks.

What is checked, per step (every failure in :attr:`ChatStep.failures` names the step, the
block or request, the place or command and the expected and actual values):

- **placements**: every KV element the step wrote is in the device's mats where the runtime's
  metadata says, read back from the RTL's mats and from the functional model's;
- **commits**: the committed block's O1V is the one reserved at allocation, it holds what the
  CZ slot held (read from the device before the commit) plus the filling tokens, the slot is
  released;
- **attention**: scores and outputs bit-exact against the runtime's NumPy reference of the
  datapath and within :data:`~.checks.TOLERANCE` of float64;
- **timing and protocol**: zero violations from ``verify`` (and from the RTL's checker, which
  must agree with it), no read differing between the RTL and the functional model;
- **cycles**: the RTL executed the cycle model's schedule cycle for cycle (every RTL channel's
  segment ends exactly the drain after the model's last command on it, and the model's count
  covers every command).

Faults for checking the checker (:class:`Faults`) corrupt one thing on the way to the device.
"""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.runtime.patton.metadata import ValuePlace
from patton.sim import datapath as dp
from patton.sim.check import verify_from
from patton.sim.device import DEVICE
from patton.sim.executor import Executor, Result
from patton.sim.isa import Opcode
from patton.sim.program import OP_ID, Program, concat
from patton.serving import checks
from patton.serving.block_pool import EVICT, BlockEvent
from patton.serving.clients import ClientError, Clients
from patton.serving.conversations import Conversation
from patton.serving.engine import EmbeddedEngine, EngineParams, Sequence
from patton.serving.runtimes import Attached, Capacity, config_blocks, mirror_errors

__all__ = ["ChatSetup", "DEMO_CONVERSATIONS", "PHASES", "Faults", "ChatStep", "ChatReport",
           "Chat", "TokenKV"]

#: The conversation file ``patton demo`` serves (:func:`demo_conversations`, stored).
DEMO_CONVERSATIONS = Path(__file__).with_name("data") / "chat-demo.jsonl"


def demo_conversations() -> list[Conversation]:
    """Build the demo's conversations: the first 8 ShareGPT conversations (of the first 16,
    messages cut to 16 tokens) with at least two turns, each cut to its first three turns.

    Short turns keep the demo to about a hundred scheduler steps while every mechanism
    occurs: prefills, prefix-cache hits on a conversation's earlier turns, decode steps across
    block boundaries, commits, evictions (``tests/test_chat.py`` checks the stored file is
    this one).
    """
    from patton.serving.conversations import from_sharegpt

    convs = [c for c in from_sharegpt(count=16, max_message_tokens=16) if c.num_turns >= 2]
    return [dataclasses.replace(c, messages=c.messages[:6]) for c in convs[:8]]

#: The phases a step's cycles are split into, in execution order.
PHASES = ("writes", "commits", "qk", "sv")


@dataclass(frozen=True, slots=True)
class ChatSetup:
    """The geometry and the engine of a chat.

    The default is one ChPerHead group of Llama-3-8B (d_head 128: 4 channels hold one KV
    head, the query heads of its GQA group share it), two layers of 8 rows each: 2 Commit Zone
    rows and room for 64 blocks of 16 tokens, behind an engine of 128 blocks (the runtime's
    placement refuses what its granules cannot hold, so cached blocks are evicted).

    Invariants: ``layers * layer_rows <= rows``; ``channels`` is the model's ChPerHead.
    """

    layers: int = 2
    layer_rows: int = 8
    rows: int = 64  # rows per bank of the device (and of the RTL build)
    block_size: int = 16
    num_blocks: int = 128  # the engine's blocks, null block included
    clients: int = 4
    pool: int = 4  # conversations held by the clients at once
    max_num_seqs: int = 4
    max_num_batched_tokens: int = 256
    max_model_len: int = 1024
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("layers", "layer_rows", "rows", "block_size", "clients", "pool",
                     "max_num_seqs", "max_num_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.layers * self.layer_rows > self.rows:
            raise ValueError(f"{self.layers} layers of {self.layer_rows} rows need "
                             f"{self.layers * self.layer_rows} rows; the device has {self.rows}")

    @property
    def model(self) -> ModelSpec:
        """Llama-3-8B's attention geometry for one KV head (its four query heads)."""
        return ModelSpec("llama3-8b-one-kv-head", layers=self.layers, kv_heads=1, q_heads=4,
                         d_head=128)

    def config(self) -> Config:
        """The runtime geometry: :attr:`model` on a 4-channel device of :attr:`rows` rows."""
        return Config(self.model, DEVICE.with_(channels=4, rows=self.rows),
                      block_size=self.block_size, layers=self.layers,
                      layer_rows=self.layer_rows)

    def engine(self) -> EngineParams:
        """The engine parameters."""
        return EngineParams(self.block_size, self.num_blocks, self.max_num_seqs,
                            self.max_num_batched_tokens, self.max_model_len)


class TokenKV:
    """The "model": bf16 Key, Value and query of a token as a function of its token prefix.

    A token's data is drawn from ``(seed, prefix hash)``, where the prefix hash chains the
    token ids from the start of the sequence: two requests with the same prefix get the same
    KV (what a prefix-cache hit relies on), a recomputed prefix gets it again.
    """

    def __init__(self, config: Config, seed: int) -> None:
        self.config = config
        self.seed = seed
        self._shape = (config.n_layers, config.heads, config.d_head)
        self._kv: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._hashes: dict[str, list[int]] = {}

    def hashes(self, request_id: str, tokens: list[int], n: int) -> list[int]:
        """Return the prefix hashes of ``tokens[:n]`` (cached per request; tokens only grow)."""
        h = self._hashes.setdefault(request_id, [])
        last = h[-1] if h else self.seed
        for t in tokens[len(h):n]:
            last = hash((last, t)) & 0x7FFF_FFFF_FFFF_FFFF
            h.append(last)
        return h[:n]

    def _token(self, h: int) -> tuple[np.ndarray, np.ndarray]:
        kv = self._kv.get(h)
        if kv is None:
            rng = np.random.default_rng([self.seed, h])
            kv = self._kv[h] = (dp.to_bf16(rng.standard_normal(self._shape)),
                                dp.to_bf16(rng.standard_normal(self._shape)))
        return kv

    def kv(self, hashes: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Return Keys and Values ``(layers, n, heads, D)`` of the tokens with ``hashes``."""
        if not hashes:
            empty = np.zeros((self._shape[0], 0) + self._shape[1:], np.uint16)
            return empty, empty
        pairs = [self._token(h) for h in hashes]
        return (np.stack([k for k, _ in pairs], axis=1), np.stack([v for _, v in pairs], axis=1))

    def query(self, h: int) -> np.ndarray:
        """Return the query ``(layers, heads, D)`` of the token with prefix hash ``h``."""
        rng = np.random.default_rng([self.seed, h, 1])
        return dp.to_bf16(rng.standard_normal(self._shape))


@dataclass(slots=True)
class Faults:
    """One injected fault, for checking that the loop's checks catch it (tests, ``--fault``).

    ``kind`` is one of :data:`KINDS`; the fault hits the first matching program of step
    ``step`` (or later, if that step has none): ``"kv-column"`` moves one Key write of the
    step's write program one column over; ``"commit-row"`` moves one write of a commit program
    one row down; ``"early"`` issues one command of the RTL schedule a cycle early;
    ``"read-bit"`` flips one bit of one RTL read-out. :attr:`hit` describes what was done.
    """

    KINDS = ("kv-column", "commit-row", "early", "read-bit")

    kind: str
    step: int
    hit: str | None = None  # what was corrupted, once it was
    columns: int = 32  # burst columns per row (a moved column wraps)
    _at: int = -1  # the step the RTL hook was handed out for

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise ValueError(f"unknown fault {self.kind!r}; known: {', '.join(self.KINDS)}")

    def program(self, step: int, phase: str, prog: Program) -> Program:
        """Return ``prog``, corrupted when this is the fault's program."""
        if self.hit is not None or step < self.step:
            return prog
        want = {"kv-column": "writes", "commit-row": "commits"}.get(self.kind)
        if phase != want or not len(prog):
            return prog
        ops = prog.op
        target = OP_ID[Opcode.WR_MEM] if self.kind == "kv-column" else None
        rows = [i for i in range(len(prog))
                if (target is None or ops[i] == target) and prog.row[i] >= 0
                and prog.size[i] > 0]
        if not rows:
            return prog
        i = rows[0]
        if self.kind == "kv-column":
            col = np.array(prog.col)
            col[i] = (int(col[i]) + 1) % self.columns
            bad = dataclasses.replace(prog, col=col)
            self.hit = (f"step {step}: write instruction {i} ({prog[i].opcode.value}) column "
                        f"{int(prog.col[i])} -> {int(col[i])}")
        else:
            row = np.array(prog.row)
            row[i] += 1
            bad = dataclasses.replace(prog, row=row)
            self.hit = (f"step {step}: commit instruction {i} ({prog[i].opcode.value}) row "
                        f"{int(prog.row[i])} -> {int(row[i])}")
        return bad

    def rtl(self, step: int) -> Callable[..., Any] | None:
        """Return the RTL executor's tamper hook for this step, or None."""
        if self.hit is not None or step < self.step or self.kind not in ("early", "read-bit"):
            return None
        self._at = step
        return self._tamper

    def _tamper(self, where: str, commands: list, reads: list | None,
                verify: Callable[[list], list] | None) -> tuple[list, list | None]:
        if self.hit is not None:
            return commands, reads
        if self.kind == "early" and reads is None and verify is not None:
            # the first command that, issued a cycle early, breaks exactly one timing rule
            for j in range(1, len(commands)):
                a, b = commands[j - 1], commands[j]
                if b.cycle - a.cycle < 2:
                    continue
                out = list(commands)
                out[j] = type(b)(**{**_fields(b), "cycle": b.cycle - 1})
                found = verify(out)
                if len(found) == 1 and found[0].kind == "timing":
                    self.hit = (f"step {self._at}: {where}: {b.command.name} due at cycle "
                                f"{b.cycle} issued at {b.cycle - 1}")
                    return out, reads
        if self.kind == "read-bit" and reads:
            r = reads[0]
            data = r.data.copy()
            data[0] ^= 1
            out = list(reads)
            out[0] = type(r)(**{**_fields(r), "data": data})
            self.hit = f"step {self._at}: {where}: read at cycle {r.cycle} lane 0 bit 0 flipped"
            return commands, out
        return commands, reads


def _fields(record: Any) -> dict[str, Any]:
    return {name: getattr(record, name) for name in record.__dataclass_fields__}


@dataclass(slots=True)
class ChatStep:
    """What one scheduler step did and what its checks found.

    Invariants: ``cycles[phase]`` are the cycle model's cycles of the step's programs of that
    phase (:data:`PHASES`); ``failures`` is empty iff every check of the step passed.
    """

    step: int
    requests: int = 0  # requests scheduled
    prefill_tokens: int = 0  # tokens of prefill chunks
    decode_tokens: int = 0  # tokens of decode steps (= requests attended on the device)
    hit_tokens: int = 0  # prompt tokens found in the prefix cache by requests admitted now
    kv_writes: int = 0  # tokens whose KV was written
    commits: int = 0  # Commit Zone slots committed to their O1V
    evictions: int = 0  # cached blocks evicted
    preempted: int = 0  # requests preempted
    finished: int = 0  # requests that produced their last token
    finished_partial: int = 0  # of those, requests whose last block was partial
    cycles: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    rtl_cycles: int = 0  # RTL cycles simulated (max over channels, per program)
    checks: int = 0  # checks passed
    placement_checked: int = 0  # KV elements read back
    placement_mismatches: int = 0  # of those, not where the metadata says
    mismatches: int = 0  # attention results and RTL reads differing from the references
    violations: int = 0  # timing/protocol violations (verify and the RTL checker)
    failures: list[str] = field(default_factory=list)

    @property
    def total_cycles(self) -> int:
        """Cycles of every program of the step."""
        return sum(self.cycles.values())

    def as_dict(self) -> dict[str, Any]:
        """Return the record as plain JSON data."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__}
        out["cycles"] = dict(self.cycles)
        out["total_cycles"] = self.total_cycles
        return out


@dataclass(slots=True)
class ChatReport:
    """A chat's steps and totals."""

    device: str  # "rtl" or "model"
    conversations: int = 0
    requests: int = 0  # requests sent
    finished: int = 0
    complete: bool = False  # every conversation was served to the end
    steps: list[ChatStep] = field(default_factory=list)
    max_tol_ratio: float = 0.0  # worst float64 error / tolerance (<= 1 passes)
    mat_words: int = 0  # words compared between the RTL's mats and the functional model's
    seconds: float = 0.0  # wall time
    rtl_seconds: float = 0.0  # of which waiting for the RTL
    rtl_cycles: int = 0  # RTL cycles of the programs (per program the longest channel's)
    channel_cycles: int = 0  # RTL cycles simulated, summed over the channels

    def total(self, name: str) -> int:
        """Sum of a :class:`ChatStep` counter over the steps."""
        return sum(getattr(s, name) for s in self.steps)

    @property
    def failures(self) -> list[str]:
        """Every step's failures, in order."""
        return [f for s in self.steps for f in s.failures]

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as plain JSON data (the keys of ``patton demo --json``)."""
        cycles = {p: sum(s.cycles[p] for s in self.steps) for p in PHASES}
        names = ("prefill_tokens", "decode_tokens", "hit_tokens", "kv_writes", "commits",
                 "evictions", "preempted", "finished_partial", "checks", "placement_checked",
                 "placement_mismatches", "mismatches", "violations")
        out: dict[str, Any] = {"device": self.device, "steps": len(self.steps),
                               "conversations": self.conversations,
                               "requests": self.requests, "finished": self.finished,
                               "complete": self.complete}
        out.update({n: self.total(n) for n in names})
        out.update({"cycles": sum(cycles.values()), "cycles_by_phase": cycles,
                    "max_tolerance_ratio": self.max_tol_ratio, "mat_words": self.mat_words,
                    "failures": self.failures, "seconds": round(self.seconds, 3)})
        if self.device == "rtl":
            out["rtl_cycles"] = self.rtl_cycles
            out["rtl_seconds"] = round(self.rtl_seconds, 3)
            out["channel_cycles"] = self.channel_cycles
            out["rtl_cycles_per_second"] = round(self.rtl_cycles / max(self.rtl_seconds, 1e-9))
            out["channel_cycles_per_second"] = round(self.channel_cycles
                                                     / max(self.rtl_seconds, 1e-9))
        out["per_step"] = [s.as_dict() for s in self.steps]
        return out


class Chat:
    """One chat being served (see the module docstring).

    Args:
        conversations: the conversations, in file order.
        executor: the device (it must address :meth:`ChatSetup.config`'s device).
        setup: geometry and engine.
        faults: one fault to inject (checks of the checks), or None.
        max_steps: stop after this many steps even if requests are left.
    """

    def __init__(self, conversations: Iterable[Conversation], executor: Executor,
                 setup: ChatSetup = ChatSetup(), *, faults: Faults | None = None,
                 max_steps: int | None = None) -> None:
        self.setup = setup
        self.config = setup.config()
        self.executor = executor
        self.conversations = list(conversations)
        if executor.device != self.config.device:
            raise ValueError(f"the executor's device ({executor.device.channels} channels, "
                             f"{executor.device.rows} rows) is not the chat's "
                             f"({self.config.device.channels}, {self.config.device.rows})")
        self.runtime = Runtime(self.config)
        cap = Capacity("patton", self.config.model.name, setup.num_blocks, setup.block_size,
                       0, config_blocks(self.config), setup.layer_rows, self.config.crs_rows,
                       self.config.o2v_width)
        self.attached = Attached(cap, self.runtime, fill=False)
        self.events: Counter[str] = Counter()
        self.engine = EmbeddedEngine(setup.engine(), observer=self._observe,
                                     placement=self.attached.placement)
        self.clients = Clients(self.conversations, clients=setup.clients, pool=setup.pool,
                               max_model_len=setup.max_model_len)
        self.data = TokenKV(self.config, setup.seed)
        self.faults = faults
        self.max_steps = max_steps
        #: The device is live RTL channels (an RtlExecutor: sessions, mats, a scoreboard).
        self._rtl = hasattr(executor, "sessions")
        self.report = ChatReport("rtl" if self._rtl else "model", len(self.conversations))
        self._scratch = checks.Report()
        self._names: dict[int, str] = {}  # runtime request -> engine request id
        #: Called after every program as ``on_program(step, phase, result)`` (e.g. to mirror
        #: a channel's schedule into a waveform session), or None.
        self.on_program: Callable[[int, str, Result], None] | None = None

    def _observe(self, event: BlockEvent) -> None:
        self.events[event.kind] += 1
        self.attached.observe(event)

    # ---------------------------------------------------------------------- the loop

    def run(self, on_step: Callable[[ChatStep], None] | None = None) -> ChatReport:
        """Serve until every conversation is done (or ``max_steps``); return the report."""
        started = time.perf_counter()
        rep = self.report
        while True:
            for request, _ in self.clients.send():
                self.engine.add(request)
                rep.requests += 1
            if self.clients.in_flight == 0:
                rep.complete = True
                break
            if self.max_steps is not None and len(rep.steps) >= self.max_steps:
                break
            record = self.step()
            rep.steps.append(record)
            if on_step is not None:
                on_step(record)
        rep.max_tol_ratio = self._scratch.max_tol_ratio
        rep.seconds = time.perf_counter() - started
        if self._rtl:
            stats = self.executor.stats
            rep.rtl_seconds = stats.rtl_seconds
            rep.rtl_cycles = stats.rtl_cycles
            # cycles each simulator ran (program gaps included), summed over the channels
            rep.channel_cycles = sum(s.cycles for s in self.executor.sessions.values())
            # the RTL's whole mats vs the functional model's
            board = self.executor.scoreboard
            before = board.mat_mismatches
            rep.mat_words = self.executor.check_mats()
            if board.mat_mismatches != before and rep.steps:
                rep.steps[-1].failures.append(
                    f"end: {board.mat_mismatches - before} mat word(s) of the RTL differ from "
                    "the functional model's")
        return rep

    def step(self) -> ChatStep:
        """Run one scheduler step on the device and check it (see the module docstring)."""
        index = len(self.report.steps)
        rec = ChatStep(index)
        before = Counter(self.events)
        was_running = {s.request_id for s in self.engine.running}
        batch = self.engine.schedule()
        if not batch.scheduled:
            raise ClientError(f"step {index} scheduled nothing with "
                              f"{self.clients.in_flight} request(s) in flight")
        rec.requests = len(batch.scheduled)
        rec.preempted = len(batch.preempted)
        rec.evictions = self.events[EVICT] - before[EVICT]
        items, decode = self._writes(batch, rec, was_running)
        self._write(index, items, rec)
        if decode:
            self._attend(index, decode, rec)
        t = self.config.block_size
        partial = {seq.request_id for seq, rid in decode if self.runtime.seq_len(rid) % t}
        out = self.engine.update(batch)
        rec.finished = len(out.finished)
        rec.finished_partial = sum(f.request_id in partial for f in out.finished)
        self.report.finished += rec.finished
        self.clients.finish(f.request_id for f in out.finished)
        for problem in mirror_errors(self.engine.kv.pool, self.attached):
            rec.failures.append(f"step {index}: {problem}")
        if not rec.failures:
            rec.checks += 1
        return rec

    # ---------------------------------------------------------------------- writes

    def _writes(self, batch: Any, rec: ChatStep, was_running: set[str]
                ) -> tuple[list[tuple[int, int, np.ndarray, np.ndarray]],
                           list[tuple[Sequence, int]]]:
        """Return the step's write items (block, offset, keys, values) and decode requests."""
        t = self.config.block_size
        items = []
        decode = []
        for (seq, n), start in zip(batch.scheduled, batch.starts):
            rid = self.attached.ids[seq.request_id]
            prompt = len(seq.tokens) - seq.num_output
            if seq.request_id not in was_running:
                rec.hit_tokens += start
            if start >= prompt:
                rec.decode_tokens += n
                decode.append((seq, rid))
            else:
                rec.prefill_tokens += n
            hashes = self.data.hashes(seq.request_id, seq.tokens, start + n)[start:]
            keys, values = self.data.kv(hashes)
            table = self.runtime.table(rid)
            pos = start
            while pos < start + n:
                block = table[pos // t]
                end = min(start + n, (pos // t + 1) * t)
                items.append((block, pos % t, keys[:, pos - start:end - start],
                              values[:, pos - start:end - start]))
                pos = end
        rec.kv_writes = sum(k.shape[1] for _, _, k, _ in items)
        return items, decode

    def _write(self, step: int, items: list, rec: ChatStep) -> None:
        """Write the step's KV (one program), then commit (a second); check what landed.

        A commit rewrites the whole block from the runtime's host copy of the CZ slot (the
        slot may be taken by another block in the same call), so what the slot held is read
        from the device before the step's writes and must reappear in the O1V.
        """
        rt = self.runtime
        t = self.config.block_size
        staged = {}
        for block, offset, keys, _ in items:
            meta = rt.blocks[block]
            if meta.filled != offset:
                rec.failures.append(f"step {step}: block {block} holds {meta.filled} tokens "
                                    f"but the engine schedules offset {offset}")
                return
            if meta.cz is not None and offset + keys.shape[1] == t:  # this write commits it
                staged[block] = (meta.cz, meta.slot, meta.value, meta.filled)
        if staged:
            peeks = self._peeks()
            for b, (cz, _, _, filled) in staged.items():
                keys, values = self._block_kv(b, filled)
                for name, peek in peeks:
                    bad, _, first = checks.block_errors(rt, peek, b, keys, values,
                                                        range(filled), cz)
                    if bad:
                        rec.failures.append(f"step {step}: CZ slot of block {b} before its "
                                            f"commit, in {name}: {first}")
        wp = rt.write_program(items)
        writes = concat([wp.key, wp.value])
        commit = wp.commit.copy()
        self._run(step, "writes", writes, rec)
        if len(commit):
            self._run(step, "commits", commit, rec)
        rec.commits = len(staged)
        self._check_placements(step, items, staged, rec)

    def _block_kv(self, block: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The expected Keys and Values of a block's first ``n`` offsets (its owner's tokens)."""
        rt = self.runtime
        meta = rt.blocks[block]
        rid = meta.owner
        state = rt.requests.get(rid)
        if rid not in self._names:
            self._names = {v: k for k, v in self.attached.ids.items()}
        engine_id = self._names[rid]
        seq = self.engine.requests[engine_id]
        position = state.table.index(block) * self.config.block_size
        hashes = self.data.hashes(engine_id, seq.tokens, position + n)[position:]
        return self.data.kv(hashes)

    def _check_placements(self, step: int, items: list, staged: dict, rec: ChatStep) -> None:
        rt = self.runtime
        peeks = self._peeks()
        wrote: dict[int, tuple[int, int]] = {}
        for block, offset, keys, _ in items:
            wrote[block] = (offset, offset + keys.shape[1])
        for block, (_, slot, reserved, filled) in staged.items():
            meta = rt.blocks[block]
            if meta.visible != reserved or not isinstance(meta.visible, ValuePlace):
                rec.failures.append(f"step {step}: block {block} committed to {meta.visible}, "
                                    f"not its reserved O1V {reserved}")
            crs = rt.alloc.crs
            s, q = divmod(slot, crs.per_set)
            holders = [m.block_id for m in rt.blocks.values() if m.slot == slot]
            if meta.cz is not None or meta.slot is not None or block in holders or (
                    crs.used[s] >> q & 1) != bool(holders):
                rec.failures.append(f"step {step}: block {block}'s CZ slot {slot} was not "
                                    f"released by its commit (held by {holders or 'nobody'}, "
                                    f"allocator bit {crs.used[s] >> q & 1})")
            keys, values = self._block_kv(block, self.config.block_size)
            for name, peek in peeks:
                bad, n, first = checks.block_errors(rt, peek, block, keys, values,
                                                    range(self.config.block_size), reserved)
                rec.placement_checked += n
                rec.placement_mismatches += bad
                if bad:
                    rec.failures.append(f"step {step}: commit of block {block} (CZ slot "
                                        f"{slot} held {filled} tokens) in {name}: {first}")
        for block, (lo, hi) in wrote.items():
            if block in staged:  # committed: the whole block is checked above
                continue
            keys, values = self._block_kv(block, hi)
            keys, values = keys[:, lo:], values[:, lo:]
            for name, peek in peeks:
                bad, n, first = checks.block_errors(rt, peek, block, keys, values, range(lo, hi))
                rec.placement_checked += n
                rec.placement_mismatches += bad
                if bad:
                    rec.failures.append(f"step {step}: placement in {name}: {first}")

    def _peeks(self) -> list[tuple[str, checks.Peek]]:
        """Readers of the device's mats now: the RTL's (if any) and the functional model's."""
        out: list[tuple[str, checks.Peek]] = []
        ex = self.executor
        model = getattr(ex, "model", None)
        if self._rtl:
            out.append(("the RTL's mats", _rtl_peek(ex, self.config)))
        if model is not None:
            out.append(("the functional model's mats", model.peek))
        return out

    # ---------------------------------------------------------------------- attention

    def _attend(self, step: int, decode: list[tuple[Sequence, int]], rec: ChatStep) -> None:
        """Batched QK^T, host softmax, batched SV of the decode requests, per layer."""
        c = self.config
        rt = self.runtime
        rids = [rid for _, rid in decode]
        seqs = [seq for seq, _ in decode]
        kv = []
        queries = []
        for seq in seqs:
            n = len(seq.tokens)
            hashes = self.data.hashes(seq.request_id, seq.tokens, n)
            kv.append(self.data.kv(hashes))
            queries.append(self.data.query(hashes[-1]))
        for rid, seq in zip(rids, seqs):
            if rt.seq_len(rid) != len(seq.tokens):
                rec.failures.append(f"step {step}: request {seq.request_id} has "
                                    f"{rt.seq_len(rid)} tokens in the runtime, "
                                    f"{len(seq.tokens)} in the engine")
                return
        index = [rt.token_index(r) for r in rids]
        q = np.stack(queries)  # (requests, layers, heads, D)
        rep = self._scratch
        for layer in range(c.n_layers):
            prog, plans = rt.qk_step(rids, layer, q[:, layer])
            result = self._run(step, "qk", prog, rec)
            width = max(len(rt.table(r)) * c.block_size for r in rids)
            buf = rt.sv_buffer(rids, layer, width)
            probs = []
            k = 0
            for i, plan in enumerate(plans):
                n = plan.readouts(c)
                scores = plan.decode(result.readouts[k:k + n], c)[:, index[i]]
                k += n
                bad = checks.check_scores(kv[i][0][layer], q[i, layer], scores, rep)
                if bad:
                    rec.mismatches += bad
                    rec.failures.append(f"step {step}: layer {layer} request "
                                        f"{seqs[i].request_id}: {bad} QK^T score(s) differ "
                                        "from the reference")
                p = checks.softmax(scores, c.d_head)
                buf[i][:, index[i]] = p
                probs.append(p)
            prog, splans = rt.sv_step(rids, layer, buf)
            result = self._run(step, "sv", prog, rec)
            k = 0
            for i, plan in enumerate(splans):
                n = plan.readouts(c)
                outs = plan.decode(result.readouts[k:k + n], c)
                k += n
                bad = checks.check_outputs(kv[i][1][layer], probs[i], outs, plan, index[i],
                                           len(rt.table(rids[i])), c.block_size, rep)
                if bad:
                    rec.mismatches += bad
                    rec.failures.append(f"step {step}: layer {layer} request "
                                        f"{seqs[i].request_id}: {bad} SV output(s) differ "
                                        "from the reference")
        if rep.max_tol_ratio > 1.0:
            rec.failures.append(f"step {step}: attention error {rep.max_tol_ratio:.3f} x the "
                                "float64 tolerance")

    # ---------------------------------------------------------------------- the device

    def _run(self, step: int, phase: str, prog: Program, rec: ChatStep) -> Result:
        """Run one program; add its cycles and whatever the device's checks found."""
        if self.faults is not None:
            prog = self.faults.program(step, phase, prog)
            if self._rtl:
                self.executor.tamper = self.faults.rtl(step)
        start = getattr(self.executor, "state", None)  # a CycleExecutor's row and mode state
        result = self.executor.run(prog)
        assert result.cycles is not None
        rec.cycles[phase] += result.cycles
        where = f"step {step} {phase}"
        if self.on_program is not None:
            self.on_program(step, phase, result)
        if self._rtl:
            self._rtl_checks(where, result, rec)
        else:
            self._model_checks(where, start, result, rec)
        return result

    def _model_checks(self, where: str, start: Any, result: Result, rec: ChatStep) -> None:
        """``verify`` each channel's commands from the state the program started in."""
        if result.schedule is None or start is None:
            return
        per: dict[int, list] = {}
        for cmd in result.schedule:
            per.setdefault(cmd.channel, []).append(cmd)
        for ch, cmds in per.items():
            found = verify_from(start, ch, cmds, self.config.device)
            rec.violations += len(found)
            for v in found[:3]:
                rec.failures.append(f"{where}: channel {ch}: {v}")

    def _rtl_checks(self, where: str, result: Any, rec: ChatStep) -> None:
        from patton.tb.player import DRAIN

        rec.rtl_cycles += max(result.rtl_cycles.values(), default=0)
        for d in result.discrepancies:
            if d.kind in ("violation", "checker"):
                rec.violations += 1
            else:
                rec.mismatches += 1
            rec.failures.append(f"{where}: {d}")
        last: dict[int, int] = {}
        for cmd in result.schedule:
            last[cmd.channel] = cmd.cycle
        for ch, cycles in result.rtl_cycles.items():
            if cycles != last.get(ch, -1) + DRAIN or last[ch] >= result.cycles:
                rec.failures.append(f"{where}: channel {ch}: the RTL ran {cycles} cycles, the "
                                    f"cycle model's last command was at {last.get(ch)} of "
                                    f"{result.cycles} (expected {last.get(ch)} + drain "
                                    f"{DRAIN})")


def _rtl_peek(executor: Any, config: Config) -> checks.Peek:
    """A reader of the RTL's mats as they are now (one dump per channel, read lazily)."""
    dev = config.device
    dense: dict[int, np.ndarray] = {}

    def peek(ch: int, bank: int, row: int) -> np.ndarray:
        mats = dense.get(ch)
        if mats is None:
            mats = np.zeros((dev.banks, executor.rows, dev.columns, dev.lanes), np.uint16)
            for (b, r, col), word in executor.mats(ch).items():
                mats[b, r, col] = word
            dense[ch] = mats
        return mats[bank, row]

    return peek
