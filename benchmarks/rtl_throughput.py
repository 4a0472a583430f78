"""RTL co-simulation throughput: simulated channel cycles per wall second under Verilator.

Usage: python benchmarks/rtl_throughput.py [--instructions N] [--rows R] [--json]

Builds (or reuses) the Verilator model of one channel with the schedule player, replays a long
MAC_ABK schedule from the cycle model (N instructions of 64 columns each over R rows), and
prints the build time, the cycles simulated, the wall time and cycles/s, and the simulator
process's CPU time (cycles per CPU second: what a loaded machine does not distort). The replay
is a one-segment session of the live-simulator transport (named pipes, ``tb/session.py``). It
is checked: it must finish with zero violations.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext

from patton.hw.params import ChannelParams
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Instruction, Opcode, channel_bit
from patton.sim.schedule import TimedCommand
from patton.tb.player import SchedulePlayer


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Send file descriptor 1 (where a Verilator build and the simulator write) to standard
    error while the block runs, so that ``--json`` prints JSON only."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def mac_schedule(instructions: int, rows: int) -> list[TimedCommand]:
    """Channel 0's schedule of ``instructions`` MAC_ABK instructions of 64 columns each, over
    ``rows`` rows in turn, from the cycle model (nearly all MAC16)."""
    program = [Instruction(Opcode.MAC_ABK, opsize=64, channel_mask=channel_bit(0),
                           row=i % rows) for i in range(instructions)]
    program.append(Instruction(Opcode.EOC))
    return [c for c in CycleModel(record=True).run(program).schedule if c.channel == 0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instructions", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    with stdout_to_stderr() if args.json else nullcontext():
        started = time.perf_counter()
        player = SchedulePlayer(ChannelParams(rows=args.rows))
        ready = time.perf_counter() - started
    if not args.json:
        print(f"Verilator build: {ready:.1f} s "
              f"(compile step {player.build_seconds:.1f} s; 0 when cached)")
    schedule = mac_schedule(args.instructions, args.rows)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with stdout_to_stderr() if args.json else nullcontext():
        result = player.play(schedule, "throughput")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    assert result.counter == 0 and not result.violations, "a legal schedule was flagged"
    if args.json:
        print(json.dumps({"build_seconds": ready, "compile_seconds": player.build_seconds,
                          "commands": len(schedule), "cycles": result.cycles,
                          "seconds": result.seconds,
                          "cycles_per_second": result.cycles / result.seconds,
                          "cpu_seconds": cpu, "cycles_per_cpu_second": result.cycles / cpu}))
        return
    print(f"replayed {len(schedule):,} commands over {result.cycles:,} cycles in "
          f"{result.seconds:.2f} s: {result.cycles / result.seconds:,.0f} cycles/s "
          "(simulator start-up included)")
    print(f"simulator CPU {cpu:.2f} s: {result.cycles / cpu:,.0f} cycles per CPU second")


if __name__ == "__main__":
    main()
