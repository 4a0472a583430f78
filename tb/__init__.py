"""The cocotb / Verilator testbench of one AiM channel (``docs/tb.md``).

:mod:`~patton.tb.player` (the Verilator build and one-shot replays), :mod:`~patton.tb.session`
(a live simulator fed through named pipes), :mod:`~patton.tb.executor` (``RtlExecutor``, the
executor interface on live RTL channels); the cocotb roles :mod:`~patton.tb.driver`,
:mod:`~patton.tb.monitor`, :mod:`~patton.tb.reference`, :mod:`~patton.tb.scoreboard`, and the
in-simulator regressions :mod:`~patton.tb.regressions`; ``patton rtl`` in :mod:`~patton.cli.rtl`.

Public API (``from patton.tb import ...``; imported on first use, so ``import patton.tb`` does
not load cocotb or Amaranth): :class:`RtlExecutor` and its results (:class:`RtlResult`,
:class:`RtlStats`), the schedule player (:class:`SchedulePlayer`, :class:`PlayResult`,
:class:`RtlRead`, :class:`RtlViolation`), the live simulator (:class:`Session`,
:class:`SimulatorError`), the scoreboard (:class:`Scoreboard`, :class:`Verdict`,
:class:`ScoreboardError`) and the row-count helpers (:data:`DEFAULT_ROWS`, :class:`RowsError`,
:func:`fill_payloads`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from patton.sim._exports import lazy

#: Each public name by the submodule that defines it.
_EXPORTS = {
    "executor": ("RtlExecutor", "RtlResult", "RtlStats"),
    "player": ("SchedulePlayer", "PlayResult", "RtlRead", "RtlViolation"),
    "session": ("Session", "SimulatorError"),
    "scoreboard": ("Scoreboard", "Verdict", "ScoreboardError"),
    "prepare": ("DEFAULT_ROWS", "RowsError", "fill_payloads"),
}
__all__ = [
    "RtlExecutor", "RtlResult", "RtlStats", "SchedulePlayer", "PlayResult", "RtlRead",
    "RtlViolation", "Session", "SimulatorError", "Scoreboard", "Verdict", "ScoreboardError",
    "DEFAULT_ROWS", "RowsError", "fill_payloads",
]
__getattr__, __dir__ = lazy(__name__, globals(), _EXPORTS, __all__)

if TYPE_CHECKING:
    from patton.tb.executor import RtlExecutor, RtlResult, RtlStats
    from patton.tb.player import PlayResult, RtlRead, RtlViolation, SchedulePlayer
    from patton.tb.prepare import DEFAULT_ROWS, RowsError, fill_payloads
    from patton.tb.scoreboard import Scoreboard, ScoreboardError, Verdict
    from patton.tb.session import Session, SimulatorError
