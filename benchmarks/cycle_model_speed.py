"""Cycle-model speed: the compiled kernel, the Python model and, if given, the public simulator.

Usage:
    python benchmarks/cycle_model_speed.py [--repeat N] [--quick] [--tables LIST] [--json]
        [--reference-binary PATH --reference-config FILE]

Four tables (and a fifth on request), every run checked for equal results before it is timed:

1. The public micro traces (multicast: one instruction to many channels), against the
   public simulator's ``reference.json`` cycles.
2. The same work as per-channel-distinct traces: every multicast instruction split into one
   instruction per channel, rows differing per channel (row + 37 c), so no two channels run
   alike (what serving produces: dynamic batches, per-channel placements).
3. One Llama-3-8B decode step of one layer, 32 requests x 2,048 tokens, PATTON's programs
   (token writes, QK^T, SV; 32 channels busy), as ``runtime_decode_step.py`` builds them.
4. Cost reuse (:class:`patton.sim.cost_cache.CostCache`) over ``--steps`` decode steps of
   Llama-3-8B with ``--layers`` layers: full simulation of every program against the cache
   (equal costs required), by kind of program.
5. ``--tables frontend`` (not in the default): the decode step of table 3 under the shared
   and the per-channel front end, kernel only: instructions, commands, cycles and times.

Times are the best of ``--repeat`` runs, in process (programs read beforehand); the Python
model's are one run (it is slow), on the first 8,192 instructions with ``--quick``. With
``--reference-binary`` and ``--reference-config``, tables 1 and 2 gain the public simulator's
whole-process wall time (best of ``--repeat``) on the same trace files, its cycles (which must
equal ours) and the ratio to ``patton aim run`` on the same file, also timed as a whole
process. The config file is the simulator's YAML with ``{trace}`` where the trace path goes;
the binary's output must contain ``memory_system_cycles: N``. With ``--json`` the standard
output is one JSON object, the tables' figures by table name (the text tables go to the
standard error instead).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from patton.runtime.decode_batch import decode_steps, prefilled
from patton.sim import trace
from patton.sim.cost_cache import CostCache
from patton.sim.cycle_model import CycleModel, DeviceState, RunResult
from patton.sim.device import DEVICE
from patton.sim.executor import closed
from patton.sim.isa import Instruction, channel_bit, mask_channels
from patton.sim.program import Program

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "tests" / "data" / "aim"
SPLIT = ("micro_macab_1024_16banks", "micro_ewmul_16banks")


def best(fn: Callable[[], RunResult], repeat: int) -> tuple[RunResult, float]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return result, min(times)


def per_channel(program: list[Instruction]) -> list[Instruction]:
    """Split every multi-channel instruction into one per channel, rows differing per channel."""
    out = []
    for ins in program:
        channels = mask_channels(ins.channel_mask) if ins.channel_mask is not None else []
        if len(channels) <= 1:
            out.append(ins)
            continue
        for c in sorted(channels):
            row = None if ins.row is None else (ins.row + 37 * c) % DEVICE.rows
            out.append(dataclasses.replace(ins, channel_mask=channel_bit(c), row=row))
    return out


class Reference:
    """The public simulator as a process: ``binary -f <config with the trace path>``."""

    def __init__(self, binary: str, config: str) -> None:
        self.binary = binary
        self.template = Path(config).read_text()
        if "{trace}" not in self.template:
            sys.exit(f"{config}: the config must contain {{trace}} where the trace path goes")

    def run(self, path: Path, repeat: int) -> tuple[int, float]:
        with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
            f.write(self.template.replace("{trace}", str(path)))
        times, cycles = [], -1
        for _ in range(repeat):
            start = time.perf_counter()
            done = subprocess.run([self.binary, "-f", f.name], capture_output=True, text=True)
            times.append(time.perf_counter() - start)
            if done.returncode != 0:
                sys.exit(f"{self.binary} failed on {path}:\n{done.stderr[-2000:]}")
            found = re.search(r"memory_system_cycles:\s*(\d+)", done.stdout)
            if not found:
                sys.exit(f"{self.binary}: no 'memory_system_cycles: N' in its output on {path}")
            cycles = int(found.group(1))
        Path(f.name).unlink()
        return cycles, min(times)


def ours_as_process(path: Path, repeat: int) -> tuple[int, float]:
    """``patton aim run --json`` on ``path``: whole-process wall time, best of ``repeat``."""
    times, cycles = [], -1
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "patton.cli", "aim", "run", str(path),
                               "--json"], capture_output=True, text=True)
        times.append(time.perf_counter() - start)
        if done.returncode != 0:
            sys.exit(f"patton aim run failed on {path}:\n{done.stderr[-2000:]}")
        cycles = json.loads(done.stdout)["cycles"]
    return cycles, min(times)


def traces_table(title: str, programs: dict[str, tuple[Path, list[Instruction]]],
                 expected: dict[str, int], args: argparse.Namespace,
                 reference: Reference | None, out: TextIO) -> list[dict[str, Any]]:
    """One row per trace, printed to ``out`` as it is measured; returns the rows' figures."""
    rows: list[dict[str, Any]] = []
    print(f"\n{title}", file=out)
    head = (f"{'trace':34s} {'commands':>10s} {'cycles':>9s} {'kernel s':>9s} {'python s':>9s}"
            f" {'python/kernel':>13s}")
    if reference:
        head += f" {'public s':>9s} {'ours s':>7s} {'public/ours':>11s}"
    print(head, file=out)
    for name, (path, program) in programs.items():
        columnar = Program.of(program)
        result, seconds = best(lambda: CycleModel().run(columnar), args.repeat)
        if name in expected:
            assert result.cycles == expected[name], (name, result.cycles, expected[name])
        part = program if not args.quick or len(program) <= 8192 else \
            closed(program[:8192])
        slow, python = best(lambda: CycleModel(native=False).run(part), 1)
        fast, kernel_part = best(lambda: CycleModel().run(part), args.repeat)
        assert (slow.cycles, slow.command_counts, slow.bank_state_cycles) == \
            (fast.cycles, fast.command_counts, fast.bank_state_cycles), name
        label = name if part is program else f"{name} (first 8,192)"
        line = (f"{label:34s} {result.commands:10,d} {result.cycles:9,d} {seconds:9.3f} "
                f"{python:9.2f} {python / kernel_part:13.1f}")
        row: dict[str, Any] = {
            "trace": name, "instructions": len(program), "commands": result.commands,
            "cycles": result.cycles, "kernel_s": seconds,
            "python_instructions": len(part), "python_s": python,
            "kernel_part_s": kernel_part}
        if reference:
            cycles, public = reference.run(path, args.repeat)
            assert cycles == result.cycles, (name, cycles, result.cycles)
            ours_cycles, ours = ours_as_process(path, args.repeat)
            assert ours_cycles == result.cycles
            line += f" {public:9.2f} {ours:7.2f} {public / ours:11.2f}"
            row.update(public_cycles=cycles, public_s=public, ours_s=ours)
        print(line, file=out)
        rows.append(row)
    return rows


def decode_step(args: argparse.Namespace) -> list[Program]:
    """One steady decode step's programs (token writes, QK^T, SV): commit, boundary, then a
    steady step, 1 layer, ``--requests`` x ``--tokens``."""
    rt, next_id = prefilled(args.requests, args.tokens - 1)
    *_, programs = decode_steps(rt, 3, next_id)
    return list(programs)


def decode_step_table(args: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    print(f"\nLlama-3-8B decode step, 1 layer, {args.requests} requests x {args.tokens} tokens "
          "(PATTON's programs; a step that allocates no block)", file=out)
    programs = decode_step(args)
    print(f"{'program':8s} {'instr':>8s} {'commands':>10s} {'cycles':>9s} {'kernel s':>9s} "
          f"{'python s':>9s} {'python/kernel':>13s}", file=out)
    rows: list[dict[str, Any]] = []
    total = {"kernel": 0.0, "python": 0.0}
    for name, program in zip(("writes", "qk", "sv"), programs):
        fast, kernel = best(lambda: CycleModel().run(program), args.repeat)
        slow, python = best(lambda: CycleModel(native=False).run(program), 1)
        assert (slow.cycles, slow.command_counts, slow.bank_state_cycles) == \
            (fast.cycles, fast.command_counts, fast.bank_state_cycles), name
        total["kernel"] += kernel
        total["python"] += python
        print(f"{name:8s} {len(program):8,d} {fast.commands:10,d} {fast.cycles:9,d} "
              f"{kernel:9.3f} {python:9.2f} {python / kernel:13.1f}", file=out)
        rows.append({"program": name, "instructions": len(program),
                     "commands": fast.commands, "cycles": fast.cycles, "kernel_s": kernel,
                     "python_s": python})
    print(f"{'step':8s} {'':8s} {'':10s} {'':9s} {total['kernel']:9.3f} {total['python']:9.2f} "
          f"{total['python'] / total['kernel']:13.1f}", file=out)
    return {"requests": args.requests, "tokens": args.tokens, "programs": rows,
            "kernel_s": total["kernel"], "python_s": total["python"]}


def frontend_table(args: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    """The decode step's programs under both front ends, on the kernel."""
    print(f"\nThe decode step under both front ends (kernel), {args.requests} requests x "
          f"{args.tokens} tokens", file=out)
    print(f"{'program':8s} {'instr':>8s} {'commands':>10s} {'shared':>9s} {'per-chan':>9s} "
          f"{'ratio':>6s} {'shared s':>9s} {'per-ch s':>9s}", file=out)
    rows: list[dict[str, Any]] = []
    for name, program in zip(("writes", "qk", "sv"), decode_step(args)):
        shared, shared_s = best(lambda: CycleModel().run(program), args.repeat)
        split, split_s = best(lambda: CycleModel(frontend="per_channel").run(program),
                              args.repeat)
        assert split.command_counts == shared.command_counts, name
        print(f"{name:8s} {len(program):8,d} {shared.commands:10,d} {shared.cycles:9,d} "
              f"{split.cycles:9,d} {shared.cycles / split.cycles:6.2f} {shared_s:9.3f} "
              f"{split_s:9.3f}", file=out)
        rows.append({"program": name, "instructions": len(program),
                     "commands": shared.commands, "shared_cycles": shared.cycles,
                     "per_channel_cycles": split.cycles, "shared_s": shared_s,
                     "per_channel_s": split_s})
    return {"requests": args.requests, "tokens": args.tokens, "programs": rows}


def cost_table(args: argparse.Namespace, out: TextIO) -> dict[str, Any]:
    print(f"\nCost reuse: Llama-3-8B, {args.layers} layers, {args.requests} requests x "
          f"{args.cost_tokens} tokens, {args.steps} decode steps: token writes (all layers, one "
          "program), then QK^T and SV per layer", file=out)
    rt, next_id = prefilled(args.requests, args.cost_tokens, layers=args.layers)
    model, cache = CycleModel(), CostCache()
    full_state = cached_state = DeviceState.reset()
    seconds = {kind: {"full": 0.0, "cache": 0.0, "programs": 0, "hits": 0}
               for kind in ("token writes", "QK^T and SV")}
    for step in decode_steps(rt, args.steps, next_id):
        for index, program in enumerate(step):
            row = seconds["token writes" if index == 0 else "QK^T and SV"]
            start = time.perf_counter()
            a = model.run(program, full_state)
            row["full"] += time.perf_counter() - start
            hits = cache.hits
            start = time.perf_counter()
            b = cache.run(program, cached_state)
            row["cache"] += time.perf_counter() - start
            row["programs"] += 1
            row["hits"] += cache.hits - hits
            assert (a.cycles, a.command_counts, a.bank_state_cycles, a.state) == \
                (b.cycles, b.command_counts, b.bank_state_cycles, b.state)
            full_state, cached_state = a.state, b.state
    print(f"{'programs':14s} {'count':>6s} {'reused':>6s} {'full s':>8s} {'cached s':>9s} "
          f"{'full/cached':>11s}", file=out)
    total = {"full": 0.0, "cache": 0.0}
    for kind, row in seconds.items():
        total["full"] += row["full"]
        total["cache"] += row["cache"]
        print(f"{kind:14s} {row['programs']:6d} {row['hits']:6d} {row['full']:8.2f} "
              f"{row['cache']:9.2f} {row['full'] / row['cache']:11.1f}", file=out)
    print(f"{'all':14s} {cache.hits + cache.misses:6d} {cache.hits:6d} {total['full']:8.2f} "
          f"{total['cache']:9.2f} {total['full'] / total['cache']:11.1f}   (equal costs)",
          file=out)
    return {"layers": args.layers, "requests": args.requests, "tokens": args.cost_tokens,
            "steps": args.steps,
            "kinds": [{"kind": kind, "programs": row["programs"], "hits": row["hits"],
                       "full_s": row["full"], "cached_s": row["cache"]}
                      for kind, row in seconds.items()],
            "programs": cache.hits + cache.misses, "hits": cache.hits,
            "full_s": total["full"], "cached_s": total["cache"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="runs per timing (best of)")
    ap.add_argument("--quick", action="store_true",
                    help="time the Python model on the first 8,192 instructions only")
    ap.add_argument("--requests", type=int, default=32, help="decode step: requests")
    ap.add_argument("--tokens", type=int, default=2048, help="decode step: tokens each")
    ap.add_argument("--layers", type=int, default=32, help="cost reuse: model layers")
    ap.add_argument("--steps", type=int, default=4, help="cost reuse: decode steps")
    ap.add_argument("--cost-tokens", type=int, default=2047,
                    help="cost reuse: tokens each request holds before the first step")
    ap.add_argument("--tables", default="traces,per-channel,decode,cost",
                    help="comma-separated tables to run (default all four; also: frontend)")
    ap.add_argument("--json", action="store_true",
                    help="write the figures as JSON to stdout (the text tables to stderr)")
    ap.add_argument("--reference-binary", metavar="PATH",
                    help="the public AiM simulator's binary, timed on the same traces")
    ap.add_argument("--reference-config", metavar="FILE",
                    help="its YAML config, with {trace} where the trace path goes")
    args = ap.parse_args()
    if bool(args.reference_binary) != bool(args.reference_config):
        ap.error("--reference-binary and --reference-config go together")
    reference = Reference(args.reference_binary, args.reference_config) \
        if args.reference_binary else None
    tables = set(args.tables.split(","))
    unknown = tables - {"traces", "per-channel", "decode", "cost", "frontend"}
    if unknown:
        ap.error(f"unknown tables {sorted(unknown)} (traces, per-channel, decode, cost, "
                 "frontend)")
    out = sys.stderr if args.json else sys.stdout
    found: dict[str, Any] = {"repeat": args.repeat, "quick": args.quick,
                             "reference": reference is not None}
    expected = {k: v["memory_system_cycles"]
                for k, v in json.loads((TRACES / "reference.json").read_text()).items()}
    public = {p.stem: (p, trace.read(p).to_instructions())
              for p in sorted(TRACES.glob("micro_*.trace"))}
    if "traces" in tables:
        found["traces"] = traces_table("Public micro traces (multicast)", public, expected,
                                       args, reference, out)
    if "per-channel" in tables:
        with tempfile.TemporaryDirectory() as tmp:
            split = {}
            for name in SPLIT:
                program = per_channel(public[name][1])
                path = Path(tmp) / f"{name}_per_channel.trace"
                trace.write(path, program)
                split[f"{name} per channel"] = (path, program)
            found["per-channel"] = traces_table(
                "The same work, one instruction per channel (rows differ per channel)",
                split, {}, args, reference, out)
    if "decode" in tables:
        found["decode"] = decode_step_table(args, out)
    if "cost" in tables:
        found["cost"] = cost_table(args, out)
    if "frontend" in tables:
        found["frontend"] = frontend_table(args, out)
    if args.json:
        print(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
