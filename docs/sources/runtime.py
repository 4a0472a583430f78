"""``docs/runtime.md``'s measured numbers: the decode step's assembly time next to the
device's (``benchmarks/runtime_decode_step.py``)."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Quick, Timed, record

_DECODE = "benchmarks/runtime_decode_step.py"

#: Timed record name -> how it is made (milliseconds of Python on this machine).
TIMED: dict[str, Timed] = {
    "runtime-decode-step": Timed([_DECODE, "--json"]),
    "runtime-decode-step-stagger": Timed([_DECODE, "--stagger", "--json"]),
    "runtime-decode-step-cold": Timed([_DECODE, "--cold", "--json"]),
    # Deterministic, but minutes long: the CLI scenario at the paper's concurrency.
    "runtime-scenario-32": Timed(["-m", "patton.cli", "runtime", "scenario", "--model",
                                  "llama3-8b", "--requests", "32", "--steps", "40", "--json"]),
}

#: The step kinds, in the table's order, and the record each is in.
_STEPS = {"commit": "runtime-decode-step", "boundary": "runtime-decode-step",
          "steady": "runtime-decode-step", "staggered": "runtime-decode-step-stagger"}


def _row(step: str, phase: str, name: str | None = None) -> dict:
    """The benchmark's row of ``phase`` in the step kind ``step`` (of the record ``name``, or
    the step kind's own)."""
    return next(r for r in record(name or _STEPS[step])["rows"]
                if r["step"] == step and r["phase"] == phase)


def _ms(value: float) -> str:
    """Milliseconds as the table has them: three significant figures."""
    return f"{value:.3f}" if value < 1 else f"{value:.3g}" if value < 10 else f"{value:.1f}"


def _times(ratio: float) -> str:
    """A time over the device's: ``0.67×``, ``4.3×``."""
    return f"{ratio:.2f}×" if ratio < 1 else f"{ratio:.1f}×"


def _distinct(values: list[str]) -> str:
    """The values, each once, in their order (commit, boundary, steady, staggered)."""
    return " / ".join(dict.fromkeys(values))


def _ms_row(label: str, phase: str, bold: bool = False) -> list[str]:
    """A row of times per step kind, with the ratio to the device time for totals."""
    cells = []
    for step in _STEPS:
        r = _row(step, phase)
        cell = _ms(r["assemble_ms"])
        if r.get("assemble_over_device") is not None and phase in ("total", "+buffer"):
            cell += f" ({_times(r['assemble_over_device'])})"
        cells.append(f"**{cell}**" if bold and step == "steady" else cell)
    return [label, *cells]


def _decode_table() -> str:
    """The decode step's table: each phase's instructions, Python time per step kind, device
    time and expansion time."""
    lines = ["| phase (ms) | instructions | commit step | boundary step | steady step | staggered "
             "| device (µs) | expand to `Instruction`s (ms) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    phases = (("place (engine picks blocks; binds 32 at a boundary)", "place"),
              ("Key + Value writes (`Runtime.append`)", "writes"),
              ("QK^T (`qk_step`)", "qk"),
              ("SV, scores in `sv_buffer` (`sv_step`)", "sv"),
              ("**total** (place + writes + QK^T + SV)", "total"),
              ("`sv_buffer` (zeroed scores; after a table change also patching or laying out "
               "SV)", "buffer"),
              ("total with `sv_buffer`", "+buffer"),
              ("SV, scores copied (instead of `sv_buffer` + SV)", "sv copy"))
    for label, phase in phases:
        rows = [_row(step, phase) for step in _STEPS]
        cells = _ms_row(label, phase, bold=phase in ("writes", "qk", "sv", "total", "+buffer"))
        if "instructions" in rows[0]:
            expand = [r["expand_ms"] for r in rows]
            low, high = round(min(expand)), round(max(expand))
            extra = [_distinct([f"{r['instructions']:,}" for r in rows]), *cells[1:],
                     _distinct([f"{r['device_us']:.1f}" for r in rows]),
                     f"{low}" if low == high else f"{low}–{high}"]
            if phase == "sv copy":
                extra = ["", *cells[1:], "", ""]
        elif phase in ("total", "+buffer"):
            extra = ["", *cells[1:],
                     _distinct([f"{r['device_us']:.1f}" for r in rows]) if phase == "total"
                     else "", ""]
        else:
            extra = ["–", *cells[1:], "–", "–"]
        lines.append("| " + " | ".join([cells[0], *extra]) + " |")
    return "\n".join(lines)


def _per_block(key: str) -> float:
    """A step's mean over one block of 16 decode steps (one commit, one boundary, 14 steady):
    ``assemble_ms`` of the total (``total`` or ``+buffer``), or ``device_us`` in ms."""
    def one(step: str) -> float:
        r = _row(step, "total" if key == "device" else key)
        return r["device_us"] / 1e3 if key == "device" else r["assemble_ms"]
    return (one("commit") + one("boundary") + 14 * one("steady")) / 16


def _total(step: str, phase: str = "total") -> Callable[[], str]:
    """A step kind's total time (ms)."""
    return lambda: _ms(_row(step, phase)["assemble_ms"])


def _ratio(step: str, phase: str = "total") -> Callable[[], str]:
    """A step kind's total over its device time."""
    return lambda: _times(_row(step, phase)["assemble_over_device"])


#: The total phases, as number names have them (``+buffer``: ``with_buffer``).
_NAME = {"total": "total", "+buffer": "with_buffer"}


def _cold(step: str, phase: str) -> Callable[[], str]:
    """A step kind's total time (ms) with the CPU caches evicted before every phase."""
    return lambda: _ms(_row(step, phase, "runtime-decode-step-cold")["assemble_ms"])


NUMBERS: dict[str, Callable[[], str]] = {
    **{f"runtime.decode.{step}.{_NAME[phase]}": _total(step, phase)
       for step in ("steady",) for phase in _NAME},
    **{f"runtime.decode.{step}.{_NAME[phase]}.ratio": _ratio(step, phase)
       for step in _STEPS for phase in _NAME},
    **{f"runtime.decode.cold.{step}.{_NAME[phase]}": _cold(step, phase)
       for step in ("commit", "boundary", "steady") for phase in _NAME},
    "runtime.decode.cold.steady.ratio": lambda: _times(
        _row("steady", "total", "runtime-decode-step-cold")["assemble_over_device"]),
    "runtime.decode.steady.device": lambda: f"{_row('steady', 'total')['device_us']:.0f} µs",
    "runtime.decode.block": lambda: f"{_per_block('total'):.3f} ms",
    "runtime.decode.block.buffer": lambda: f"{_per_block('+buffer'):.3f} ms",
    "runtime.decode.block.device": lambda: f"{_per_block('device'):.3f} ms",
    "runtime.decode.block.ratio": lambda: f"{_per_block('total') / _per_block('device'):.1f}×",
    "runtime.decode.block.buffer.ratio": lambda: (
        f"{_per_block('+buffer') / _per_block('device'):.1f}×"),
}

#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {"runtime.decode": _decode_table}


_PATHS = (("cz", "CZ (`W MEM`)"), ("no_cz_mem", "no CZ, `W MEM`"),
          ("no_cz_abk", "no CZ, `WR_ABK`"))


def _writes(model: str, timing: str = "aimsim-0f28a07") -> dict:
    """The Value-write benchmark's figures for ``model`` under ``timing`` (the README's
    records, ``benchmarks/runtime_value_writes.py``)."""
    return record(f"value-writes-{model}")["timing"][timing]


def _cell(run: dict, path: str, key: str, fmt: str) -> str:
    """One write path's figure, with its ratio to the Commit Zone's unless it is the CZ's."""
    cell = format(run[path][key], fmt)
    if path != "cz":
        ratio = run[f"{path}_over_cz"][key]
        cell += f" ({ratio:.2f}×)" if key != "activations" else f" ({ratio:.1f}×)"
    return cell


def _writes_table(model: str, paper: bool) -> str:
    """Activations, cycles and energy of each write path under the public simulator's head."""
    run = _writes(model)
    head = "| | " + " | ".join(label for _, label in _PATHS) + (" | paper |" if paper else " |")
    lines = [head, "|---|---:|---:|---:|" + ("---|" if paper else "")]
    papers = {"activations": "12.6× fewer with CZ", "cycles": "~5× faster with CZ",
              "energy_nj": ""}
    for key, label, fmt in (("activations", "row activations", ","), ("cycles", "cycles", ","),
                            ("energy_nj", "energy (nJ)", ",.0f")):
        cells = [_cell(run, path, key, fmt) for path, _ in _PATHS]
        lines.append(f"| {label} | " + " | ".join(cells)
                     + ((f" | {papers[key]} |" if papers[key] else " | |") if paper else " |"))
    return "\n".join(lines)


def _both_timings() -> str:
    """Activations and cycles of each write path under both reference timings."""
    lines = ["| model | write path | activations 0f28a07 | activations 2eb1ee0 | cycles 0f28a07 "
             "| cycles 2eb1ee0 |", "|---|---|---:|---:|---:|---:|"]
    for model, name in (("llama3-8b", "Llama-3-8B"), ("opt-6.7b", "OPT-6.7B")):
        for i, (path, label) in enumerate(_PATHS):
            cells = [_cell(_writes(model, t), path, key, ",")
                     for key in ("activations", "cycles")
                     for t in ("aimsim-0f28a07", "aimsim-2eb1ee0")]
            lines.append((f"| {name} |" if i == 0 else "| |") + f" {label} | "
                         + " | ".join(cells) + " |")
    return "\n".join(lines)


BLOCKS.update({
    "runtime.writes.llama": lambda: _writes_table("llama3-8b", True),
    "runtime.writes.opt": lambda: _writes_table("opt-6.7b", False),
    "runtime.writes.timings": _both_timings,
})

_TIMINGS = {"0f28a07": "aimsim-0f28a07", "2eb1ee0": "aimsim-2eb1ee0"}
_MODELS = {"llama": "llama3-8b", "opt": "opt-6.7b"}


def _over(model: str, timing: str, path: str, key: str, digits: int) -> Callable[[], str]:
    """A write path's figure over the Commit Zone's: ``2.75×``."""
    return lambda: f"{_writes(model, timing)[f'{path}_over_cz'][key]:.{digits}f}×"


NUMBERS.update({
    **{f"runtime.writes.{m}.{t}.no_cz_mem.{key}": _over(model, timing, "no_cz_mem", key,
                                                        1 if key == "activations" else 2)
       for m, model in _MODELS.items() for t, timing in _TIMINGS.items()
       for key in ("energy_nj", *(("activations",) if m == "llama" else ("cycles",)))},
    "runtime.writes.llama.cycles": lambda: " vs ".join(
        f"{_writes('llama3-8b')[p]['cycles']:,}" for p in ("cz", "no_cz_mem")),
    "runtime.writes.abk_speedup": lambda: (
        f"{1 / _writes('llama3-8b')['no_cz_abk_over_cz']['cycles']:.0f}×"),
    "runtime.writes.mean": lambda: " against ".join(
        f"{sum(_writes(m, t)['no_cz_mem_over_cz']['cycles'] for m in _MODELS.values()) / 2:.1f}×"
        for t in ("aimsim-2eb1ee0", "aimsim-0f28a07")),
})

#: Quick record name -> the command whose JSON output it is.
RECORDS: dict[str, Quick] = {
    "runtime-value-writes-frontend": Quick(
        ["benchmarks/runtime_value_writes.py", "--model", "llama3-8b", "--requests", "32",
         "--steps", "32", "--timing", "aimsim-0f28a07", "--frontend", "shared", "per_channel",
         "--json"]),
}


def _frontend_table() -> str:
    """The Value-write paths under the shared and the per-channel front end."""
    runs = [record("runtime-value-writes-frontend")["timing"][f"aimsim-0f28a07, {f}"]
            for f in ("shared", "per_channel")]
    lines = ["| Llama-3-8B, aimsim-0f28a07 | shared: activations | cycles | energy (nJ) | "
             "per-channel: activations | cycles | energy (nJ) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for path, label in _PATHS:
        cells = []
        for run in runs:
            for key, fmt in (("activations", ","), ("cycles", ","), ("energy_nj", ",.0f")):
                cell = format(run[path][key], fmt)
                if path != "cz":
                    ratio = run[f"{path}_over_cz"][key]
                    cell += f" ({ratio:.3g}×)" if key == "activations" else f" ({ratio:.2f}×)"
                cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BLOCKS["runtime.writes.frontend"] = _frontend_table


def _frontend(path: str, key: str, fmt: str = ".2f") -> Callable[[], str]:
    """A write path's figure over the Commit Zone's under the per-channel front end."""
    def made() -> str:
        run = record("runtime-value-writes-frontend")["timing"]["aimsim-0f28a07, per_channel"]
        return format(run[f"{path}_over_cz"][key], fmt) + "×"
    return made


def _frontend_gain() -> str:
    """How many times fewer cycles the Commit Zone's writes take decoded per channel."""
    runs = record("runtime-value-writes-frontend")["timing"]
    shared, per_channel = (runs[f"aimsim-0f28a07, {f}"]["cz"]["cycles"]
                           for f in ("shared", "per_channel"))
    return f"{shared / per_channel:.1f}×"


NUMBERS.update({
    "runtime.frontend.cz_gain": _frontend_gain,
    "runtime.frontend.mem.cycles": _frontend("no_cz_mem", "cycles"),
    "runtime.frontend.abk.cycles": _frontend("no_cz_abk", "cycles"),
    "runtime.frontend.energy": lambda: "{:.1f}×".format(min(
        record("runtime-value-writes-frontend")["timing"]["aimsim-0f28a07, per_channel"]
        [f"{p}_over_cz"]["energy_nj"] for p in ("no_cz_mem", "no_cz_abk"))),
    "runtime.frontend.mem.activations": _frontend("no_cz_mem", "activations", ".1f"),
})

RECORDS["runtime-fragmentation"] = Quick(["benchmarks/runtime_fragmentation.py", "--json"])


def _fragment(channels: int, key: str) -> Callable[[], str]:
    """The fragmented SV reduction (scores loaded with one ``WR_GB``) on ``channels``
    channels: ``cycles_one`` … ``energy_nj_fragments`` as the page writes them, or
    ``latency`` / ``energy``, the fragments' figure over the one run's."""
    def made() -> str:
        r = next(r for r in record("runtime-fragmentation")
                 if r["channels"] == channels and r["gb_load"])
        if key in ("latency", "energy"):
            unit = "cycles" if key == "latency" else "energy_nj"
            return f"{r[f'{unit}_fragments'] / r[f'{unit}_one']:.2f}×"
        return f"{r[key]:,.0f}"
    return made


NUMBERS.update({
    **{f"runtime.fragments.{key}": _fragment(32, key)
       for key in ("cycles_one", "energy_nj_one", "cycles_fragments", "energy_nj_fragments",
                   "latency", "energy")},
    "runtime.fragments.fragments": lambda: str(record("runtime-fragmentation")[0]
                                               ["fragments"]),
    "runtime.fragments.one_channel.energy": _fragment(1, "energy"),
})


def _scenario() -> dict:
    """The CLI scenario at the paper's concurrency (32 requests, 40 steps)."""
    return record("runtime-scenario-32")


def _scenario_pair(key: str) -> Callable[[], str]:
    """A Value-write figure of the scenario, the Commit Zone's then no CZ's."""
    return lambda: "{:,} vs {:,}".format(*(_scenario()[key][p] for p in ("cz", "no_cz")))


NUMBERS.update({
    "runtime.scenario.seconds": lambda: f"{_scenario()['wall_seconds']:.0f} s",
    "runtime.scenario.ok": lambda: "all checks pass" if _scenario()["ok"]
    and not _scenario()["failures"] else "checks FAILED",
    "runtime.scenario.writes": lambda: f"{_scenario()['single_token_value_writes']:,}",
    "runtime.scenario.activations": _scenario_pair("value_write_row_activations"),
    "runtime.scenario.activations.ratio": lambda: "{:.1f}×".format(
        _scenario()["value_write_row_activations"]["no_cz"]
        / _scenario()["value_write_row_activations"]["cz"]),
    "runtime.scenario.cycles": _scenario_pair("value_write_cycles"),
    "runtime.scenario.cz_rows": lambda: (
        f"{_scenario()['phases']['cz']['append v_write']['activations']:,}"),
    "runtime.scenario.cz_steps": lambda: (
        str(_scenario()["phases"]["cz"]["append v_write"]["programs"])),
    "runtime.scenario.tolerance": lambda: f"{_scenario()['max_error_over_tolerance']:.2f}",
})

NUMBERS["runtime.writes.llama.abk_over_mem"] = lambda: "{:.1f}×".format(
    _writes("llama3-8b", "aimsim-0f28a07")["no_cz_mem"]["cycles"]
    / _writes("llama3-8b", "aimsim-0f28a07")["no_cz_abk"]["cycles"])
