"""RTL co-simulation speed against an earlier commit, both measured in one run on this machine.

Usage: python benchmarks/rtl_speedup.py [--base REV] [--instructions N] [--rounds R] [--json]

Extracts commit REV (default ``feaf5dd``, the testbench before the simulator's speed work of
``docs/tb.md``) into ``build/baseline-REV/`` (``git archive``; its Verilator builds go under
that folder's own ``build/``), makes its packages importable there (``pkg/patton/...`` links
named by its ``pyproject.toml``), and runs ``benchmarks/rtl_throughput.py --json`` of both trees
in alternation, ``R`` rounds: the same MAC_ABK schedule of N instructions, each tree on its own
simulator. It prints each tree's best round (cycles per simulator CPU second, the benchmark's
figure that a loaded machine distorts least) and their ratio. Taking each tree's best of
alternating rounds keeps a busy moment from favouring either. The first round of each tree
builds its simulator (minutes); later runs reuse the builds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARK = Path("benchmarks") / "rtl_throughput.py"


def extract(rev: str) -> Path:
    """Return ``build/baseline-REV/`` holding commit ``rev``'s files and ``pkg/``, where its
    packages import from (made once)."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", rev], check=True,
                         stdout=subprocess.PIPE, text=True).stdout.strip()
    tree = ROOT / "build" / f"baseline-{sha}"
    if not (tree / "pkg").is_dir():
        tree.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", sha],
                                 check=True, stdout=subprocess.PIPE).stdout
        tar = tree / "tree.tar"
        tar.write_bytes(archive)
        with tarfile.open(tar) as files:
            files.extractall(tree, filter="data")
        tar.unlink()
        folders = tomllib.loads((tree / "pyproject.toml").read_text())["tool"]["setuptools"][
            "package-dir"]
        pkg = tree / "pkg.tmp"
        for package, folder in folders.items():
            link = pkg.joinpath(*package.split("."))
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(tree / folder, target_is_directory=True)
        pkg.rename(tree / "pkg")
    return tree


def run(tree: Path, instructions: int, pythonpath: Path | None) -> dict:
    """One throughput run of ``tree``'s benchmark; its JSON figures."""
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([sys.executable, str(tree / BENCHMARK), "--instructions",
                           str(instructions), "--json"], cwd=tree, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    if done.returncode != 0:
        raise SystemExit(f"error: {tree / BENCHMARK} failed (exit {done.returncode})")
    return json.loads(done.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default="feaf5dd", help="the earlier commit (default feaf5dd)")
    ap.add_argument("--instructions", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = ap.parse_args()
    if args.rounds < 1 or args.instructions < 1:
        raise SystemExit("error: --rounds and --instructions must be at least 1")
    base = extract(args.base)
    trees = {"base": (base, base / "pkg"), "today": (ROOT, None)}
    best: dict[str, dict] = {}
    for r in range(args.rounds):
        for name, (tree, path) in trees.items():
            figures = run(tree, args.instructions, path)
            print(f"round {r + 1}/{args.rounds} {name}: "
                  f"{figures['cycles_per_cpu_second']:,.0f} cycles per CPU second",
                  file=sys.stderr, flush=True)
            if name not in best or figures["cpu_seconds"] < best[name]["cpu_seconds"]:
                best[name] = figures
    ratio = best["today"]["cycles_per_cpu_second"] / best["base"]["cycles_per_cpu_second"]
    if best["today"]["cycles"] != best["base"]["cycles"]:
        raise SystemExit("error: the two trees simulated different cycle counts "
                         f"({best['base']['cycles']} and {best['today']['cycles']})")
    if args.json:
        print(json.dumps({"base": args.base, "instructions": args.instructions,
                          "rounds": args.rounds, "base_run": best["base"],
                          "today_run": best["today"], "ratio": ratio}))
        return
    for name in trees:
        f = best[name]
        print(f"{name:>5}: {f['cycles']:,} cycles, best simulator CPU {f['cpu_seconds']:.2f} s"
              f" = {f['cycles_per_cpu_second']:,.0f} cycles per CPU second")
    print(f"today / {args.base}: {ratio:.2f}x")


if __name__ == "__main__":
    main()
