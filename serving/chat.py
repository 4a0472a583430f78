"""A multi-turn chat served on an AiM device: the step driver with the checks, every step.

:class:`Chat` is the step driver (:mod:`patton.serving.driver`) serving a conversation file
through the embedded engine (vLLM 0.33's scheduler) and the PATTON runtime on any executor
(:mod:`patton.sim.executor`): the functional and cycle models, or live RTL channels under
Verilator (:class:`patton.tb.executor.RtlExecutor`), for one ChPerHead group of Llama-3-8B
(one KV head on 4 AiM channels) or more, up to its 8 KV heads on the whole 32-channel device
(:class:`ChatSetup`). Each step's forward pass
(:mod:`patton.serving.forward`) writes the scheduled tokens' KV (Commit Zone for partial
blocks) in one program and the step's commits in a second, then runs QK^T, a softmax on the
host and SV for every decoding request, layer by layer; the KV are a function of the token
prefix (:class:`~patton.serving.kv_data.TokenKV`). Every step is checked
(:class:`~patton.serving.checks.Checks`: placements, commits, attention, timing, the mirror)
and metered (:class:`ChatStep`); :class:`~patton.serving.faults.Faults` can corrupt one thing
on the way to the device to see the checks catch it. ``docs/chat.md`` has the details.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patton.runtime.models import ModelSpec
from patton.runtime.patton.config import Config
from patton.runtime.patton.lifecycle import Runtime
from patton.serving.adapter import Attached, executor_ext
from patton.serving.capacity import Capacity, config_blocks
from patton.serving.checks import Checks
from patton.serving.conversations import Conversation
from patton.serving.driver import Driver
from patton.serving.engine import EmbeddedEngine
from patton.serving.events import BlockEvent, EventKind
from patton.serving.faults import Faults
from patton.serving.forward import STEP
from patton.serving.interface import EngineParams, Request, StepOutput
from patton.serving.kv_data import TokenKV
from patton.serving.work import StepWork
from patton.sim.device import DEVICE
from patton.sim.executor import Executor, Result, Simulator
from patton.sim.extensions import DEFAULT_EXT, ext_field

__all__ = ["CH_PER_HEAD", "KV_HEADS", "ChatSetup", "DEMO_CONVERSATIONS", "PHASES",
           "ChatStep", "ChatReport", "Chat"]

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


#: Channels of one ChPerHead group: Llama-3-8B's d_head 128 over 4 AiM channels per KV head.
CH_PER_HEAD = 4
#: Llama-3-8B's KV heads: eight groups of 4 fill a 32-channel device.
KV_HEADS = 8


@dataclass(frozen=True, slots=True)
class ChatSetup:
    """The geometry and the engine of a chat.

    The default is one ChPerHead group of Llama-3-8B (d_head 128: 4 channels hold one KV
    head, the query heads of its GQA group share it), two layers of 8 rows each: 2 Commit Zone
    rows and room for 64 blocks of 16 tokens, behind an engine of 128 blocks (the runtime's
    placement refuses what its granules cannot hold, so cached blocks are evicted).
    ``kv_heads=8`` is the whole device: Llama-3-8B's 8 KV heads (32 query heads) on 32
    channels, each head on its own group of 4; every group uses the same rows in its own
    channels (``docs/runtime.md`` §1), so the rows, the blocks and the schedule of the engine
    are those of one group.

    Invariants: ``1 <= kv_heads <= KV_HEADS``; ``channels == kv_heads * CH_PER_HEAD`` and
    :attr:`config`'s ChPerHead is :data:`CH_PER_HEAD`; ``layers * layer_rows <= rows``.
    """

    kv_heads: int = 1  # KV heads of Llama-3-8B served, each on its group of 4 channels
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
        if not 1 <= self.kv_heads <= KV_HEADS:
            raise ValueError(f"kv_heads must be 1..{KV_HEADS} (Llama-3-8B's KV heads), got "
                             f"{self.kv_heads}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")
        if self.layers * self.layer_rows > self.rows:
            raise ValueError(f"{self.layers} layers of {self.layer_rows} rows need "
                             f"{self.layers * self.layer_rows} rows; the device has {self.rows}")

    @classmethod
    def of_channels(cls, channels: int, **kw: Any) -> ChatSetup:
        """The setup on ``channels`` AiM channels: a multiple of :data:`CH_PER_HEAD` up to
        ``KV_HEADS * CH_PER_HEAD`` (32), one KV head per group of 4 (``ValueError``
        otherwise); ``kw`` are the other fields."""
        if channels % CH_PER_HEAD or not CH_PER_HEAD <= channels <= KV_HEADS * CH_PER_HEAD:
            raise ValueError(f"channels must be a multiple of {CH_PER_HEAD} from {CH_PER_HEAD} "
                             f"to {KV_HEADS * CH_PER_HEAD} (one KV head of Llama-3-8B per "
                             f"{CH_PER_HEAD} channels), got {channels}")
        return cls(kv_heads=channels // CH_PER_HEAD, **kw)

    @property
    def channels(self) -> int:
        """The device's AiM channels: :data:`CH_PER_HEAD` per KV head."""
        return self.kv_heads * CH_PER_HEAD

    @property
    def geometry(self) -> str:
        """The heads and channels in words (``one KV head on 4 AiM channels``)."""
        heads = "one KV head" if self.kv_heads == 1 else f"{self.kv_heads} KV heads"
        return f"{heads} on {self.channels} AiM channels"

    @property
    def model(self) -> ModelSpec:
        """Llama-3-8B's attention geometry for :attr:`kv_heads` KV heads (4 query heads
        each), :attr:`layers` of its layers."""
        name = ("llama3-8b-one-kv-head" if self.kv_heads == 1 else
                f"llama3-8b-{self.kv_heads}-kv-heads")
        return ModelSpec(name, layers=self.layers, kv_heads=self.kv_heads,
                         q_heads=4 * self.kv_heads, d_head=128)

    def config(self) -> Config:
        """The runtime geometry: :attr:`model` on a device of :attr:`channels` channels of
        :attr:`rows` rows."""
        config = Config(self.model, DEVICE.with_(channels=self.channels, rows=self.rows),
                        block_size=self.block_size, layers=self.layers,
                        layer_rows=self.layer_rows)
        assert config.ch_per_head == CH_PER_HEAD, config.ch_per_head
        return config

    def engine(self) -> EngineParams:
        """The engine parameters."""
        return EngineParams(self.block_size, self.num_blocks, self.max_num_seqs,
                            self.max_num_batched_tokens, self.max_model_len)


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
    """A chat's steps and totals.

    Invariants: ``channels == kv_heads * CH_PER_HEAD`` (:class:`ChatSetup`).
    """

    device: str  # "rtl" or "model"
    conversations: int = 0
    kv_heads: int = 1  # KV heads served (ChatSetup.kv_heads)
    channels: int = CH_PER_HEAD  # AiM channels of the device (each its own simulator on RTL)
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
    device_ext: str = DEFAULT_EXT  # the device's extension set (the executor's timing table)

    def total(self, name: str) -> int:
        """Sum of a :class:`ChatStep` counter over the steps."""
        return sum(getattr(s, name) for s in self.steps)

    @property
    def failures(self) -> list[str]:
        """Every step's failures, in order."""
        return [f for s in self.steps for f in s.failures]

    def as_dict(self) -> dict[str, Any]:
        """Return the figures as plain JSON data (the keys of ``patton demo --json``).

        ``kv_heads`` and ``channels`` are there when the chat is on more than one ChPerHead
        group: a one-group chat's figures (one KV head, 4 channels) keep the keys they had
        before the device grew, so their records stay comparable; likewise ``device_ext``
        only on a device with extensions (:func:`~patton.sim.extensions.ext_field`). The
        counts cover every head and channel (``placement_checked`` counts the elements of
        every head, ``channel_cycles`` the cycles of every channel's simulator).
        """
        cycles = {p: sum(s.cycles[p] for s in self.steps) for p in PHASES}
        names = ("prefill_tokens", "decode_tokens", "hit_tokens", "kv_writes", "commits",
                 "evictions", "preempted", "finished_partial", "checks", "placement_checked",
                 "placement_mismatches", "mismatches", "violations")
        out: dict[str, Any] = {"device": self.device, **ext_field(self.device_ext)}
        if self.channels != CH_PER_HEAD:
            out.update({"kv_heads": self.kv_heads, "channels": self.channels})
        out.update({"steps": len(self.steps), "conversations": self.conversations,
                    "requests": self.requests, "finished": self.finished,
                    "complete": self.complete})
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


#: What a step's record takes from the checks' findings (:class:`~patton.serving.checks.Found`).
_FOUND = ("commits", "placement_checked", "placement_mismatches", "mismatches", "violations",
          "failures")


class Chat:
    """One chat being served (see the module docstring).

    Args:
        conversations: the conversations, in file order.
        executor: the device (it must address :meth:`ChatSetup.config`'s device); the
            runtime's programs use its extension set (its timing table's,
            :func:`~patton.serving.adapter.executor_ext`).
        setup: geometry and engine.
        faults: one fault to inject (checks of the checks), or None.
        max_steps: stop after this many steps even if requests are left.
        observers: more observers of the driver (e.g. a waveform mirror's ``ran`` hook).
    """

    def __init__(self, conversations: Iterable[Conversation], executor: Executor,
                 setup: ChatSetup = ChatSetup(), *, faults: Faults | None = None,
                 max_steps: int | None = None, observers: Sequence[object] = ()) -> None:
        self.setup = setup
        self.config = setup.config()
        self.executor = executor
        self.conversations = list(conversations)
        if executor.device != self.config.device:
            raise ValueError(f"the executor's device ({executor.device.channels} channels, "
                             f"{executor.device.rows} rows) is not the chat's "
                             f"({self.config.device.channels}, {self.config.device.rows})")
        self.runtime = Runtime(self.config, device_ext=executor_ext(executor))
        cap = Capacity("patton", self.config.model.name, setup.num_blocks, setup.block_size,
                       0, config_blocks(self.config), setup.layer_rows, self.config.crs_rows,
                       self.config.o2v_width)
        self.attached = Attached(cap, self.runtime, fill=False)
        self.data = TokenKV(self.config, setup.seed)
        self.checks = Checks(self.attached, self.data, executor)
        self.faults = faults
        self.simulator = isinstance(executor, Simulator)
        self.report = ChatReport("rtl" if self.simulator else "model", len(self.conversations),
                                 kv_heads=setup.kv_heads, channels=setup.channels,
                                 device_ext=self.runtime.device_ext)
        self.on_step: Callable[[ChatStep], None] | None = None
        self._record = ChatStep(-1)
        self._evictions = 0
        self._partial: set[str] = set()
        self.driver = Driver(EmbeddedEngine, setup.engine(), self.conversations,
                             clients=setup.clients, pool=setup.pool, attached=self.attached,
                             observers=[self.checks, *([faults] if faults else []), self,
                                        *observers],
                             data=self.data, executor=executor, batching=STEP,
                             max_steps=max_steps)
        self.engine = self.driver.engine

    # ---------------------------------------------------------------------- the loop

    def run(self, on_step: Callable[[ChatStep], None] | None = None) -> ChatReport:
        """Serve until every conversation is done (or ``max_steps``); return the report."""
        started = time.perf_counter()
        rep = self.report
        self.on_step = on_step
        rep.complete = self.driver.run().complete
        rep.max_tol_ratio = self.checks.accuracy.max_tol_ratio
        rep.seconds = time.perf_counter() - started
        if isinstance(self.executor, Simulator):
            sim = self.executor.simulated()
            rep.rtl_seconds, rep.rtl_cycles, rep.channel_cycles = (sim.seconds, sim.cycles,
                                                                   sim.channel_cycles)
            rep.mat_words, differ = self.executor.compare_mats()  # the whole mats, at the end
            if differ and rep.steps:
                rep.steps[-1].failures.append(
                    f"end: {differ} mat word(s) of the RTL differ from the functional model's")
        return rep

    # ---------------------------------------------------------------- observer hooks

    def sent(self, request: Request, history: int) -> None:
        """A request was sent."""
        self.report.requests += 1

    def event(self, event: BlockEvent) -> None:
        """Count the evictions (they happen while the step is scheduled)."""
        if event.kind == EventKind.EVICT:
            self._evictions += 1

    def scheduled(self, work: StepWork) -> None:
        """Begin the step's record."""
        rec = self._record = ChatStep(work.index)
        rec.requests = len(work.entries)
        rec.preempted = len(work.schedule.preempted)
        rec.evictions, self._evictions = self._evictions, 0
        for e in work.entries:
            if e.admitted:
                rec.hit_tokens += e.start
            if e.decode:
                rec.decode_tokens += e.tokens
            else:
                rec.prefill_tokens += e.tokens
        rec.kv_writes = sum(e.tokens for e in work.entries)
        self._partial = set()

    def ran(self, work: StepWork, phase: str, prog: Any, result: Result | None) -> None:
        """Add a program's cycles to its phase."""
        assert result is not None and result.cycles is not None
        self._record.cycles[phase] += result.cycles
        if result.simulated_cycles is not None:
            self._record.rtl_cycles += result.simulated_cycles

    def attending(self, work: StepWork) -> None:
        """Note the decode requests whose last block is partial (before any finishes)."""
        t = self.config.block_size
        self._partial = {e.seq.request_id for e in work.decode
                         if self.runtime.seq_len(e.request) % t}

    def stepped(self, work: StepWork | None, out: StepOutput) -> None:
        """Close the step's record with what the checks found."""
        rec, found = self._record, self.checks.found
        rec.finished = len(out.finished)
        rec.finished_partial = sum(f.request_id in self._partial for f in out.finished)
        self.report.finished += rec.finished
        for name in _FOUND:
            setattr(rec, name, getattr(found, name))
        if not rec.failures:
            rec.checks += 1
        self.report.steps.append(rec)
        if self.on_step is not None:
            self.on_step(rec)
