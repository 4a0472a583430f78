"""The README's measured numbers: the energy line, the Value-write ratios, the paper's
evaluation and its sensitivity, the demo, the cycle model against the public simulator."""

from __future__ import annotations

import math
from collections.abc import Callable

from patton.eval.paper import BASELINES  # Fig. 7's prior layouts, in the paper's order
from patton.sim.timing import TIMING

from sources.common import (
    ROOT,
    Quick,
    Timed,
    golden,
    golden_names,
    minutes,
    pct,
    record,
    slash,
    span,
    wall,
    x,
)

_MICRO_MACAB = "tests/data/aim/micro_macab_1024_16banks.trace"
_VALUE_WRITES = "benchmarks/runtime_value_writes.py"

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {
    "aim-micro_macab": Quick(["-m", "patton.cli", "aim", "run", _MICRO_MACAB, "--json"]),
    "aim-micro_macab-cent": Quick(["-m", "patton.cli", "aim", "run", _MICRO_MACAB,
                                   "--standby", "cent", "--json"]),
    "value-writes-llama3-8b": Quick([_VALUE_WRITES, "--model", "llama3-8b", "--requests",
                                     "32", "--steps", "32", "--json"]),
    "value-writes-opt-6.7b": Quick([_VALUE_WRITES, "--model", "opt-6.7b", "--requests", "8",
                                    "--steps", "32", "--json"]),
}

#: Stored record name -> its file: the full-scale ``patton repro`` results, and the public
#: AiM simulator's results that ``tests/test_cycle_model.py`` requires the cycle model to equal.

STORED = {"repro-12000": ROOT / "docs" / "img" / "repro-12000.json",
        "aim-reference": ROOT / "tests" / "data" / "aim" / "reference.json"}


_RTL_CENT = ["-m", "patton.cli", "rtl", "run",
             "tests/data/aim/cent/cent_tiny_llama_h8_pp_8cpb_seq64.trace", "--rows", "1024",
             "--json"]
_DEMO = ["-m", "patton.cli", "demo", "--out", "build/records/demo"]


#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {
    "demo": Timed(_DEMO, output="build/records/demo/chat.json"),
    "demo-fresh": Timed(_DEMO, fresh_build=True, output="build/records/demo/chat.json"),
    # the whole device: 8 KV heads on 32 channel simulators
    "demo-32": Timed(["-m", "patton.cli", "demo", "--channels", "32", "--out",
                      "build/records/demo-32"], output="build/records/demo-32/chat.json"),
    "rtl-cent-tiny": Timed(_RTL_CENT + ["--jobs", "2"]),
    "rtl-cent-tiny-serial": Timed(_RTL_CENT + ["--jobs", "1"]),
    "repro-quick": Timed(["-m", "patton.cli", "repro", "all", "--quick", "--out",
                          "build/records/repro-quick", "--no-progress"],
                         output="build/records/repro-quick/repro.json"),
}


def _fig7(key: str, models: tuple[str, ...] | None = None) -> Callable[[], str]:
    """Fig. 7's gains over NeuPIMs / PIMphony / AttAcc / BlockPIM, then the overall one."""
    def made() -> str:
        fig7 = record("repro-12000")["fig7"]
        if models is None:
            gains = fig7[key]
            return slash([gains[b] for b in BASELINES]) + f" ({x(gains['all'])})"
        per = [fig7["per_model"][m][key] for m in models]
        return slash([sum(p[b] for p in per) / len(per) for b in BASELINES])
    return made


def _writes(model: str, timing: str, key: str, digits: int = 2) -> Callable[[], str]:
    """A no-CZ-over-CZ ratio of the Value-write benchmark (per-bank ``W MEM``)."""
    return lambda: x(record(f"value-writes-{model}")["timing"][timing]["no_cz_mem_over_cz"]
                      [key], digits)


def _fig8(key: str) -> Callable[[], str]:
    """A Fig. 8 figure on the shared / per-channel front end."""
    def made() -> str:
        fig8 = record("repro-12000")["fig8"]
        fmt = x if "speedup" in key else pct
        return f"{fmt(fig8['shared'][key])} / {fmt(fig8['per_channel'][key])}"
    return made


def _fig9(load: str) -> Callable[[], str]:
    def made() -> str:
        hits = record("repro-12000")["fig9"][load]
        return (" / ".join(f"{100 * hits[r]:.2f}" for r in ("gpu", "patton", "patton-no-o2v"))
                + f" %; {100 * hits['ceiling']:.2f} %")
    return made


def _nj(name: str, key: str | None = None) -> Callable[[], str]:
    """A run's energy (``patton aim run --json``): the total, or one component."""
    def made() -> str:
        run = record(name)
        return f"{run['energy_nj'] if key is None else run['energy_breakdown_nj'][key]:,.0f} nJ"
    return made


def _sensitivity(axis: str, metric: str) -> Callable[[], str]:
    """One figure of the sensitivity's row for ``axis`` (``none``: the paper configuration)."""
    def made() -> str:
        row = next(r for r in record("repro-12000")["sensitivity"]["rows"] if r["axis"] == axis)
        value = row[metric]
        return pct(value) if "reduction" in metric else x(value)
    return made


def _demo(key: str, fmt: str = ",", name: str = "demo") -> Callable[[], str]:
    """A figure of the demo's record (``chat.json``), formatted by ``fmt``."""
    return lambda: format(record(name)[key], fmt)


def _memory_total(name: str) -> float:
    """MiB at most in use at once by a demo run: its process's peak and, for every channel, the
    largest simulator's."""
    run = record(name)
    return run["memory_mib"]["host"] + run["channels"] * run["memory_mib"]["simulator"]


def _rtl_cent(key: str, fmt: str = ",", name: str = "rtl-cent-tiny") -> Callable[[], str]:
    """A figure of ``patton rtl run --json`` on CENT's tiny-Llama block."""
    return lambda: format(record(name)[key], fmt)


def _golden() -> list[dict]:
    """Every golden run recorded from real vLLM 0.33."""
    return [golden(name) for name in golden_names()]


def _demo_transcript() -> str:
    """What ``patton demo`` prints: its first two steps, then the summary (files aside)."""
    from patton.cli.demo import HEADER, row, summary

    demo = record("demo")
    lines = ["$ patton demo", HEADER, *(row(s) for s in demo["per_step"][:2]), " ...",
             *summary(demo)]
    return "```\n" + "\n".join(line.rstrip() for line in lines) + "\n```"


#: The sensitivity's rows (the axis each changes) and figures, as the README's table has them.
_AXES = ("none", "frontend", "timing", "wo_cz_write", "standby", "context", "gpu")
_METRICS = ("fig7_speedup_all", "fig7_energy_gain_all", "fig8_latency_reduction",
            "fig8_energy_reduction", "fig8_value_write_speedup")

def _sens_span(metric: str, digits: int) -> Callable[[], str]:
    """The range of one sensitivity figure over every row (each axis changed alone)."""
    return lambda: span([r[metric] for r in record("repro-12000")["sensitivity"]["rows"]],
                         lambda v: x(v, digits))


def _task_seconds(data: object) -> float:
    """Every task's wall time in a ``patton repro`` record, summed."""
    if isinstance(data, dict):
        return sum(v if k == "task_seconds" else _task_seconds(v) for k, v in data.items())
    if isinstance(data, list):
        return sum(_task_seconds(v) for v in data)
    return 0.0


def _within_paper() -> str:
    """How close the per-channel front end's Fig. 7 speedup and Fig. 8 latency reduction come
    to the paper's: the larger relative difference, rounded up to a whole per cent."""
    from patton.eval.figures import fig7, fig8

    row = next(r for r in record("repro-12000")["sensitivity"]["rows"] if r["axis"] == "frontend")
    gaps = [abs(row["fig7_speedup_all"] / fig7.PAPER["speedup"]["all"] - 1),
            abs(row["fig8_latency_reduction"]
                / fig8.PAPER["shared"]["latency_reduction_vs_wo_cz"] - 1)]
    return f"{math.ceil(100 * max(gaps))} %"


def _recompute_share() -> str:
    """The GPU recomputation's share of the energy of the layouts without prefix caching
    (PIMphony, AttAcc, NeuPIMs), over the four models."""
    per = record("repro-12000")["fig7"]["per_model"].values()
    shares = [m["energy"][b]["recompute"] / m["energy"][b]["total"]
              for m in per for b in ("pimphony", "attacc", "neupims")]
    return span(shares, lambda v: f"{100 * v:.0f} %")


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    # README, "Energy": the public micro trace under both standby accountings
    "energy.micro_macab": _nj("aim-micro_macab"),
    "energy.micro_macab.standby": _nj("aim-micro_macab", "standby"),
    "energy.micro_macab.cent": _nj("aim-micro_macab-cent"),
    # README, the PATTON runtime: the Value-write benchmark, head timing and CENT's
    "writes.llama.activations": _writes("llama3-8b", "aimsim-0f28a07", "activations", 1),
    "writes.llama.cycles": _writes("llama3-8b", "aimsim-0f28a07", "cycles"),
    "writes.opt.cycles": _writes("opt-6.7b", "aimsim-0f28a07", "cycles"),
    "writes.llama.activations.2eb1ee0": _writes("llama3-8b", "aimsim-2eb1ee0", "activations",
                                                1),
    "writes.llama.cycles.2eb1ee0": _writes("llama3-8b", "aimsim-2eb1ee0", "cycles"),
    "writes.opt.activations": _writes("opt-6.7b", "aimsim-0f28a07", "activations", 1),
    "writes.opt.activations.2eb1ee0": _writes("opt-6.7b", "aimsim-2eb1ee0", "activations", 1),
    "writes.opt.cycles.2eb1ee0": _writes("opt-6.7b", "aimsim-2eb1ee0", "cycles"),
    # README, the paper's evaluation: patton repro all under the paper configuration
    "fig7.speedup": _fig7("speedup"),
    "fig7.energy": _fig7("energy_gain"),
    "fig7.speedup.llama3-8b": _fig7("speedup", ("llama3-8b",)),
    "fig7.speedup.qwen3-8b": _fig7("speedup", ("qwen3-8b",)),
    "fig7.speedup.mha": _fig7("speedup", ("opt-6.7b", "qwen1.5-7b")),
    "fig8.latency": _fig8("latency_reduction_vs_wo_cz"),
    "fig8.energy": _fig8("energy_reduction_vs_wo_cz"),
    "fig8.writes": _fig8("value_write_speedup_vs_wo_cz"),
    "fig9.normal": _fig9("normal"),
    "fig9.pressure": _fig9("pressure"),
    "fig9.pressure.no_o2v": lambda: pct(record("repro-12000")["fig9"]["pressure"]
                                        ["patton-no-o2v"]),
    "micro.activations": lambda: x(record("repro-12000")["micro"]["cz_activation_reduction"]),
    "micro.fragmentation": lambda: (
        f"{x(record('repro-12000')['micro']['fragmentation_latency'])} / "
        f"{x(record('repro-12000')['micro']['fragmentation_energy'])}"),
    # README, what each assumption does: patton repro sensitivity (2,000 steps)
    **{f"sens.{axis}.{metric}": _sensitivity(axis, metric)
       for axis in _AXES for metric in _METRICS},
    "sens.span.fig7_speedup": _sens_span("fig7_speedup_all", 2),
    "sens.span.fig7_energy": _sens_span("fig7_energy_gain_all", 1),
    "sens.frontend.within_paper": _within_paper,
    "sens.combinations": lambda: str(record("repro-12000")["sensitivity"]["combinations"]),
    "fig7.recompute_share": _recompute_share,
    "fig8.vs_blockpim": lambda: "; ".join(
        " / ".join(pct(record("repro-12000")["fig8"][f][f"{k}_reduction_vs_blockpim"])
                   for k in ("latency", "energy")) for f in ("shared", "per_channel")),
    "sens.wo_cz_write.slower": lambda: "{:.0f}x".format(1 // next(
        r for r in record("repro-12000")["sensitivity"]["rows"] if r["axis"] == "wo_cz_write")
        ["fig8_value_write_speedup"]),
    "fig8.energy_vs_blockpim": lambda: span(
        [record("repro-12000")["fig8"][f]["energy_reduction_vs_blockpim"]
         for f in ("shared", "per_channel")], pct),
    "writes.mean": lambda: x(sum(record(f"value-writes-{m}")["timing"]["aimsim-0f28a07"]
                                 ["no_cz_mem_over_cz"]["cycles"]
                                 for m in ("llama3-8b", "opt-6.7b")) / 2, 1),
    "writes.mean.2eb1ee0": lambda: x(sum(record(f"value-writes-{m}")["timing"]["aimsim-2eb1ee0"]
                                         ["no_cz_mem_over_cz"]["cycles"]
                                         for m in ("llama3-8b", "opt-6.7b")) / 2, 1),
    "micro.fragmentation.latency": lambda: x(
        record("repro-12000")["micro"]["fragmentation_latency"]),
    "micro.fragmentation.energy": lambda: x(
        record("repro-12000")["micro"]["fragmentation_energy"]),
    "repro.task_minutes": lambda: f"{_task_seconds(record('repro-12000')) / 60:.0f} min",
    "repro.quick.wall": lambda: minutes(wall("repro-quick")),
    # README, CENT's tiny-Llama block on the RTL, side by side and one channel after another
    **{f"rtl_cent.{key}": _rtl_cent(key) for key in ("commands", "reads", "mat_words",
                                                     "rejections", "violations")},
    "rtl_cent.seconds": _rtl_cent("replay_seconds", ".1f"),
    "rtl_cent.rate": _rtl_cent("cycles_per_second"),
    "rtl_cent.serial.seconds": _rtl_cent("replay_seconds", ".1f", "rtl-cent-tiny-serial"),
    "rtl_cent.serial.rate": _rtl_cent("cycles_per_second", ",", "rtl-cent-tiny-serial"),
    # README, the serving engine: the golden runs of real vLLM
    "golden.runs": lambda: str(len(_golden())),
    "golden.preempting": lambda: str(sum(g["report"]["preemptions"] > 0 for g in _golden())),
    "golden.no_prefix_caching": lambda: str(sum(
        g["params"].get("enable_prefix_caching", True) is False for g in _golden())),
    # README, the serving engine's speed beside real vLLM's (docs/sources/serving.py's run)
    "speed.embedded_over_vllm": lambda: x(next(
        r for r in record("serving-speed-patton-vllm")["rows"]
        if r["engine"] == "embedded")["speedup_vs_vllm"], 1),
    # README: facts of the code
    "code.timing_rules": lambda: str(len(TIMING.rules)),
    # README, patton demo: the timed runs on a cached and an empty build folder
    "demo.wall": lambda: minutes(record("demo")["wall_seconds"]),
    "demo.fresh.wall": lambda: minutes(record("demo-fresh")["wall_seconds"]),
    "demo.fresh.build": lambda: minutes(record("demo-fresh")["ready_seconds"]),
    "demo.channel_rate": _demo("channel_cycles_per_second"),
    "demo.fresh.channel_rate": _demo("channel_cycles_per_second", name="demo-fresh"),
    "demo.device_rate": _demo("rtl_cycles_per_second"),
    "demo.channel_cycles": lambda: f"{record('demo')['channel_cycles'] / 1e6:.2f} M",
    "demo.rtl_seconds": _demo("rtl_seconds", ".1f"),
    "demo32.wall": lambda: minutes(record("demo-32")["wall_seconds"]),
    "demo32.steps": _demo("steps", name="demo-32"),
    "demo32.channel_rate": _demo("channel_cycles_per_second", name="demo-32"),
    "demo32.channel_cycles": lambda: f"{record('demo-32')['channel_cycles'] / 1e6:.1f} M",
    "demo32.rtl_seconds": _demo("rtl_seconds", ".0f", name="demo-32"),
    "demo32.checked": _demo("placement_checked", name="demo-32"),
    "demo32.mat_words": _demo("mat_words", name="demo-32"),
    "demo32.memory.host": lambda: f"{record('demo-32')['memory_mib']['host']:.0f} MiB",
    "demo32.memory.simulator": lambda: (
        f"{record('demo-32')['memory_mib']['simulator']:.0f} MiB"),
    "demo32.memory.total": lambda: (
        f"{_memory_total('demo-32') / 1024:.1f} GiB" if _memory_total("demo-32") >= 1024
        else f"{_memory_total('demo-32'):.0f} MiB"),
    "demo32.verdict": lambda: ("every check passed" if not record("demo-32")["failures"]
                               else f"{len(record('demo-32')['failures'])} failures"),
    "demo.host_seconds": lambda: minutes(record("demo")["wall_seconds"]
                                          - record("demo")["rtl_seconds"]
                                          - record("demo")["ready_seconds"]),
    "sens.closest": lambda: ", ".join(
        (pct if "reduction" in m else x)(record("repro-12000")["sensitivity"]["closest"][m])
        for m in _METRICS),
}


def _aim_reference() -> str:
    """The public simulator's cycles and DRAM commands per public trace (the cycle model's
    are equal: ``tests/test_cycle_model.py``); the small traces, whose schedules are
    compared too, in one row."""
    runs = record("aim-reference")
    commands = {name: sum(sum(c.values()) for c in run["command_counts"].values())
                for name, run in runs.items()}
    big = sorted((n for n in runs if "schedule" not in runs[n]), key=lambda n: -commands[n])
    small = sorted((n for n in runs if "schedule" in runs[n]), key=lambda n: n != "all_isr")
    lines = ["| trace | cycles (= reference) | DRAM commands |", "|---|---:|---:|",
             *(f"| {n} | {runs[n]['memory_system_cycles']:,} | {commands[n]:,} |" for n in big),
             f"| {small[0]} and {len(small) - 1} probes | "
             + ", ".join(f"{runs[n]['memory_system_cycles']:,}" for n in small)
             + " | schedules identical |"]
    return "\n".join(lines)


#: Block name -> how it is made from the records (a fenced block, fences included).
BLOCKS: dict[str, Callable[[], str]] = {
    "demo.transcript": _demo_transcript,
    "aim.reference": _aim_reference,
}




def _front_end(program: str) -> Callable[[], str]:
    """A decode-step program's cycles under the shared then the per-channel front end."""
    def made() -> str:
        row = next(r for r in record("cycle-model-facts")["step"] if r["program"] == program)
        return f"{row['shared']:,} to {row['per_channel']:,}"
    return made


NUMBERS.update({f"frontend.{p}.cycles": _front_end(p) for p in ("writes", "qk", "sv")})
