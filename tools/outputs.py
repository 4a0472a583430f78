"""Record the outputs a refactor must not change, and compare two such records.

``python tools/outputs.py record DIR [--only NAME,...] [--rtl]``
    Run every command of :data:`RUNS` (``patton`` as a user runs it, from the shell) and keep
    each one's JSON on stdout as ``DIR/NAME.json`` (and its exit status). ``--rtl`` adds the
    RTL demo (a Verilator build the first time).
``python tools/outputs.py compare OLD NEW``
    Compare two records field by field, wall times left out (:data:`WALL`); print every
    difference and exit 1 on any.

A refactor proves itself by outputs that do not change: record before the first move, record
after the last, compare. The runs cover every serving loop (``patton serve`` on the six
golden vLLM configurations under four runtimes, the chat demo on the models and the RTL, the
random runtime scenario) and every figure of ``patton repro all --quick``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests/data/serving/golden"

#: Keys whose values are wall-clock measurements (compared for presence, not value).
WALL = {"wall_seconds", "steps_per_second", "rtl_cycles_per_second", "rtl_seconds",
        "rtl_device_cycles_per_second", "rtl_wait_seconds", "elapsed", "wall",
        "task_seconds", "started", "finished", "time_s", "host_seconds", "build_seconds",
        "simulated_seconds", "reference_seconds", "seconds_by_phase", "code",
        "channel_cycles_per_second"}
#: Paths of wall-clock values whose key names also name device figures elsewhere.
WALL_AT = re.compile(r"\.output\.seconds$|\.(cz|no_cz_abk|no_cz_mem)\.seconds$")

#: Runtimes ``patton serve`` is recorded under on every golden configuration.
SERVE_RUNTIMES = ("gpu", "patton", "patton-wo-cz", "patton-no-o2v")


def _serve_runs() -> dict[str, list[str]]:
    runs = {}
    for path in sorted(GOLDEN.glob("*.json.gz")):
        with gzip.open(path, "rt") as f:
            p = json.load(f)["params"]
        name = path.name.removesuffix(".json.gz")
        for runtime in SERVE_RUNTIMES:
            runs[f"serve-{name}-{runtime}"] = [
                "serve", "--conversations", str(ROOT / p["conversations"]),
                "--runtime", runtime, "--clients", str(p["clients"]), "--pool", str(p["pool"]),
                "--num-blocks", str(p["num_blocks"]), "--block-size", str(p["block_size"]),
                "--max-num-seqs", str(p["max_num_seqs"]),
                "--max-batched-tokens", str(p["max_num_batched_tokens"]),
                "--max-model-len", str(p["max_model_len"]), "--steps", str(p["max_steps"]),
                "--json", "--no-progress"]
    return runs


def runs(out: Path, rtl: bool) -> dict[str, list[str]]:
    """Every recorded command, by name (arguments after ``patton``)."""
    r = {
        "repro-all-quick": ["repro", "all", "--quick", "--json", "--no-progress",
                            "--out", str(out / "repro-all-quick")],
        "demo-model": ["demo", "--device", "model", "--json", "--out", str(out / "demo-model")],
        "demo-model-fault": ["demo", "--device", "model", "--json", "--fault", "commit-row",
                             "--steps", "20", "--out", str(out / "demo-model-fault")],
        **{f"scenario-{m}-s{s}": ["runtime", "scenario", "--model", m, "--requests", "6",
                                  "--steps", "48", "--seed", str(s), "--mem-baseline",
                                  "--json", "--no-progress"]
           for m in ("llama3-8b", "opt-6.7b") for s in (0, 1)},
        **_serve_runs(),
    }
    if rtl:
        r["demo-rtl"] = ["demo", "--json", "--out", str(out / "demo-rtl")]
    return r


def record(out: Path, only: set[str] | None, rtl: bool) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for name, argv in runs(out, rtl).items():
        if only is not None and name not in only:
            continue
        t = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "patton.cli", *argv], capture_output=True,
                           text=True, cwd=ROOT)
        seconds = time.perf_counter() - t
        try:
            body: Any = json.loads(p.stdout)
        except json.JSONDecodeError:
            body = {"stdout": p.stdout}
        record = {"argv": argv, "status": p.returncode, "output": body}
        stored = out / name / "tasks"
        if stored.is_dir():  # patton repro's per-task results, keyed by their task
            record["tasks"] = {}
            for f in sorted(stored.glob("*.json")):
                data = json.loads(f.read_text())
                results = data["run"] if isinstance(data["run"], list) else [data["run"]]
                for r in results:
                    record["tasks"][json.dumps(r["task"], sort_keys=True)] = r["result"]
        if p.returncode not in (0, 1):  # an error: what it said is the output
            record["stderr"] = p.stderr
        (out / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True))
        print(f"{name:40} exit {p.returncode} in {seconds:6.1f} s", flush=True)
    return 0


def differences(old: Any, new: Any, at: str = "") -> list[str]:
    """Every difference between two JSON values, wall-time keys compared for presence only."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for k in sorted(set(old) | set(new)):
            where = f"{at}.{k}"
            if k not in old or k not in new:
                out.append(f"{where}: only in {'new' if k not in old else 'old'}")
            elif k not in WALL and not WALL_AT.search(where):
                out.extend(differences(old[k], new[k], where))
        return out
    if isinstance(old, list) and isinstance(new, list):
        if len(old) != len(new):
            return [f"{at}: length {len(old)} -> {len(new)}"]
        out = []
        for i, (a, b) in enumerate(zip(old, new)):
            out.extend(differences(a, b, f"{at}[{i}]"))
        return out
    return [] if old == new else [f"{at}: {old!r} -> {new!r}"]


def _path_free(value: Any, roots: tuple[str, ...]) -> Any:
    """``value`` with the record folders' paths replaced by ``<out>`` (they differ by design)."""
    if isinstance(value, dict):
        return {k: _path_free(v, roots) for k, v in value.items()}
    if isinstance(value, list):
        return [_path_free(v, roots) for v in value]
    if isinstance(value, str):
        for r in roots:
            value = value.replace(r, "<out>")
    return value


def compare(old: Path, new: Path) -> int:
    names = sorted({p.name for p in old.glob("*.json")} | {p.name for p in new.glob("*.json")})
    roots = tuple(sorted({str(old.resolve()), str(new.resolve()), str(old), str(new)},
                         key=len, reverse=True))
    found = 0
    for name in names:
        a, b = old / name, new / name
        if not a.exists() or not b.exists():
            print(f"{name}: only in {'new' if not a.exists() else 'old'}")
            found += 1
            continue
        d = differences(_path_free(json.loads(a.read_text()), roots),
                        _path_free(json.loads(b.read_text()), roots))
        for line in d[:40]:
            print(f"{name}{line}")
        if len(d) > 40:
            print(f"{name}: ... {len(d) - 40} more")
        found += len(d)
        if not d:
            print(f"{name}: identical")
    print(f"{len(names)} records, {found} difference(s)")
    return 1 if found else 0


def main(argv: list[str] | None = None) -> int:
    top = argparse.ArgumentParser(prog="outputs.py", description=__doc__.split("\n\n")[0])
    sub = top.add_subparsers(dest="verb", required=True)
    rec = sub.add_parser("record")
    rec.add_argument("out", type=Path)
    rec.add_argument("--only", default=None, help="comma-separated run names")
    rec.add_argument("--rtl", action="store_true", help="also the RTL demo")
    cmp = sub.add_parser("compare")
    cmp.add_argument("old", type=Path)
    cmp.add_argument("new", type=Path)
    args = top.parse_args(argv)
    if args.verb == "record":
        return record(args.out, set(args.only.split(",")) if args.only else None, args.rtl)
    return compare(args.old, args.new)


if __name__ == "__main__":
    sys.exit(main())
