"""CENT's traces on the cycle model against the public AiM simulator: exactness and wall time.

Usage:
    python benchmarks/cent_traces.py FOLDER [--aimsim COMMIT=DIR ...] [--repeat N] [--json]

``FOLDER`` holds traces written by CENT's generator (``<name>.trace``) and, for each timing
profile, the public simulator's statistics for them (``<name>.aimsim-<commit>.yaml``, as
``tests/data/aim/cent/`` does). For every trace and every profile with such a file, the script
runs ``patton aim run <trace> --timing aimsim-<commit> --reference <yaml> --json`` as a whole
process and reports whether cycles, every channel's command counts and bank-state cycles are
equal (the reference's differences), how many lines were wide (``warnings``), and the wall
time (best of ``--repeat``).

With ``--aimsim 0f28a07=DIR`` (a build of the public simulator at that commit: ``DIR`` holds
``test/example.yaml`` and ``build/ramulator2``), the same run also times that simulator on the
same file as a whole process, reads its printed statistics and requires them equal to the
stored ones, and reports the ratio of the two wall times.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from patton.sim import reference

PROFILES = ("0f28a07", "2eb1ee0")


def _timed(command: list[str], cwd: Path | None, repeat: int) -> tuple[float, str]:
    """Best wall time of ``repeat`` runs of ``command`` and its last stdout."""
    best, out = float("inf"), ""
    for _ in range(repeat):
        start = time.perf_counter()
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
        seconds = time.perf_counter() - start
        if done.returncode not in (0, 1):  # 1: differences from the reference (reported)
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}): "
                             f"{done.stderr.strip()[-400:]}")
        best, out = min(best, seconds), done.stdout
    return best, out


def _ours(trace: Path, commit: str, stats: Path, repeat: int) -> dict:
    seconds, out = _timed([sys.executable, "-m", "patton.cli", "aim", "run", str(trace),
                           "--timing", f"aimsim-{commit}", "--reference", str(stats),
                           "--json"], None, repeat)
    report = json.loads(out)
    return {"cycles": report["cycles"], "commands": report["commands"],
            "differences": len(report["reference"]["differences"]),
            "wide_lines": len(report["warnings"]), "seconds": seconds}


def _public(trace: Path, build: Path, stats: Path, repeat: int) -> dict:
    seconds, out = _timed([str(build / "build" / "ramulator2"), "-f", "test/example.yaml",
                           "-t", str(trace.resolve())], build, repeat)
    got = reference.statistics(out, f"{build}: output for {trace.name}")
    stored = reference.statistics(stats.read_text(encoding="utf-8"), str(stats))
    return {"seconds": seconds, "same_as_stored": got == stored}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--aimsim", action="append", default=[], metavar="COMMIT=DIR",
                        help="a build of the public simulator at COMMIT (repeatable)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    builds: dict[str, Path] = {}
    for item in args.aimsim:
        commit, _, where = item.partition("=")
        if commit not in PROFILES or not (Path(where) / "build" / "ramulator2").is_file():
            parser.error(f"--aimsim {item}: COMMIT is one of {PROFILES} and DIR holds "
                         "build/ramulator2")
        builds[commit] = Path(where)
    traces = sorted(args.folder.glob("*.trace"))
    if not traces:
        parser.error(f"{args.folder}: no *.trace files")
    rows = []
    for trace in traces:
        instructions = sum(1 for line in trace.read_text().splitlines()
                           if line.strip() and not line.lstrip().startswith("#"))
        for commit in PROFILES:
            stats = trace.with_suffix(f".aimsim-{commit}.yaml")
            if not stats.is_file():
                continue
            row = {"trace": trace.stem, "instructions": instructions, "profile": commit,
                   **_ours(trace, commit, stats, args.repeat)}
            if commit in builds:
                public = _public(trace, builds[commit], stats, args.repeat)
                row.update(public_seconds=public["seconds"],
                           public_same_as_stored=public["same_as_stored"],
                           ratio=public["seconds"] / row["seconds"])
            rows.append(row)
            print(f"{trace.stem:<40} {commit} done", file=sys.stderr, flush=True)
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    timed = bool(builds)
    print("| trace | instructions | profile | cycles | DRAM commands | wide lines | "
          "exact | ours s" + (" | public s | public / ours" if timed else "") + " |")
    print("|---|---:|---|---:|---:|---:|---|---:" + ("|---:|---:" if timed else "") + "|")
    for r in rows:
        exact = "yes" if r["differences"] == 0 else f"{r['differences']} differences"
        line = (f"| {r['trace']} | {r['instructions']:,} | {r['profile']} | {r['cycles']:,} | "
                f"{r['commands']:,} | {r['wide_lines']} | {exact} | {r['seconds']:.2f}")
        if timed:
            line += (f" | {r['public_seconds']:.2f} | {r['ratio']:.2f}" if "ratio" in r
                     else " | | ")
            if "ratio" in r and not r["public_same_as_stored"]:
                line += " (public output differs from the stored file)"
        print(line + " |")
    exact = sum(r["differences"] == 0 for r in rows)
    print(f"\n{exact} of {len(rows)} runs exact")
    return 0 if exact == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
