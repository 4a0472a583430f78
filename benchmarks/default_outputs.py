"""Whether a change left the default outputs as they were: today's tree against an earlier commit.

Usage: python benchmarks/default_outputs.py [--base REV] [--repro] [--json]

For a change that must not move what the defaults produce (an opt-in device extension, a
refactor), this makes the default outputs twice, from commit REV (default ``HEAD``: the
working tree against the last commit) and from today's tree, each in its own process and
folder, with this machine's toolchain for both, and compares them byte for byte:

* ``verilog/<profile>/``: ``emit_verilog`` of a 64-row channel under every timing profile
  REV knows (``patton_channel.v``, ``patton_mat.v``, ``patton_channel.vlt``);
* ``demo-chat.json``: the ``chat.json`` that ``patton demo --device model`` writes (the figures
  ``--json`` prints, and each step's), its wall times left out;
* with ``--repro``, ``repro-quick.json``: ``patton repro all --quick --json`` (minutes), its
  wall times left out (``patton.eval.repro.without_wall_times``).

REV's files are extracted under ``build/baseline-REV/`` as ``benchmarks/rtl_speedup.py`` does
it. Prints one line per output (``same``, or ``differs`` with the first differing line) and
exits 1 when any differs; ``--json`` prints one object instead.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("rtl_speedup", _HERE / "rtl_speedup.py")
assert _spec is not None and _spec.loader is not None
rtl_speedup = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rtl_speedup)

#: Rows of the channel whose Verilog is compared (the size every RTL build here uses).
ROWS = 64
#: Record fields that are wall times (left out of the comparison).
WALL_TIMES = ("seconds", "wall_seconds")

#: What each tree runs, in its own process (argv[1]: the output folder, argv[2]: "repro" or "").
_MAKE = r"""
import json, subprocess, sys
from pathlib import Path
from patton.hw.generate import emit_verilog
from patton.sim.timing import PROFILES

out, repro = Path(sys.argv[1]), sys.argv[2] == "repro"
for profile in PROFILES:
    emit_verilog(out / "verilog" / profile, rows=%(rows)d, timing=profile)

def without(record):
    return {k: v for k, v in record.items() if k not in %(wall)r}

subprocess.run([sys.executable, "-m", "patton.cli", "demo", "--device", "model", "--out",
                str(out / "demo")], check=True, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL)
chat = json.loads((out / "demo" / "chat.json").read_text())
(out / "demo-chat.json").write_text(json.dumps(without(chat), indent=1, sort_keys=True))
if repro:
    from patton.eval.repro import without_wall_times
    run = subprocess.run([sys.executable, "-m", "patton.cli", "repro", "all", "--quick",
                          "--workers", "2", "--json", "--no-progress", "--out",
                          str(out / "repro")], check=True, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    (out / "repro-quick.json").write_text(json.dumps(without_wall_times(json.loads(run.stdout)),
                                                     indent=1, sort_keys=True))
"""


def make(tree: Path, out: Path, repro: bool, pythonpath: Path | None) -> None:
    """Make ``tree``'s default outputs in ``out``."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    code = _MAKE % {"rows": ROWS, "wall": WALL_TIMES}
    done = subprocess.run([sys.executable, "-c", code, str(out), "repro" if repro else ""],
                          cwd=tree, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: making the default outputs of {tree} failed "
                         f"(exit {done.returncode}):\n{done.stderr[-2000:]}")


def first_difference(a: Path, b: Path) -> str:
    """``line N: <base> | <today>`` of the first line that differs (or the shorter file's end)."""
    left, right = a.read_text(errors="replace").splitlines(), b.read_text(
        errors="replace").splitlines()
    for number, (x, y) in enumerate(zip(left, right), 1):
        if x != y:
            return f"line {number}: {x.strip()[:80]!r} | {y.strip()[:80]!r}"
    shorter = min(len(left), len(right))
    return f"line {shorter + 1}: one file ends ({len(left)} / {len(right)} lines)"


def compare(base: Path, today: Path) -> dict[str, str]:
    """``{output: "same" | "differs: ..." | "only in ..."}`` over both folders' files."""
    names = sorted({p.relative_to(base).as_posix() for p in base.rglob("*") if p.is_file()}
                   | {p.relative_to(today).as_posix() for p in today.rglob("*") if p.is_file()})
    names = [n for n in names if not n.startswith(("demo/", "repro/"))]  # made into the .json
    verdicts = {}
    for name in names:
        a, b = base / name, today / name
        if not a.is_file() or not b.is_file():
            verdicts[name] = "only in " + ("today's tree" if b.is_file() else "the base")
        elif a.read_bytes() == b.read_bytes():
            verdicts[name] = "same"
        else:
            verdicts[name] = "differs: " + first_difference(a, b)
    return verdicts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="HEAD", help="the commit to compare with (default HEAD)")
    ap.add_argument("--repro", action="store_true",
                    help="also compare patton repro all --quick (minutes)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    tree = rtl_speedup.extract(args.base)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        for name, where, path in (("base", tree, tree / "pkg"), ("today", rtl_speedup.ROOT, None)):
            print(f"making the default outputs of {name} ({where})", file=sys.stderr, flush=True)
            make(where, work / name, args.repro, path)
        verdicts = compare(work / "base", work / "today")
    same = all(v == "same" for v in verdicts.values())
    if args.json:
        print(json.dumps({"base": args.base, "same": same, "outputs": verdicts}))
    else:
        for name, verdict in verdicts.items():
            print(f"{name}: {verdict}")
        print(f"{'all the same' if same else 'DIFFERENT'} against {args.base}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
