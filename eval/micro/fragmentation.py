"""One 2 KB SV reduction as one MAC run vs split into fragments (the paper's §3.2.2 figure).

The same 64 MAC16s over one 2 KB row, with the scores already in the GB: either one
WR_BIAS / MAC_ABK x 64 / RD_MAC, or ``k`` fragments of ``64 / k`` columns, each with its own
WR_BIAS and RD_MAC (what interleaving other requests' blocks along the row forces). Cycles
from the cycle model, energy from the energy model.
"""

from __future__ import annotations

import numpy as np
from patton.sim.cycle_model import CycleModel
from patton.sim.energy import energy
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.timing import DEFAULT_PROFILE

__all__ = ["program", "measure"]


def program(fragments: int, channels: int, with_gb: bool = True) -> list[Instruction]:
    """Return the SV reduction of one 2 KB row split into ``fragments`` pieces on the first
    ``channels`` channels (``with_gb``: the scores loaded with one WR_GB first)."""
    mask = 0
    for c in range(channels):
        mask |= channel_bit(c)
    zeros = np.zeros(16, dtype=np.uint16)
    prog = []
    if with_gb:
        prog.append(Instruction(Opcode.WR_GB, opsize=64, gpr0=0, channel_mask=mask, col=0,
                                data=np.full(64 * 16, 0x3C00, dtype=np.uint16)))
    width = 64 // fragments
    for f in range(fragments):
        prog.append(Instruction(Opcode.WR_BIAS, gpr0=0, channel_mask=mask, data=zeros))
        prog.append(Instruction(Opcode.MAC_ABK, opsize=width, channel_mask=mask, row=0,
                                col=f * width))
        prog.append(Instruction(Opcode.RD_MAC, gpr0=0, channel_mask=mask))
    prog.append(Instruction(Opcode.EOC))
    return prog


def measure(fragments: int, channels: int, with_gb: bool = True,
            timing: str = DEFAULT_PROFILE) -> tuple[int, float]:
    """Return (cycles, energy nJ) of :func:`program` under the ``timing`` profile."""
    r = CycleModel(timing=timing).run(program(fragments, channels, with_gb))
    return r.cycles, energy(r.command_counts, r.bank_state_cycles, r.cycles).total
