"""Scoreboard: the RTL channel's replay of a schedule against the models' verdict on it.

Values: every read the RTL returned (RD, RDMAC16) must equal, bit for bit and in return order
(issue cycle + latency), what the functional model returns when it replays the same schedule
(``patton.sim.replay``).
Checks: the set of (cycle, timing rule) the RTL flagged must equal the set
``patton.sim.check.verify`` lists, and so must the cycles flagged for protocol errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..sim.check import verify
from ..sim.device import DEVICE, Device
from ..sim.functional import FunctionalModel
from ..sim.replay import replay
from ..sim.schedule import TimedCommand
from ..sim.timing import TIMING
from .player import PlayResult

__all__ = ["Verdict", "score"]


@dataclass(slots=True)
class Verdict:
    """How one replay compares with the models."""

    reads: int = 0  # reads compared
    mismatches: int = 0  # reads whose value (or command, or count) differ
    rtl_timing: set[tuple[int, int]] = field(default_factory=set)  # (cycle, rule)
    model_timing: set[tuple[int, int]] = field(default_factory=set)  # (cycle, rule)
    rtl_protocol: set[int] = field(default_factory=set)  # cycles
    model_protocol: set[int] = field(default_factory=set)  # cycles
    model_bus: int = 0  # same-cycle commands the model lists (the player cannot issue them)

    @property
    def agree(self) -> bool:
        """True when the RTL checker and the model list the same violations."""
        return self.rtl_timing == self.model_timing and self.rtl_protocol == self.model_protocol

    @property
    def rtl_violations(self) -> int:
        """Commands the RTL flagged."""
        return len({c for c, _ in self.rtl_timing} | self.rtl_protocol)

    @property
    def model_violations(self) -> int:
        """Commands the model flagged."""
        return len({c for c, _ in self.model_timing} | self.model_protocol) + self.model_bus


def score(schedule: Sequence[TimedCommand], result: PlayResult, device: Device = DEVICE,
          values: bool = True) -> Verdict:
    """Compare one channel's replay with the models (``values=False``: checks only)."""
    verdict = Verdict()
    found = verify(schedule, device)
    verdict.model_timing = {(v.cycle, v.rule) for v in found if v.kind == "timing"}
    verdict.model_protocol = {v.cycle for v in found if v.kind == "protocol"}
    verdict.model_bus = sum(v.kind == "bus" for v in found)
    verdict.rtl_timing = {(v.cycle, r) for v in result.violations for r in v.rules}
    verdict.rtl_protocol = {v.cycle for v in result.violations if v.protocol}
    if values:
        # The RTL returns data in return order: RDMAC16 (2 cycles) overtakes an earlier RD (52).
        expected = sorted(replay(schedule, FunctionalModel(device)),
                          key=lambda r: r.command.cycle + TIMING.latency[r.command.command])
        verdict.reads = max(len(expected), len(result.reads))
        verdict.mismatches = abs(len(expected) - len(result.reads)) + sum(
            a.command.command != b.command or not np.array_equal(a.data, b.data)
            for a, b in zip(expected, result.reads))
    return verdict
