"""Random serving scenarios: random multi-turn conversations through the step driver, checked.

A scenario is the step driver (:mod:`patton.serving.driver`) serving :func:`conversations`,
random multi-turn conversations, through the embedded engine (vLLM 0.33's scheduler) with a
PATTON runtime (or one of its ablations) attached, on a
:class:`~patton.sim.executor.CycleExecutor`: timing and values of every program. The engine
makes every decision a serving system makes (chunked prefill, prefix hits on a conversation's
earlier turns, decode across block boundaries, preemption, eviction of cached blocks when the
pool or the runtime's placement runs out, block-id reuse), with fewer engine blocks than the
workload wants (:attr:`Scenario.num_blocks`), so the pressure paths run. Every step is checked
(:class:`~patton.serving.checks.Checks`: placements, commits, attention bit-exact and within
tolerance, ``verify`` of every schedule, the engine/runtime mirror) and every program's device
figures are summed by phase and runtime call (:class:`~patton.serving.meter.Phases`).

The data is :class:`~patton.serving.kv_data.TokenKV`: a function of the token prefix and the
seed, so a scenario is a pure function of its arguments (``patton runtime scenario``, the
runtime's end-to-end tests).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from patton.runtime.patton.config import Config
from patton.runtime.patton.variants import VARIANTS, Variant
from patton.serving.adapter import Attached, executor_ext
from patton.serving.capacity import Capacity, config_blocks
from patton.serving.checks import Checks
from patton.serving.conversations import Conversation
from patton.serving.driver import Driver
from patton.serving.engine import EmbeddedEngine
from patton.serving.events import BlockEvent
from patton.serving.forward import PARTS, Batching
from patton.serving.interface import EngineParams
from patton.serving.kv_data import TokenKV
from patton.serving.meter import Phases
from patton.serving.record import Run
from patton.serving.work import StepWork
from patton.sim.executor import CycleExecutor, Executor
from patton.sim.timing import timing_table

__all__ = ["Scenario", "Counts", "Served", "conversations", "run"]


def conversations(count: int, seed: int, *, turns: tuple[int, int] = (2, 6),
                  user: tuple[int, int] = (1, 24), reply: tuple[int, int] = (2, 20),
                  vocab: int = 32_000) -> list[Conversation]:
    """Return ``count`` random conversations (``scenario-<i>``): each ``turns`` turns (a
    range, upper bound excluded), user messages of ``user`` tokens and replies of ``reply``
    tokens, token ids below ``vocab``; a pure function of the arguments."""
    rng = np.random.default_rng([seed, 0x5CE7])
    out = []
    for i in range(count):
        messages = []
        for _ in range(int(rng.integers(*turns))):
            for lo_hi in (user, reply):
                n = int(rng.integers(*lo_hi))
                messages.append(tuple(int(t) for t in rng.integers(0, vocab, n)))
        out.append(Conversation(f"scenario-{i:04d}", tuple(messages)))
    return out


@dataclass(frozen=True, slots=True)
class Scenario:
    """The workload and the engine of a scenario.

    Invariants: every count is positive; ``pool`` is a multiple of ``requests``.
    """

    requests: int = 4  # clients: requests in flight at once
    steps: int = 40  # scheduler steps
    seed: int = 0  # conversations and data
    turns: int = 1  # live conversations per client (the pool is requests x turns)
    conversations: int = 64  # conversations in the workload
    blocks_per_request: int = 8  # the engine's blocks: 1 + requests x this (pressure)
    max_batched_tokens: int = 48  # tokens per step (chunked prefill)
    max_model_len: int = 512

    def __post_init__(self) -> None:
        for name in ("requests", "steps", "turns", "conversations", "blocks_per_request",
                     "max_batched_tokens", "max_model_len"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    @property
    def pool(self) -> int:
        """Live conversations."""
        return self.requests * self.turns

    @property
    def num_blocks(self) -> int:
        """The engine's blocks (vLLM's null block included)."""
        return 1 + self.requests * self.blocks_per_request

    def params(self, block_size: int) -> EngineParams:
        """The engine's parameters."""
        return EngineParams(block_size, self.num_blocks, self.requests,
                            self.max_batched_tokens, self.max_model_len)

    def workload(self) -> list[Conversation]:
        """The scenario's conversations."""
        return conversations(self.conversations, self.seed)


class Counts:
    """Counts a run's block events by kind and its tokens (an observer of the driver)."""

    def __init__(self) -> None:
        self.events: Counter[str] = Counter()
        self.decode_tokens = 0  # single-token writes (and attentions) of decode requests
        self.prefill_tokens = 0  # tokens of prefill chunks

    def event(self, event: BlockEvent) -> None:
        """Count one event."""
        self.events[event.kind.value] += 1

    def scheduled(self, work: StepWork) -> None:
        """Count the step's tokens."""
        self.decode_tokens += len(work.decode)
        self.prefill_tokens += sum(e.tokens for e in work.prefill)


@dataclass(slots=True)
class Served:
    """A scenario run: the record, the checks, the device figures, the counts."""

    run: Run
    checks: Checks | None  # None: the run was not checked
    phases: Phases
    counts: Counts
    attached: Attached

    @property
    def ok(self) -> bool:
        """Every check passed (True for a run that was not checked)."""
        if self.checks is None:
            return True
        t = self.checks.total
        return not t.failures and self.checks.accuracy.max_tol_ratio <= 1.0


def run(config: Config, scenario: Scenario = Scenario(), variant: Variant = VARIANTS["patton"],
        *, executor: Executor | None = None, device: bool = True, check: bool = True,
        batching: Batching = PARTS, observers: Sequence[object] = (),
        device_ext: str | None = None) -> Served:
    """Serve ``scenario`` on ``variant`` laid out on ``config``; check every step.

    ``executor`` defaults to a fresh :class:`~patton.sim.executor.CycleExecutor` of
    ``config``'s device on extension set ``device_ext``; with ``device`` False the programs
    are built and not run (the metadata and the mirror are still checked); with ``check``
    False nothing is checked (a run for its device figures only). ``batching`` is the forward
    pass's (:mod:`patton.serving.forward`); ``observers`` watch the driver too.
    ``device_ext`` (default: the executor's, :func:`~patton.serving.adapter.executor_ext`,
    else ``"aim"``) is the extension set the runtime's programs are made for.

    Raises:
        ValueError: ``device_ext`` is not the given executor's.
    """
    ext = executor_ext(executor) if device_ext is None else device_ext
    if executor is not None and ext != executor_ext(executor):
        raise ValueError(f"device_ext {ext!r}: the executor's device is "
                         f"{executor_ext(executor)!r}")
    runtime = variant.runtime(config, ext)
    c = runtime.config
    cap = Capacity(variant.name, c.model.name, scenario.num_blocks, c.block_size, 0,
                   config_blocks(c), c.rows_per_layer, c.crs_rows, c.o2v_width)
    attached = Attached(cap, runtime, fill=False)
    data = TokenKV(c, scenario.seed)
    ex = executor if executor is not None else \
        CycleExecutor(c.device, timing_table(None, ext)) if device else None
    checks = Checks(attached, data, ex) if check else None
    phases, counts = Phases(), Counts()
    driver = Driver(EmbeddedEngine, scenario.params(c.block_size), scenario.workload(),
                    clients=scenario.requests, pool=scenario.pool, attached=attached,
                    observers=[*([checks] if checks else []), phases, counts, *observers],
                    data=data, executor=ex,
                    batching=batching, max_steps=scenario.steps)
    return Served(driver.run(), checks, phases, counts, attached)
