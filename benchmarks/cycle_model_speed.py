"""Cycle-model speed in simulated DRAM commands per wall second, on the public micro traces.

Usage: python benchmarks/cycle_model_speed.py [TRACES_DIR] [--repeat N]

For each trace it prints the commands issued (all channels), the best wall time of N runs and
commands/s for the default model (quiet cycles skipped, identical channels simulated once),
then, on the first 64 instructions of the MAC_ABK trace, the same for each fast path switched
off, so the contribution of each is visible. Every run is checked against the public
simulator's cycle count where ``reference.json`` has it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from patton.sim import trace
from patton.sim.cycle_model import CycleModel
from patton.sim.executor import closed
from patton.sim.isa import Instruction, Opcode

DEFAULT = Path(__file__).resolve().parents[1] / "tests" / "data" / "aim"


def best(model: CycleModel, program: list[Instruction], repeat: int):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = model.run(program)
        times.append(time.perf_counter() - start)
    return result, min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("traces", nargs="?", default=str(DEFAULT))
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    folder = Path(args.traces)
    reference = json.loads((folder / "reference.json").read_text())
    print(f"{'trace':40s} {'commands':>10s} {'cycles':>9s} {'seconds':>8s} {'commands/s':>12s}")
    for path in sorted(folder.glob("micro_*.trace")):
        program = trace.read(path)
        result, seconds = best(CycleModel(), program, args.repeat)
        assert result.cycles == reference[path.stem]["memory_system_cycles"], path.stem
        print(f"{path.stem:40s} {result.commands:10d} {result.cycles:9d} {seconds:8.3f} "
              f"{result.commands / seconds:12,.0f}")
    program = closed(trace.read(folder / "micro_macab_1024_16banks.trace")[:64])
    print("\nmicro_macab, first 64 instructions, each fast path off:")
    for label, options in [("default (skip + group)", {}), ("no grouping", {"group": False}),
                           ("no skipping", {"skip": False}),
                           ("plain stepping", {"skip": False, "group": False})]:
        result, seconds = best(CycleModel(**options), program, args.repeat)
        print(f"  {label:24s} {result.commands:9d} commands {seconds:8.3f} s "
              f"{result.commands / seconds:12,.0f} commands/s")


if __name__ == "__main__":
    main()
