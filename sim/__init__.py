"""The AiM device model: ISA, programs, executors, protocol, formats, datapath (``README.md``).

Public API (``from patton.sim import ...``; imported on first use, so ``import patton.sim``
stays cheap): the device (:class:`Device`, :data:`DEVICE`), the ISA (:class:`Command`,
:class:`Opcode`, :class:`Instruction`, :class:`Cfr`), the program type (:class:`Program`,
:class:`Readout`), the executors (:class:`Executor`, :class:`Result`,
:class:`FunctionalExecutor`, :class:`CycleExecutor`) and the models under them
(:class:`FunctionalModel`, :class:`ProtocolError`, :class:`CycleModel`, :class:`RunResult`),
schedules (:class:`TimedCommand`) and their checker (:func:`verify`, :class:`Violation`), the
energy record (:class:`Energy`), and the readers' errors (:class:`ReadError`,
:class:`TraceError`, :class:`ScheduleError`). The file formats and the datapath are modules:
``from patton.sim import trace, schedule, datapath``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patton.sim._exports import lazy

#: Each public name by the submodule that defines it.
_EXPORTS = {
    "device": ("Device", "DEVICE"),
    "isa": ("Command", "Opcode", "Instruction", "Cfr"),
    "program": ("Program", "Readout"),
    "executor": ("Executor", "Result", "FunctionalExecutor", "CycleExecutor"),
    "functional": ("FunctionalModel", "ProtocolError"),
    "cycle_model": ("CycleModel", "RunResult"),
    "schedule": ("TimedCommand", "ScheduleError"),
    "trace": ("TraceError",),
    "textfile": ("ReadError",),
    "check": ("Violation", "verify"),
    "energy": ("Energy",),
}
__all__ = [
    "Device", "DEVICE", "Command", "Opcode", "Instruction", "Cfr", "Program", "Readout",
    "Executor", "Result", "FunctionalExecutor", "CycleExecutor", "FunctionalModel",
    "ProtocolError", "CycleModel", "RunResult", "TimedCommand", "ScheduleError", "TraceError",
    "ReadError", "Violation", "verify", "Energy",
]
__getattr__, __dir__ = lazy(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:
    from patton.sim.check import Violation, verify
    from patton.sim.cycle_model import CycleModel, RunResult
    from patton.sim.device import DEVICE, Device
    from patton.sim.energy import Energy
    from patton.sim.executor import CycleExecutor, Executor, FunctionalExecutor, Result
    from patton.sim.functional import FunctionalModel, ProtocolError
    from patton.sim.isa import Cfr, Command, Instruction, Opcode
    from patton.sim.program import Program, Readout
    from patton.sim.schedule import ScheduleError, TimedCommand
    from patton.sim.textfile import ReadError
    from patton.sim.trace import TraceError
