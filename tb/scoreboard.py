"""Scoreboard: the RTL channel's replay of a schedule against the models' verdict on it.

Values: every read the RTL returned (RD on ``rdata``, RDMAC16 on ``rdata_mac``) must equal, bit
for bit, what the functional model returns when it replays the same schedule
(``patton.sim.replay``). Both sides are put in return order (issue cycle + latency) and, for
reads returning in the same cycle (an RD at ``t`` and an RDMAC16 at ``t + 50``), in issue
order; an RTL read's issue cycle is its return cycle minus its command's latency. The final
mat contents must be equal too, word for word (``Verdict.mat_mismatches``). Commands
``verify`` finds illegal are left out of the replay: the RTL refuses them too.
Checks: the set of (cycle, timing rule) the RTL flagged must equal the set
``patton.sim.check.verify`` lists, and so must the cycles flagged for protocol errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..sim.check import verify
from ..sim.device import AF_ROW_BASE, DEVICE, Device
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
    mat_words: int = 0  # mat words compared (non-zero on either side)
    mat_mismatches: int = 0  # of those, words whose final contents differ

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
        # Return order: RDMAC16 (2 cycles) overtakes an earlier RD (52); ties in issue order.
        # Neither the RTL nor ``verify`` executes a command with a protocol error.
        legal = [c for c in schedule if c.cycle not in verdict.model_protocol]
        model = FunctionalModel(device)
        expected = sorted(replay(legal, model),
                          key=lambda r: (r.command.cycle + TIMING.latency[r.command.command],
                                         r.command.cycle))
        got = sorted(result.reads, key=lambda r: (r.cycle, r.issued))
        verdict.reads = max(len(expected), len(got))
        verdict.mismatches = abs(len(expected) - len(got)) + sum(
            a.command.command != b.command or a.command.cycle != b.issued
            or not np.array_equal(a.data, b.data)
            for a, b in zip(expected, got))
        channel = schedule[0].channel if schedule else 0
        verdict.mat_words, verdict.mat_mismatches = _compare_mats(
            model.channels[channel].mats, result.mats, device.lanes)
    return verdict


def _compare_mats(model: dict[int, np.ndarray],
                  rtl: dict[tuple[int, int, int], np.ndarray], lanes: int) -> tuple[int, int]:
    """Compare final mat contents; return (words compared, words that differ).

    ``model``: the functional model's rows (``row -> (banks, columns, lanes)``); ``rtl``: the
    RTL's non-zero words. Words that are zero on both sides are not counted; a word missing on
    one side is zero there. The activation-function LUT rows (``AF_ROW_BASE`` and up) exist
    only in the model.
    """
    want: dict[tuple[int, int, int], np.ndarray] = {}
    for row, block in model.items():
        if row >= AF_ROW_BASE:
            continue
        for bank, col in zip(*np.nonzero(block.any(axis=2))):
            want[int(bank), row, int(col)] = block[bank, col]
    keys = want.keys() | rtl.keys()
    zero = np.zeros(lanes, dtype=np.uint16)
    differ = sum(not np.array_equal(want.get(k, zero), rtl.get(k, zero)) for k in keys)
    return len(keys), differ
