"""One 2 KB SV reduction as one MAC run vs split into fragments (the paper's §3.2 figure).

The same 64 MAC16s over one 2 KB row, with the scores already in the GB: either one
WR_BIAS / MAC_ABK x 64 / RD_MAC, or ``k`` fragments of ``64 / k`` columns, each with its own
WR_BIAS and RD_MAC (what interleaving other requests' blocks along the row forces). Cycles
from the cycle model, energy from the energy model; on one channel and on all 32.

    python benchmarks/runtime_fragmentation.py [--fragments 8]
"""

from __future__ import annotations

import argparse

import numpy as np
from patton.sim.cycle_model import CycleModel
from patton.sim.energy import energy
from patton.sim.isa import Instruction, Opcode, channel_bit


def program(fragments: int, channels: int, with_gb: bool = True) -> list[Instruction]:
    """Return the SV reduction of one 2 KB row split into ``fragments`` pieces."""
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


def measure(fragments: int, channels: int, with_gb: bool = True) -> tuple[int, float]:
    """Return (cycles, energy nJ) of :func:`program`."""
    r = CycleModel().run(program(fragments, channels, with_gb))
    return r.cycles, energy(r.command_counts, r.bank_state_cycles, r.cycles).total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fragments", type=int, default=8)
    args = ap.parse_args()
    print(f"{'channels':>8} {'GB load':>7} {'cycles 1':>9} {'cycles k':>9} {'latency':>8} "
          f"{'nJ 1':>9} {'nJ k':>9} {'energy':>7}")
    for channels in (1, 32):
        for with_gb in (True, False):
            c1, e1 = measure(1, channels, with_gb)
            ck, ek = measure(args.fragments, channels, with_gb)
            print(f"{channels:8d} {str(with_gb):>7} {c1:9d} {ck:9d} {ck / c1:7.2f}x "
                  f"{e1:9.1f} {ek:9.1f} {ek / e1:6.2f}x")


if __name__ == "__main__":
    main()
