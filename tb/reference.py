"""Reference model: the functional model replaying timed schedules, kept alive across segments.

What the RTL channel must return for a schedule is what the functional model returns when it
executes the same commands in the same order (``patton.sim.replay``). The reference keeps one
:class:`~patton.sim.functional.FunctionalModel` across calls, as a live RTL session keeps its
channel, so segment ``n`` is checked against the state segments ``1 .. n - 1`` left.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from patton.sim.datapath import AF_WORDS, af_lut
from patton.sim.device import AF_ROW_BASE, DEVICE, Device
from patton.sim.functional import FunctionalModel
from patton.sim.replay import Returned, replay
from patton.sim.schedule import TimedCommand
from patton.sim.timing import TIMING

__all__ = ["Reference", "return_order", "changed_words"]


def changed_words(mats: Mapping[int, np.ndarray], device: Device = DEVICE
                  ) -> dict[tuple[int, int, int], np.ndarray]:
    """Return the words of a functional model's rows (``row -> (banks, columns, lanes)``) that
    differ from their power-up contents, by (bank, row, column): what the RTL's mat dump lists
    (``hw/mat.py``). Power-up is zero, and in a LUT row (``AF_ROW_BASE + k``) the default
    table of AFM ``k`` (``sim.datapath.af_lut``), so the unwritten tables count for neither
    side while every word written into a LUT row does."""
    out: dict[tuple[int, int, int], np.ndarray] = {}
    for row, block in mats.items():
        if row >= AF_ROW_BASE and device.columns * device.lanes == AF_WORDS:
            changed = (block != af_lut(row - AF_ROW_BASE).reshape(device.columns,
                                                                  device.lanes)).any(axis=2)
        else:
            changed = block.any(axis=2)
        for bank, col in zip(*np.nonzero(changed)):
            out[int(bank), row, int(col)] = block[bank, col]
    return out

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
        """Return the mat words of ``channel`` that differ from their power-up contents, by
        (bank, row, column), LUT rows included (:func:`changed_words`)."""
        return changed_words(self.model.channels[channel].mats, self.device)
