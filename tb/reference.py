"""Reference model: the functional model replaying timed schedules, kept alive across segments.

What the RTL channel must return for a schedule is what the functional model returns when it
executes the same commands in the same order (``patton.sim.replay``). The reference keeps one
:class:`~patton.sim.functional.FunctionalModel` across calls, as a live RTL session keeps its
channel, so segment ``n`` is checked against the state segments ``1 .. n - 1`` left.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.functional import FunctionalModel
from patton.sim.replay import Returned, replay
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING

__all__ = ["Reference", "return_order"]

def return_order(returned: Sequence[Returned]) -> list[Returned]:
    """Sort reads as the bus returns them: by return cycle, then issue cycle (an RD at ``t``
    and an RDMAC16 at ``t + 50`` return together, the RD first)."""
    return sorted(returned, key=lambda r: (r.command.cycle + TIMING.latency[r.command.command],
                                           r.command.cycle))


class Reference:
    """The functional model as the scoreboard's reference (one device, alive across calls).

    Args:
        device: organisation.
        model: the functional model to replay on (default: a fresh one of ``device``).
    """

    def __init__(self, device: Device = DEVICE, model: FunctionalModel | None = None) -> None:
        self.model = model if model is not None else FunctionalModel(device)
        self.device = self.model.device

    def run(self, schedule: Sequence[TimedCommand]) -> list[Returned]:
        """Execute ``schedule`` (commands ``verify`` finds illegal already removed); return
        its reads in return order."""
        return return_order(replay(schedule, self.model))

    def mats(self, channel: int) -> dict[tuple[int, int, int], np.ndarray]:
        """Return the non-zero mat words of ``channel`` by (bank, row, column) (LUT rows
        excepted: the RTL has none)."""
        out: dict[tuple[int, int, int], np.ndarray] = {}
        for row, block in self.model.channels[channel].mats.items():
            if row >= AF_ROW_BASE:
                continue
            for bank, col in zip(*np.nonzero(block.any(axis=2))):
                out[int(bank), row, int(col)] = block[bank, col]
        return out
