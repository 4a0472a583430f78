"""One executor interface: ``run(program) -> Result`` on every model of the device.

An executor runs :class:`~patton.sim.program.Program` objects and reports what it knows about
each: the values read out (always), and the cycles, the timed command schedule and the energy
where it models time. Executors keep the device alive across calls: the mats, the global
buffer, the accumulators, the CFRs, the open rows and the register mode one program leaves are
what the next one starts from, so a caller can run QK^T, compute a softmax on the host, and run
SV on the same device state.

Three implement it:

:class:`FunctionalExecutor`
    values only (:class:`~patton.sim.functional.FunctionalModel`).
:class:`CycleExecutor`
    the cycle model and its controller (cycles, schedule, command counts, energy; exact against
    the public AiM simulator from the reset state), with the values of a functional model kept
    in step.
:class:`patton.tb.executor.RtlExecutor`
    RTL channels under Verilator, driven by the cycle model's schedule, checked against the
    functional model.

What an executor can do besides ``run`` is declared, not guessed: every one can be read back
(:meth:`readers`: the device's mats as they are now, for placement checks), and one that
simulates the hardware (:class:`Simulator`: the RTL) also reports what it simulated and
compares its whole state with the models at the end. A :class:`Result` says whether the
executor checked the program itself (``discrepancies``, None when it did not: the caller may
verify the schedule from ``start``).

Program boundaries: a program ends with ``AiM EOC``; an executor appends it when it is missing
(:func:`closed`) and rejects one in the middle. Each program is timed from a quiet device: the
row and mode state of the last program carry over, its timing windows count as elapsed
(:class:`~patton.sim.cycle_model.DeviceState`). Read-outs come in the canonical order of
:class:`~patton.sim.program.Readout`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
from patton.sim.cycle_model import CycleModel, DeviceState
from patton.sim.device import DEVICE, Device
from patton.sim.energy import Energy, energy
from patton.sim.functional import FunctionalModel
from patton.sim.isa import Instruction, Opcode
from patton.sim.program import OP_ID, Program, Readout, concat, make
from patton.sim.schedule import TimedCommand
from patton.sim.timing import DEFAULT_PROFILE, Timing

__all__ = ["Result", "Executor", "Peek", "Simulated", "Simulator", "FunctionalExecutor",
           "CycleExecutor", "closed"]


@dataclass(slots=True)
class Result:
    """What an executor reports for one program (``None``: this executor does not know it).

    ``readouts`` are in the canonical order of :class:`~patton.sim.program.Readout`;
    ``cycles`` counts memory-system cycles (0.5 ns) from the program's first decode to its
    EOC; ``schedule`` is every DRAM command issued, in cycle order, with its payload, timed
    from the row and mode state ``start``; ``command_counts[channel][command]`` omits zeros.
    ``discrepancies`` is what the executor's own checks found in the program (empty: it
    passed them), or None when it checks nothing itself.
    """

    readouts: list[Readout] = field(default_factory=list)  # values read, canonical order
    cycles: int | None = None  # memory-system cycles
    schedule: list[TimedCommand] | None = field(default=None, repr=False)  # issued commands
    command_counts: dict[int, dict[str, int]] | None = None  # per channel, per command
    bank_state_cycles: dict[int, dict[str, int]] | None = None  # active/precharged/idle
    energy: Energy | None = None  # energy of the program (standby for its cycles included)
    start: DeviceState | None = field(default=None, repr=False)  # the state it was timed from
    discrepancies: list[Any] | None = None  # the executor's own checks' findings, if any
    simulated_cycles: int | None = None  # cycles a hardware simulation ran (longest channel)


#: Reads one bank row of a device as it is now: ``(channel, bank, row) -> (columns, lanes)``
#: uint16.
Peek = Callable[[int, int, int], np.ndarray]


@dataclass(frozen=True, slots=True)
class Simulated:
    """What a hardware simulation ran, over an executor's life."""

    seconds: float  # wall time the host waited for the simulators
    cycles: int  # the programs' cycles, per program its longest channel's, summed
    channel_cycles: int  # cycles every simulator ran (gaps between programs included), summed


@runtime_checkable
class Executor(Protocol):
    """Runs programs on one device that stays alive across calls."""

    device: Device

    def run(self, program: Program | Iterable[Instruction]) -> Result:
        """Run ``program`` (EOC appended if missing) and report what this executor knows."""
        ...

    def readers(self) -> list[tuple[str, Peek]]:
        """Named readers of the device's mats as they are now (every copy the executor
        keeps: the functional model's, and the RTL's where it simulates one)."""
        ...


@runtime_checkable
class Simulator(Executor, Protocol):
    """An executor that simulates the device's hardware (:class:`patton.tb.executor.
    RtlExecutor`): its results carry its own checks' ``discrepancies``."""

    #: Fault injection: called with each channel's commands before the simulator gets them
    #: and with the reads it returns (``docs/chat.md``), or None.
    tamper: Callable[..., Any] | None

    def simulated(self) -> Simulated:
        """What the simulators ran so far."""
        ...

    def compare_mats(self) -> tuple[int, int]:
        """Compare the simulated mats with the functional model's, word by word; return
        (words compared, words that differ)."""
        ...


_EOC = OP_ID[Opcode.EOC]


def closed(program: Program | Iterable[Instruction]) -> Program:
    """Return ``program`` as a :class:`Program` that ends with exactly one ``AiM EOC``.

    Raises:
        ValueError: an ``AiM EOC`` before the last instruction (a program is one kernel; run
            two programs for two).
    """
    prog = Program.of(program if isinstance(program, Program) else list(program))
    ends = (prog.op == _EOC).nonzero()[0]
    n = len(prog)
    if len(ends) and (len(ends) > 1 or ends[0] != n - 1):
        raise ValueError(f"AiM EOC at instruction {int(ends[0])} of {n}: a program has one "
                         "EOC, at its end (run the parts as separate programs)")
    if len(ends):
        return prog
    return concat([prog, make(Opcode.EOC, 1, prog.data[:0])])


class FunctionalExecutor:
    """Values only: the NumPy functional model.

    Args:
        device: organisation (default: the public simulator's 32-channel device).
        model: the functional model to run on (default: a fresh one of ``device``).
    """

    def __init__(self, device: Device = DEVICE, model: FunctionalModel | None = None) -> None:
        self.model = model if model is not None else FunctionalModel(device)
        self.device = self.model.device

    def run(self, program: Program | Iterable[Instruction]) -> Result:
        """Execute ``program`` on the functional model; return its read-outs."""
        return Result(readouts=self.model.run(closed(program)))

    def readers(self) -> list[tuple[str, Peek]]:
        """The functional model's mats."""
        return [("the functional model's mats", self.model.peek)]


class CycleExecutor:
    """Timing, schedule and energy from the cycle model; values from a functional model.

    The cycle model schedules each program from the row and mode state the last one left
    (:class:`~patton.sim.cycle_model.DeviceState`); the first program of a fresh executor starts
    from reset, exactly as the public AiM simulator does. A program ends when every one of its
    commands has issued and completed (``CycleModel(drain=True)``): the public simulator ends at
    EOC even with conventional writes still buffered, which would leave them out of the schedule
    and of the device the next program finds; where no write is left over, the cycles are the
    public simulator's. The functional model executes the same instructions, so read-outs equal
    :class:`FunctionalExecutor`'s.

    Args:
        device: organisation.
        timing: timing profile name (``"aimsim-0f28a07"``, the default, or
            ``"aimsim-2eb1ee0"``; :mod:`patton.sim.timing`) or a compiled table; the
            executor's ``timing`` is the compiled table.
        record: keep the timed schedule (``Result.schedule``; costs time on long programs).
        model: the functional model to keep in step (default: a fresh one of ``device``).
        frontend: the cycle model's front end, ``"shared"`` (the public simulator's, the
            default) or ``"per_channel"`` (:class:`~patton.sim.cycle_model.CycleModel`).
        **options: passed to :class:`~patton.sim.cycle_model.CycleModel` (``skip``,
            ``group``, ``native``, ``progress``).
    """

    def __init__(self, device: Device = DEVICE, timing: Timing = DEFAULT_PROFILE, *,
                 record: bool = True, model: FunctionalModel | None = None,
                 frontend: str = "shared", **options) -> None:
        self.device = device
        self.cycle_model = CycleModel(device, timing, record=record, drain=True,
                                      frontend=frontend, **options)
        self.timing = self.cycle_model.timing
        self.model = model if model is not None else FunctionalModel(device)
        if self.model.device != device:
            raise ValueError("the functional model is of another device")
        self.state = DeviceState.reset(device)

    def run(self, program: Program | Iterable[Instruction]) -> Result:
        """Schedule and execute ``program``; return read-outs, cycles, schedule and energy."""
        prog = closed(program)
        start = self.state
        timed = self.cycle_model.run(prog, start)
        readouts = self.model.run(prog)
        self.state = timed.state
        return Result(readouts, timed.cycles, timed.schedule, timed.command_counts,
                      timed.bank_state_cycles,
                      energy(timed.command_counts, timed.bank_state_cycles, timed.cycles),
                      start)

    def readers(self) -> list[tuple[str, Peek]]:
        """The functional model's mats."""
        return [("the functional model's mats", self.model.peek)]
