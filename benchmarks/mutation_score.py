"""Mutation score of a core module against its own test file.

mutmut (2.5.1: ``pip install -e .[mutation]``) makes the mutants: every edit of its mutation
operators, one at a time. Each mutant is run by ``tests/mutate.py`` (the module compiled with
the edit in place of the real one, the working tree untouched), so that mutants run side by
side, ``--jobs`` at a time. A mutant is killed when the test file fails on it, or cannot
even load it; it survives when every test passes.

    python benchmarks/mutation_score.py sim/energy.py tests/test_energy.py [MORE_TESTS ...]
        [--jobs 2] [--survivors] [--rerun LOG] [--json]

Prints the counts and the score, and with ``--survivors`` each surviving edit (line, old,
new); with ``--json``, one JSON object instead (module, tests, mutants, killed, survived, not
applied, score, seconds, and every surviving edit). ``--rerun LOG`` runs only the mutants a
previous ``--survivors`` output (LOG) lists as surviving, matched by their edit, not their
line: the quick check after adding tests. Lines marked ``# pragma: no mutate`` are not
mutated (mutmut's convention): the modules mark equivalent mutants that way, each with its
reason. ``docs/testing.md`` has the figures.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

try:
    from mutmut import Context, list_mutations, mutate
except ImportError:
    sys.exit("mutation_score.py needs mutmut 2.5.1: pip install -e .[mutation]")

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("mutate", ROOT / "tests" / "mutate.py")
assert _spec is not None and _spec.loader is not None
mutate_plugin = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mutate_plugin)
#: The packages' folders under the import name ``patton`` (pyproject.toml's package-dir).
PACKAGES = {"sim": "patton.sim", "serving": "patton.serving", "runtime": "patton.runtime",
            "eval": "patton.eval", "hw": "patton.hw", "tb": "patton.tb"}
#: The tests a mutant runs: the fast ones (no Verilator, no SymbiYosys, not the slow ones).
MARKS = "not verilator and not slow and not formal"


def module_name(path: str) -> str:
    """``sim/energy.py`` -> ``patton.sim.energy``."""
    parts = Path(path).with_suffix("").parts
    return ".".join([PACKAGES[parts[0]], *parts[1:]])


def mutants(path: Path) -> list[tuple[int, str, str]]:
    """Every mutant of ``path``: (line, old text, new text), the texts a few lines long so that
    the old one occurs once in the file."""
    source = path.read_text()
    out = []
    for mutation in list_mutations(Context(source=source, filename=str(path))):
        new_source, count = mutate(Context(source=source, filename=str(path),
                                           mutation_id=mutation))
        if count != 1 or new_source == source:
            continue
        old_lines, new_lines = source.splitlines(True), new_source.splitlines(True)
        opcodes = difflib.SequenceMatcher(None, old_lines, new_lines).get_opcodes()
        change = [op for op in opcodes if op[0] != "equal"]
        i1, i2, j1, j2 = change[0][1], change[-1][2], change[0][3], change[-1][4]
        for pad in range(0, 8):
            lo = max(i1 - pad, 0)
            old = "".join(old_lines[lo:i2 + pad])
            new = "".join(old_lines[lo:i1]) + "".join(new_lines[j1:j2]) + "".join(
                old_lines[i2:i2 + pad])
            if source.count(old) == 1:
                out.append((i1 + 1, old, new))
                break
    return out


def edit(old: str, new: str) -> str:
    """The edit as ``--survivors`` prints it: ``-old line | +new line``, the lines that
    differ."""
    diff = [d for d in difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="",
                                            n=0)
            if d[:1] in "+-" and d[:3] not in ("+++", "---")]
    return " | ".join(diff)


def survivors(log: Path) -> set[str]:
    """The edits a ``--survivors`` output lists (``  line N: EDIT``)."""
    out = set()
    for text in log.read_text().splitlines():
        head, sep, rest = text.partition(": ")
        if sep and head.strip().startswith("line ") and head.strip()[5:].isdigit():
            out.add(rest)
    return out


def run(module: str, tests: list[str], old: str, new: str) -> str:
    """``killed``, ``survived`` or ``error`` (the edit did not apply)."""
    done = mutate_plugin.run(module, old, new, tests, MARKS)
    if done.returncode == 0:
        return "survived"
    if "not once" in done.stdout + done.stderr:
        return "error"
    return "killed"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module", help="the module's file, e.g. sim/energy.py")
    ap.add_argument("tests", nargs="+", help="its test file(s), e.g. tests/test_energy.py")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--survivors", action="store_true", help="print each surviving edit")
    ap.add_argument("--rerun", type=Path, metavar="LOG",
                    help="run only the mutants LOG (a --survivors output) lists as surviving")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    module = module_name(args.module)
    found = mutants(ROOT / args.module)
    if args.rerun is not None:
        if not args.rerun.is_file():
            sys.exit(f"mutation_score.py: {args.rerun}: no such file")
        wanted = survivors(args.rerun)
        found = [m for m in found if edit(m[1], m[2]) in wanted]
    started = time.perf_counter()
    print(f"{args.module}: {len(found)} mutants, {' '.join(args.tests)}", file=sys.stderr,
          flush=True)
    with ThreadPoolExecutor(args.jobs) as pool:
        results = []
        for n, result in enumerate(pool.map(lambda m: run(module, args.tests, m[1], m[2]),
                                            found), 1):
            results.append(result)
            if n % 20 == 0:
                print(f"  {n}/{len(found)}: {results.count('killed')} killed, "
                      f"{results.count('survived')} survived", file=sys.stderr, flush=True)
    killed, survived = results.count("killed"), results.count("survived")
    errors = results.count("error")
    seconds = time.perf_counter() - started
    kept = [(line, edit(old, new)) for (line, old, new), result in zip(found, results)
            if result == "survived"]
    if args.json:
        print(json.dumps({"module": args.module, "tests": args.tests, "mutants": len(found),
                          "killed": killed, "survived": survived, "not_applied": errors,
                          "score": killed / max(killed + survived, 1), "seconds": seconds,
                          "survivors": [{"line": line, "edit": e} for line, e in kept]}))
        return 0
    print(f"{args.module}: {len(found)} mutants, {killed} killed, {survived} survived"
          + (f", {errors} not applied" if errors else "")
          + f": score {100 * killed / max(killed + survived, 1):.1f} % ({seconds:.0f} s)")
    if args.survivors:
        for line, e in kept:
            print(f"  line {line}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
