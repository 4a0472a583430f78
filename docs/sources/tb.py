"""``docs/tb.md``'s measured numbers: the co-simulation throughput
(``benchmarks/rtl_throughput.py``, the first Verilator build included in one run), the public
micro traces and a PATTON runtime trace on the RTL (``patton rtl run``), the player tests'
wall time, and CENT's tiny-Llama block side by side and one channel after another (the
README's records) and with more simulators than cores."""

from __future__ import annotations

from collections.abc import Callable

from patton.sim.timing import PROFILES, TIMING, timing_table

from sources.common import NumbersError, Timed, minutes, record, span, wall

_THROUGHPUT = "benchmarks/rtl_throughput.py"

#: The public micro traces, in the table's order.
MICRO = ("micro_macab_1024_16banks", "micro_rdmac_1024_16banks", "micro_wrab_1024_1bank",
         "micro_wrbias_1024_16banks", "micro_wrbias_mac_rdmac_mac_16banks",
         "micro_wrgb_gbbk_bggb_16banks", "micro_ewmul_16banks",
         "micro_wrbias_mac_af_rdaf_16banks")

#: The figures of ``patton rtl run --json`` the records keep.
_KEYS = ("commands", "replayed_commands", "rtl_cycles", "model_cycles", "last_command_cycle",
         "drain_cycles", "reads", "mat_words", "rejections", "mismatches", "violations",
         "model_violations", "agree", "ok", "rtl_seconds", "build_seconds", "wall_seconds")

#: Runs ``patton rtl run TRACE --rows 1024 --seed 7 --json`` on each micro trace (as
#: ``tests/test_rtl_public_traces.py`` does); prints their figures by trace, JSON.
_MICRO = f"""
import json, subprocess, sys
out = {{}}
for name in {MICRO!r}:
    done = subprocess.run([sys.executable, "-m", "patton.cli", "rtl", "run",
                           f"tests/data/aim/{{name}}.trace", "--rows", "1024", "--seed", "7",
                           "--json"], stdout=subprocess.PIPE, text=True)
    run = json.loads(done.stdout)
    out[name] = {{key: run[key] for key in {_KEYS!r}}}
print(json.dumps(out))
"""

#: ``tests/test_rtl_runtime.py``'s Llama-3-8B run: ``patton runtime scenario --trace`` (2
#: requests x 20 decode steps, seed 5), then ``patton rtl run --rows 1024`` on its trace.
_RUNTIME = f"""
import json, os, subprocess, sys, tempfile
def run(argv):
    done = subprocess.run([sys.executable, "-m", "patton.cli", *argv, "--json"],
                          stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout)
with tempfile.TemporaryDirectory() as folder:
    path = os.path.join(folder, "llama3-8b.trace")
    scenario = run(["runtime", "scenario", "--model", "llama3-8b", "--requests", "2",
                    "--steps", "20", "--seed", "5", "--trace", path])
    rtl = run(["rtl", "run", path, "--rows", "1024"])
print(json.dumps({{"scenario_ok": scenario["ok"],
                  "rtl": {{key: rtl[key] for key in {_KEYS!r}}}}}))
"""

#: The player's regressions under pytest (the Verilator build cached); prints the exit code.
_PLAYER_TESTS = """
import json, subprocess, sys
done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                       "tests/test_rtl_player.py"], stdout=sys.stderr)
print(json.dumps({"exit": done.returncode}))
"""

#: CENT's tiny-Llama block on the RTL (as the README's records ``rtl-cent-tiny*`` run it).
_RTL_CENT = ["-m", "patton.cli", "rtl", "run",
             "tests/data/aim/cent/cent_tiny_llama_h8_pp_8cpb_seq64.trace", "--rows", "1024",
             "--json"]

#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {
    "tb-throughput-500": Timed([_THROUGHPUT, "--instructions", "500", "--json"],
                               fresh_build=True),
    "tb-throughput-2000": Timed([_THROUGHPUT, "--instructions", "2000", "--json"]),
    # today's simulator against commit feaf5dd's, alternating in one run
    "tb-speedup": Timed(["benchmarks/rtl_speedup.py", "--rounds", "3", "--json"]),
    # perf on the 4,000-instruction replay (perf must be installed)
    "tb-profile": Timed(["benchmarks/rtl_profile.py", "--json"]),
    # four channels: four processes, one model, one model on two threads
    "tb-channels-model": Timed(["benchmarks/rtl_channels_model.py", "--json"]),
    "tb-micro": Timed(["-c", _MICRO]),
    "tb-runtime": Timed(["-c", _RUNTIME]),
    "tb-player-tests": Timed(["-c", _PLAYER_TESTS]),
    # more simulators than cores (the README's records have --jobs 1 and 2)
    **{f"tb-rtl-cent-jobs{jobs}": Timed(_RTL_CENT + ["--jobs", str(jobs)]) for jobs in (4, 32)},
}


def _throughput(instructions: int) -> dict:
    """``benchmarks/rtl_throughput.py --instructions N --json``'s figures."""
    return record(f"tb-throughput-{instructions}")


def _micro(trace: str) -> dict:
    """``patton rtl run``'s figures on the public micro trace ``trace``."""
    return record("tb-micro")[trace]


def _micro_table() -> str:
    """Each micro trace on the RTL: commands, RTL cycles, what was compared, the RTL's and the
    whole run's seconds (the Verilator build left out)."""
    lines = ["| trace | commands | RTL cycles | reads compared | mat words compared | rejected by "
             "design | RTL s | wall s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for trace in MICRO:
        run = _micro(trace)
        cells = [f"{run[key]:,}" for key in ("commands", "rtl_cycles", "reads", "mat_words",
                                             "rejections")]
        cells += [f"{run['rtl_seconds']:.2f}", f"{run['wall_seconds'] - run['build_seconds']:.1f}"]
        lines.append(f"| {trace} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _runtime() -> dict:
    """``patton rtl run``'s report on the runtime scenario's trace (both must have passed)."""
    run = record("tb-runtime")
    if not (run["scenario_ok"] and run["rtl"]["ok"]):
        raise NumbersError("docs/records/timed/tb-runtime.json: the scenario or the RTL failed")
    return run["rtl"]


def _player_tests() -> str:
    """The player tests' wall time (they must have passed)."""
    if record("tb-player-tests")["exit"] != 0:
        raise NumbersError("docs/records/timed/tb-player-tests.json: the tests failed")
    return minutes(wall("tb-player-tests"))


def _cent(name: str) -> dict:
    """``patton rtl run``'s report on CENT's tiny-Llama block (the README's timed records)."""
    return record(name)


def _jobs_table() -> str:
    """CENT's tiny-Llama block replayed one channel after another and side by side."""
    lines = ["| `--jobs` | replays (wall) | simulated channel cycles per second |",
             "|---:|---:|---:|"]
    for label, name in (("1 (one after another)", "rtl-cent-tiny-serial"),
                        ("2 (the default on 2 cores)", "rtl-cent-tiny"),
                        ("4", "tb-rtl-cent-jobs4"), ("32", "tb-rtl-cent-jobs32")):
        run = _cent(name)
        lines.append(f"| {label} | {run['replay_seconds']:.1f} s | "
                     f"{run['cycles_per_second']:,} |")
    return "\n".join(lines)


def _speedup() -> dict:
    """``benchmarks/rtl_speedup.py --json``: both trees' best rounds and their ratio."""
    return record("tb-speedup")


def _profile_table() -> str:
    """The simulator's samples by part (``benchmarks/rtl_profile.py``)."""
    what = {"every cycle": "the clock's logic: decoder, timing checker, stage-1 write "
                           "multiplexers, mat and buffer ports, registers",
            "gated clocks": "logic behind the gated clocks, here the 16 MAC units (one "
                            "function of `patton_mac`, run for each unit: lanes, adder tree, "
                            "rounding) and their operands and readouts in each MAC16",
            "stream reader": "`tb/player_dpi.cpp`: schedule lines into the player's registers",
            "runtime": "Verilator's scheduler and library, the C library, the kernel"}
    shares = record("tb-profile")["shares"]
    lines = ["| part | share of the simulator's samples | what |", "|---|---:|---|"]
    lines += [f"| {part} | {shares[part]:.0f} % | {what[part]} |" for part in what]
    return "\n".join(lines)


def _channels_table() -> str:
    """Four channels three ways (``benchmarks/rtl_channels_model.py``)."""
    run = record("tb-channels-model")
    lines = ["| configuration | wall | simulator CPU | channel cycles per wall second |",
             "|---|---:|---:|---:|"]
    for name in run["configurations"]:
        lines.append(f"| {run['descriptions'][name]} | {run['wall_seconds'][name]:.2f} s | "
                     f"{run['cpu_seconds'][name]:.2f} s | "
                     f"{run['channel_cycles_per_wall_second'][name] / 1e3:,.0f} k |")
    return "\n".join(lines)


def _kilo(rate: float) -> str:
    """A rate in thousands: ``544 k``."""
    return f"{rate / 1e3:.0f} k"


def _channels_ratio(name: str) -> float:
    """Wall time of configuration ``name`` over the separate processes'."""
    wall = record("tb-channels-model")["wall_seconds"]
    return wall[name] / wall["processes"]


def _marginal() -> float:
    """Simulator CPU seconds per channel cycle: the difference of the two throughput runs'
    CPU times over the difference of their cycles."""
    short, long = _throughput(500), _throughput(2000)
    return (long["cpu_seconds"] - short["cpu_seconds"]) / (long["cycles"] - short["cycles"])


def _quiet_profiles() -> str:
    """``TimingTable.quiet`` of every timing profile: one value when they all have it."""
    values = [timing_table(p).quiet for p in PROFILES]
    if len(set(values)) == 1:
        return f"{values[0]} cycles on " + ("both profiles" if len(values) == 2
                                            else "every profile")
    return ", ".join(f"{v} cycles on {p}" for p, v in zip(PROFILES, values))


def _throughput_numbers(instructions: int) -> dict[str, Callable[[], str]]:
    """One throughput run's figures."""
    def made(key: str, fmt: Callable[[float], str]) -> Callable[[], str]:
        return lambda: fmt(_throughput(instructions)[key])
    prefix = f"tb.throughput.{instructions}"
    return {f"{prefix}.commands": made("commands", lambda v: f"{v:,}"),
            f"{prefix}.cycles": made("cycles", lambda v: f"{v:,}"),
            f"{prefix}.seconds": made("seconds", lambda v: f"{v:.2f} s"),
            f"{prefix}.cycles_per_s": made("cycles_per_second",
                                           lambda v: f"{v / 1e3:.0f} k cycles/s"),
            f"{prefix}.cpu": made("cpu_seconds", lambda v: f"{v:.2f} s"),
            f"{prefix}.cycles_per_cpu_s": made("cycles_per_cpu_second",
                                               lambda v: f"{v / 1e3:.0f} k cycles")}


#: Number name -> how it is made from the records (or from the code).
NUMBERS: dict[str, Callable[[], str]] = {
    **_throughput_numbers(500),
    **_throughput_numbers(2000),
    "tb.build.seconds": lambda: minutes(_throughput(500)["build_seconds"]),
    "tb.throughput.cpu_per_cycle": lambda: f"{_marginal() * 1e6:.1f} µs",
    "tb.throughput.startup": lambda: (
        f"{_throughput(500)['cpu_seconds'] - _throughput(500)['cycles'] * _marginal():.2f} s"),
    "tb.throughput.cycles_per_command": lambda: (
        f"{_throughput(2000)['cycles'] / _throughput(2000)['commands']:.1f}"),
    "tb.micro.max_commands": lambda: (
        f"{max(_micro(t)['commands'] for t in MICRO) / 1e6:.1f} M"),
    "tb.micro.wall": lambda: minutes(sum(_micro(t)["wall_seconds"] - _micro(t)["build_seconds"]
                                         for t in MICRO)),
    "tb.micro.drain": lambda: span([_micro(t)["rtl_cycles"] - _micro(t)["last_command_cycle"]
                                    for t in MICRO], lambda v: f"{v:.0f}"),
    "tb.micro.past_model": lambda: span([_micro(t)["rtl_cycles"] - _micro(t)["model_cycles"]
                                         for t in MICRO], lambda v: f"{v:.0f}"),
    "tb.micro.mat_words": lambda: " and ".join(
        f"{_micro(t)['mat_words']:,}" for t in ("micro_wrab_1024_1bank",
                                                "micro_wrgb_gbbk_bggb_16banks")),
    **{f"tb.runtime.{key}": (lambda key=key: f"{_runtime()[key]:,}")
       for key in ("reads", "mat_words", "commands")},
    "tb.player_tests.wall": _player_tests,
    "tb.cent.replays": lambda: str(_cent("rtl-cent-tiny-serial")["replays"]),
    "tb.cent.simulated_cycles": lambda: (
        f"{_cent('rtl-cent-tiny-serial')['simulated_cycles'] / 1e6:.2f} M"),
    "tb.cent.serial.rtl_seconds": lambda: f"{_cent('rtl-cent-tiny-serial')['rtl_seconds']:.1f} s",
    "tb.cent.serial.seconds": lambda: (
        f"{_cent('rtl-cent-tiny-serial')['replay_seconds']:.1f} s"),
    "tb.speedup.base": lambda: _kilo(_speedup()["base_run"]["cycles_per_cpu_second"]),
    "tb.speedup.today": lambda: _kilo(_speedup()["today_run"]["cycles_per_cpu_second"]),
    "tb.speedup.ratio": lambda: f"{_speedup()['ratio']:.2f}x",
    "tb.speedup.cycles": lambda: f"{_speedup()['today_run']['cycles']:,}",
    "tb.speedup.commands": lambda: f"{_speedup()['today_run']['commands']:,}",
    "tb.profile.gated": lambda: f"{record('tb-profile')['shares']['gated clocks']:.0f} %",
    "tb.profile.bound": lambda: _kilo(_speedup()["today_run"]["cycles_per_cpu_second"]
                                      / (record("tb-profile")["shares"]["gated clocks"] / 100)),
    "tb.channels.fastest_ratio": lambda: f"{_channels_ratio('model'):.1f}",
    "tb.channels.threads_ratio": lambda: f"{_channels_ratio('model-threads2'):.1f}",
    # facts of the code
    "tb.code.quiet": lambda: str(TIMING.quiet),
    "tb.code.quiet.profiles": _quiet_profiles,
}

#: Block name -> how it is made from the records.
BLOCKS: dict[str, Callable[[], str]] = {
    "tb.micro": _micro_table,
    "tb.cent.jobs": _jobs_table,
    "tb.profile": _profile_table,
    "tb.channels": _channels_table,
}
