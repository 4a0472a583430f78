"""The measured numbers in the README and ``docs/``, put there from stored records.

A number a command produces is written in the text between two markers,

    <!-- n NAME -->12.8x<!-- /n -->

and :data:`NUMBERS` says how ``NAME`` is made from a record: a JSON file a command wrote.
The markers do not show when the Markdown is rendered. Two kinds of record:

- quick ones, under ``docs/records/``, that this script makes by running :data:`RECORDS`'
  commands (seconds to a minute each); ``tests/test_docs_numbers.py`` makes them again in CI
  and requires them equal to the stored ones, so the code cannot drift from them silently;
- full-scale ones, the ``patton repro`` results under ``docs/img/`` (half an hour), made by
  the command their page names.

    python docs/measured.py            # fill every marked number in from the records
    python docs/measured.py --check    # list the numbers the text and the records disagree on
    python docs/measured.py --records  # run RECORDS' commands again, then fill in

``--check`` exits 1 and names ``file:line`` of each number that differs;
``tests/test_docs_numbers.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections.abc import Callable
from functools import cache
from pathlib import Path

from patton.eval.paper import BASELINES  # Fig. 7's prior layouts, in the paper's order
from patton.eval.repro import without_wall_times  # the wall-time fields, left out of records

ROOT = Path(__file__).resolve().parents[1]
#: The quick records.
RECORDS_DIR = ROOT / "docs" / "records"
#: The texts whose numbers are filled in.
TEXTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_MICRO_MACAB = "tests/data/aim/micro_macab_1024_16banks.trace"
_VALUE_WRITES = "benchmarks/runtime_value_writes.py"

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, list[str]] = {
    "aim-micro_macab": ["-m", "patton.cli", "aim", "run", _MICRO_MACAB, "--json"],
    "aim-micro_macab-cent": ["-m", "patton.cli", "aim", "run", _MICRO_MACAB, "--standby",
                             "cent", "--json"],
    "value-writes-llama3-8b": [_VALUE_WRITES, "--model", "llama3-8b", "--requests", "32",
                               "--steps", "32", "--json"],
    "value-writes-opt-6.7b": [_VALUE_WRITES, "--model", "opt-6.7b", "--requests", "8",
                              "--steps", "32", "--json"],
}

#: Full-scale record name -> its file.
FULL = {"repro-12000": ROOT / "docs" / "img" / "repro-12000.json"}

_MARK = re.compile(r"<!-- n ([\w.-]+) -->(.*?)<!-- /n -->")


class NumbersError(Exception):
    """A marker names no number, or a record is missing (the message names the place)."""


@cache
def record(name: str) -> dict:
    """The record ``name`` (a quick one's command output, or a full-scale result)."""
    path = FULL.get(name, RECORDS_DIR / f"{name}.json")
    if not path.is_file():
        raise NumbersError(f"{path.relative_to(ROOT)}: no such record (make it with "
                           + ("python docs/measured.py --records)" if name in RECORDS
                              else "the command its page names)"))
    data = json.loads(path.read_text())
    return data["output"] if name in RECORDS else data


def _x(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}x"


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _slash(values: list[float], unit: str = "x") -> str:
    return " / ".join(f"{v:.2f}" for v in values) + unit


def _fig7(key: str, models: tuple[str, ...] | None = None) -> Callable[[], str]:
    """Fig. 7's gains over NeuPIMs / PIMphony / AttAcc / BlockPIM, then the overall one."""
    def made() -> str:
        fig7 = record("repro-12000")["fig7"]
        if models is None:
            gains = fig7[key]
            return _slash([gains[b] for b in BASELINES]) + f" ({_x(gains['all'])})"
        per = [fig7["per_model"][m][key] for m in models]
        return _slash([sum(p[b] for p in per) / len(per) for b in BASELINES])
    return made


def _writes(model: str, timing: str, key: str, digits: int = 2) -> Callable[[], str]:
    """A no-CZ-over-CZ ratio of the Value-write benchmark (per-bank ``W MEM``)."""
    return lambda: _x(record(f"value-writes-{model}")["timing"][timing]["no_cz_mem_over_cz"]
                      [key], digits)


def _fig8(key: str) -> Callable[[], str]:
    """A Fig. 8 figure on the shared / per-channel front end."""
    def made() -> str:
        fig8 = record("repro-12000")["fig8"]
        fmt = _x if "speedup" in key else _pct
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
        return _pct(value) if "reduction" in metric else _x(value)
    return made


#: The sensitivity's rows (the axis each changes) and figures, as the README's table has them.
_AXES = ("none", "frontend", "timing", "wo_cz_write", "standby", "context", "gpu")
_METRICS = ("fig7_speedup_all", "fig7_energy_gain_all", "fig8_latency_reduction",
            "fig8_energy_reduction", "fig8_value_write_speedup")

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
    "micro.activations": lambda: _x(record("repro-12000")["micro"]["cz_activation_reduction"]),
    "micro.fragmentation": lambda: (
        f"{_x(record('repro-12000')['micro']['fragmentation_latency'])} / "
        f"{_x(record('repro-12000')['micro']['fragmentation_energy'])}"),
    # README, what each assumption does: patton repro sensitivity (2,000 steps)
    **{f"sens.{axis}.{metric}": _sensitivity(axis, metric)
       for axis in _AXES for metric in _METRICS},
    "sens.closest": lambda: ", ".join(
        (_pct if "reduction" in m else _x)(record("repro-12000")["sensitivity"]["closest"][m])
        for m in _METRICS),
}


def fill(text: str, where: str) -> tuple[str, list[str]]:
    """``text`` with every marked number made anew; and ``file:line: ...`` for each one that
    changed. A marker naming no number is a :class:`NumbersError` at its line."""
    changed: list[str] = []

    def made(match: re.Match) -> str:
        name, said = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if name not in NUMBERS:
            raise NumbersError(f"{where}:{line}: no number named {name!r} (docs/measured.py)")
        try:
            value = NUMBERS[name]()
        except NumbersError as error:
            raise NumbersError(f"{where}:{line}: {name}: {error}") from None
        except (KeyError, IndexError, TypeError) as error:  # the record's shape changed
            raise NumbersError(f"{where}:{line}: {name}: its record has no "
                               f"{type(error).__name__}: {error}") from None
        if value != said:
            changed.append(f"{where}:{line}: {name} is {value}, the text says {said}")
        return f"<!-- n {name} -->{value}<!-- /n -->"

    return _MARK.sub(made, text), changed


def make_records(names: list[str] | None = None, folder: Path = RECORDS_DIR) -> None:
    """Run the commands of :data:`RECORDS` (``names``, or all) and store their output."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names or list(RECORDS):
        argv = RECORDS[name]
        print(f"record {name}: python {' '.join(argv)}", file=sys.stderr, flush=True)
        done = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True,
                              text=True, check=False)
        if done.returncode != 0:
            raise NumbersError(f"record {name}: the command failed:\n{done.stderr[-2000:]}")
        stored = {"command": "python " + " ".join(argv),
                  "output": without_wall_times(json.loads(done.stdout))}
        (folder / f"{name}.json").write_text(json.dumps(stored, indent=1, sort_keys=True)
                                             + "\n")
    record.cache_clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only list the disagreements")
    mode.add_argument("--records", action="store_true", help="make the quick records anew")
    args = ap.parse_args()
    try:
        if args.records:
            make_records()
        differs: list[str] = []
        for path in TEXTS:
            text = path.read_text()
            new, changed = fill(text, str(path.relative_to(ROOT)))
            differs += changed
            if new != text and not args.check:
                path.write_text(new)
    except NumbersError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for line in differs:
        print(line)
    if args.check and differs:
        print(f"{len(differs)} number(s) differ from their records: python docs/measured.py",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
