"""``docs/baselines.md``'s measured numbers: the decode step side by side
(``benchmarks/baseline_decode_step.py``, timed: minutes, and its "gen ms" are wall times), the
same step with the baselines' aligned timelines switched, the checks' count (a quick record)
and time (timed), and BlockPIM's hit rate in the paper's evaluation (``docs/img``)."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

from patton.runtime.baselines.geometry import UNIT

from sources.common import ROOT, Quick, Timed, minutes, record, slash, span, wall, x

_STEP = "benchmarks/baseline_decode_step.py"
_TESTS = "tests/test_baselines.py"

#: Collects the checks and prints how many there are, JSON.
_COLLECT = f"""
import json, subprocess, sys
out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                      "-p", "no:cacheprovider", "{_TESTS}"],
                     capture_output=True, text=True, check=True).stdout
print(json.dumps({{"tests": sum("::" in line for line in out.splitlines())}}))
"""

#: Runs the checks as the page says (one process) and prints how many passed and the seconds
#: pytest took, JSON (pytest's own output goes to standard error).
_RUN = f"""
import json, re, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
                       "{_TESTS}"], capture_output=True, text=True, check=True)
seconds = time.perf_counter() - started
sys.stderr.write(done.stdout)
passed = int(re.search(r"(\\d+) passed", done.stdout.splitlines()[-1]).group(1))
print(json.dumps({{"passed": passed, "seconds": seconds}}))
"""

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {
    "baselines-tests": Quick(["-c", _COLLECT]),
}

#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {
    "baselines-decode-step": Timed([_STEP, "--json"]),
    "baselines-decode-step-pimphony-unaligned": Timed([_STEP, "--runtime", "pimphony",
                                                       "--aligned", "off", "--json"]),
    "baselines-decode-step-blockpim-aligned": Timed([_STEP, "--runtime", "blockpim",
                                                     "--aligned", "on", "--json"]),
    "baselines-tests-run": Timed(["-c", _RUN]),
}


def _row(runtime: str, frontend: str, name: str = "baselines-decode-step") -> dict:
    """The decode step's row of ``runtime`` under ``frontend`` (``shared``, ``per_channel``)."""
    return next(r for r in record(name)["rows"]
                if r["runtime"] == runtime and r["frontend"] == frontend)


def _v_write(row: dict) -> int:
    """A row's Value-write cycles, the Commit Zone's commits included (the table's column)."""
    return row["V write"] + row["commit"]


def _table() -> str:
    """The decode step's table: cycles per part and front end, and the programs' generation
    time (wall, milliseconds)."""
    lines = ["| runtime | front end | K write | V write | QK^T | SV | total | gen ms |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in record("baselines-decode-step")["rows"]:
        cells = [r["K write"], _v_write(r), r["QK^T"], r["SV"], r["total"]]
        lines.append(f"| {r['runtime']} | {r['frontend']} | "
                     + " | ".join(f"{c:,}" for c in cells) + f" | {r['generate_ms']:.0f} |")
    return "\n".join(lines)


def _qk(frontend: str, name: str = "baselines-decode-step") -> Callable[[], str]:
    """PIMphony's QK^T cycles under ``frontend`` (its aligned timelines, or the record's)."""
    return lambda: f"{_row('pimphony', frontend, name)['QK^T']:,}"


def _blockpim_aligned() -> str:
    """How BlockPIM's decode step compares with its timelines aligned."""
    same = all(_row("blockpim", f) == {**_row("blockpim", f,
                                               "baselines-decode-step-blockpim-aligned"),
                                       "generate_ms": _row("blockpim", f)["generate_ms"]}
               for f in ("shared", "per_channel"))
    if same:
        return "costs the same either way"
    totals = [_row("blockpim", "shared", n)["total"]
              for n in ("baselines-decode-step-blockpim-aligned", "baselines-decode-step")]
    return "costs {:,} cycles aligned against {:,}, shared front end".format(*totals)


def _kilo(value: float) -> str:
    """Cycles in thousands: ``30 k``."""
    return f"{value / 1000:.0f} k"


def _sv(*runtimes: str) -> Callable[[], str]:
    """The SV cycles of ``runtimes`` under the per-channel front end, in thousands."""
    return lambda: span([_row(r, "per_channel")["SV"] for r in runtimes], _kilo)


def _llama(runtime: str) -> dict:
    """``runtime``'s Llama-3-8B run in the paper's evaluation (Fig. 7's, ``patton repro``)."""
    return record("repro-12000")["fig7"]["per_model"]["llama3-8b"]["absolute"][runtime]


def _hit(runtime: str) -> Callable[[], str]:
    """``runtime``'s hit rate on Llama-3-8B in the paper's evaluation."""
    return lambda: f"{_llama(runtime)['hit_rate']:.2f}"


def _lifecycles() -> str:
    """The random lifecycles per baseline of the property test (its ``max_examples``)."""
    tree = ast.parse((ROOT / _TESTS).read_text())
    test = next(f for f in tree.body if isinstance(f, ast.FunctionDef)
                and f.name == "test_allocator_properties")
    call = next(d for d in test.decorator_list if isinstance(d, ast.Call)
                and getattr(d.func, "id", None) == "settings")
    return str(next(k.value.value for k in call.keywords if k.arg == "max_examples"))


def _attacc_per_channel() -> str:
    """How many AttAcc reservations (a request's head each) one Llama-3-8B channel holds."""
    from patton.runtime.models import MODELS
    from patton.serving.adapter import attach

    rt = attach("attacc", MODELS["llama3-8b"]).runtime
    return str(rt.config.slots // rt.policy.span)


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "baselines.tests.count": lambda: str(record("baselines-tests")["tests"]),
    "baselines.tests.seconds": lambda: minutes(record("baselines-tests-run")["seconds"]),
    "baselines.tests.lifecycles": _lifecycles,
    "baselines.step.seconds": lambda: minutes(wall("baselines-decode-step")),
    "baselines.step.tokens": lambda: f"{record('baselines-decode-step')['tokens'] + 1:,}",
    "baselines.step.units": lambda: str(
        math.ceil((record("baselines-decode-step")["tokens"] + 1) / UNIT)),
    "baselines.pimphony.qk.unaligned.shared": _qk(
        "shared", "baselines-decode-step-pimphony-unaligned"),
    "baselines.pimphony.qk.shared": _qk("shared"),
    "baselines.pimphony.qk.unaligned.per_channel": _qk(
        "per_channel", "baselines-decode-step-pimphony-unaligned"),
    "baselines.pimphony.qk.per_channel": _qk("per_channel"),
    "baselines.blockpim.aligned": _blockpim_aligned,
    "baselines.hit.blockpim": _hit("blockpim"),
    "baselines.hit.patton": _hit("patton"),
    "baselines.hit.steps": lambda: f"{_llama('blockpim')['steps']:,}",
    "baselines.sv.contiguous": _sv("neupims", "attacc", "patton-no-o2v"),
    "baselines.sv.patton": _sv("patton"),
    "baselines.sv.blockpim": _sv("blockpim"),
    "baselines.attacc.per_channel": _attacc_per_channel,
    "baselines.pimphony.writes": lambda: slash(
        [_v_write(_row("pimphony", f)) / _v_write(_row("attacc", f))
         for f in ("shared", "per_channel")]),
    "baselines.cz.per_channel": lambda: x(_v_write(_row("patton-wo-cz", "per_channel"))
                                          / _v_write(_row("patton", "per_channel")), 1),
    "baselines.cz.shared": lambda: x(_v_write(_row("patton", "shared"))
                                     / _v_write(_row("patton-wo-cz", "shared")), 1),
}

#: Block name -> how it is made from the records.
BLOCKS: dict[str, Callable[[], str]] = {"baselines.step.table": _table}
