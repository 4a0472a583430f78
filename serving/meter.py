"""What a serving run measures besides its record (observers of the step driver).

:class:`Meter`: the live context and the runtime's capacity use (``patton serve``).
:class:`Phases`: the device's figures of every program, by runtime call and phase.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from patton.serving.adapter import Attached
from patton.serving.conversations import Conversation
from patton.serving.interface import Request, StepOutput
from patton.sim.energy import activations
from patton.sim.executor import Result

__all__ = ["Meter", "Phases"]


@dataclass(slots=True)
class Meter:
    """The live context and the runtime's capacity use, sampled after every step.

    The **live context** is the tokens every live conversation holds: a conversation with a
    request in flight holds the request's prompt and the output tokens emitted so far (the
    client model's item 5, ``docs/serving.md``: a scheduled request whose computed tokens
    reach its length emits one), one between turns the prompt and output of its last turn; a
    conversation leaves (and holds nothing) after a turn whose next turn does not fit
    ``max_model_len``. It is what an ideal prefix cache would keep for every next turn to hit.

    After every step the adapter samples the runtime's capacity use
    (:meth:`~patton.serving.adapter.Attached.sample`) and ``progress`` (a
    :class:`~patton.sim.progress.Progress`, any tqdm-like ``update(n)``, or None) advances by
    64 every 64 steps (a report a step would be too many across processes).

    Invariants: ``live`` is the sum of ``context``; ``steps`` steps were sampled (after each
    step); ``live_sum``/``live_max`` are over them.
    """

    conversations: dict[str, Conversation]
    max_model_len: int
    attached: Attached | None = None
    progress: Any = None  # a Progress (tqdm-like: update(n)), or None
    pool: Any = None  # the engine's block pool (set when the driver starts)
    context: dict[str, int] = field(default_factory=dict)  # conversation -> tokens held
    conv: dict[str, tuple[str, int]] = field(default_factory=dict)  # request -> (conv, turn)
    length: dict[str, int] = field(default_factory=dict)  # request -> tokens held
    computed: dict[str, int] = field(default_factory=dict)  # request -> computed tokens
    live: int = 0
    live_sum: int = 0
    live_max: int = 0
    steps: int = 0

    def start(self, driver: Any) -> None:
        """Take the engine's block pool (the capacity sampling reads it)."""
        self.pool = driver.engine.pool

    def sent(self, request: Request, history: int) -> None:
        """A request entered the engine: its conversation now holds its prompt."""
        rid = request.request_id
        cid, turn = rid.rsplit(":", 1)
        self.conv[rid] = (cid, int(turn))
        n = len(request.prompt)
        self.length[rid] = n
        self.computed[rid] = 0
        self.live += n - self.context.get(cid, 0)
        self.context[cid] = n

    def stepped(self, work: Any, out: StepOutput) -> None:
        """Account for emitted tokens, preemptions and finishes; sample."""
        computed, length, context, conv = self.computed, self.length, self.context, self.conv
        for s in out.scheduled:
            rid = s.request_id
            c = computed[rid] = computed[rid] + s.num_tokens
            if c >= length[rid]:
                length[rid] += 1
                context[conv[rid][0]] += 1
                self.live += 1
        for rid in out.preempted:
            computed[rid] = 0
        for f in out.finished:
            rid = f.request_id
            cid, turn = conv.pop(rid)
            del length[rid], computed[rid]
            if not self._fits(cid, turn + 1):
                self.live -= context.pop(cid)
        self.steps += 1
        self.live_sum += self.live
        self.live_max = max(self.live_max, self.live)
        if self.attached is not None and self.pool is not None:
            self.attached.sample(self.pool)
        if self.progress is not None and not self.steps % 64:
            self.progress.update(64)

    def _fits(self, cid: str, turn: int) -> bool:
        c = self.conversations[cid]
        if turn > c.num_turns:
            return False
        prompt, output = c.turn(turn)
        return len(prompt) + len(output) <= self.max_model_len

    def report(self) -> dict[str, Any]:
        """Return the live context's mean and max over the steps."""
        return {"mean": round(self.live_sum / max(self.steps, 1), 1), "max": self.live_max}


@dataclass(slots=True)
class Phases:
    """The device's figures of every program of a run, by ``"<call> <phase>"``: programs,
    cycles, DRAM commands, row activations and energy (nJ), from the executor's results.

    The call is the forward pass's runtime call (``append``: the decode tokens' writes,
    ``write``: a write call's, ``attention``) and the phase the program's
    (:mod:`patton.serving.forward`): ``append v_write`` is the single-token Value writes,
    ``append commits`` the Commit Zone commits they trigger.
    """

    figures: dict[str, dict[str, float]] = field(default_factory=dict)

    def ran(self, work: Any, phase: str, program: Any, result: Result | None) -> None:
        """Add a program's figures (nothing without a cycle model's result)."""
        if result is None or result.cycles is None or result.command_counts is None:
            return
        key = f"{work.call} {phase}"
        f = self.figures.get(key)
        if f is None:
            f = self.figures[key] = {"programs": 0, "cycles": 0, "commands": 0,
                                     "activations": 0, "energy_nj": 0.0}
        f["programs"] += 1
        f["cycles"] += result.cycles
        f["commands"] += sum(sum(c.values()) for c in result.command_counts.values())
        f["activations"] += activations(result.command_counts)
        if result.energy is not None:
            f["energy_nj"] += result.energy.total
