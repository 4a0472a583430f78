"""The measured numbers in the README and ``docs/``, put there from stored records.

A number a command produces is written in the text between two markers,

    <!-- n NAME -->12.8x<!-- /n -->

and the text's module under ``docs/sources/`` says how ``NAME`` is made from a record: a
JSON file a command wrote. The markers do not show when the Markdown is rendered. Three kinds
of record:

- quick ones, under ``docs/records/``, that this script makes by running their commands
  (seconds to a minute each); ``tests/test_docs_measured.py`` makes them again in CI and
  requires them equal to the stored ones, so the code cannot drift from them silently;
- timed ones, under ``docs/records/timed/``: runs whose figures are wall times on this
  machine (the demo on its RTL channels, from a cached and from an empty build folder),
  made with ``--timed`` on a quiet machine. Their figures that do not depend on the machine
  are checked against today's code by ``tests/test_docs_measured.py``;
- stored ones: the full-scale ``patton repro`` results under ``docs/img/`` (half an hour),
  made by the command their page names, and reference data the tests compare with.

A whole block (a table, a command's output) is written the same way, between
``<!-- block NAME -->`` and ``<!-- /block -->`` on lines of their own.

    python docs/measured.py            # fill every marked number in from the records
    python docs/measured.py --text docs/hw.md   # ... in one text only
    python docs/measured.py --check    # list the numbers the text and the records disagree on
    python docs/measured.py --records [NAME ...]  # make quick records anew, then fill in
    python docs/measured.py --timed [NAME ...]    # make timed ones anew (a quiet machine)

``--check`` exits 1 and names ``file:line`` of each number that differs;
``tests/test_docs_measured.py`` runs it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # docs/sources, as ``sources``

from patton.eval.repro import without_wall_times  # noqa: E402 (the wall-time fields)
from sources.common import (  # noqa: E402
    RECORDS_DIR,
    ROOT,
    TIMED_DIR,
    NumbersError,
    record,
    registry,
)

__all__ = ["BLOCKS", "NUMBERS", "RECORDS", "STORED", "TIMED", "NumbersError", "fill",
           "make_records", "make_timed", "record"]

#: The texts whose numbers are filled in.
TEXTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Every text's numbers, blocks and records (``docs/sources/``).
NUMBERS, BLOCKS, RECORDS, TIMED, STORED = registry()

_MARK = re.compile(r"<!-- n ([\w.-]+) -->(.*?)<!-- /n -->")
_BLOCK = re.compile(r"<!-- block ([\w.-]+) -->\n(.*?)\n<!-- /block -->", re.S)


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

    def block(match: re.Match) -> str:
        name, said = match.group(1), match.group(2)
        line = text.count("\n", 0, match.start()) + 1
        if name not in BLOCKS:
            raise NumbersError(f"{where}:{line}: no block named {name!r} (docs/measured.py)")
        value = BLOCKS[name]()
        if value != said:
            changed.append(f"{where}:{line}: block {name} differs from its record")
        return f"<!-- block {name} -->\n{value}\n<!-- /block -->"

    return _MARK.sub(made, _BLOCK.sub(block, text)), changed


def make_records(names: list[str] | None = None, folder: Path = RECORDS_DIR) -> None:
    """Run the commands of :data:`RECORDS` (``names``, or all) and store their output."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names or list(RECORDS):
        argv = RECORDS[name].argv
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


#: A variable in a timed record's command: a path that differs between machines (the public
#: simulator's build, real vLLM's Python), given in the environment when the record is made
#: and kept as ``$NAME`` in the record.
_VARIABLE = re.compile(r"\$([A-Z_][A-Z0-9_]*)")


def make_timed(names: list[str] | None = None, folder: Path = TIMED_DIR) -> None:
    """Run the commands of :data:`TIMED` (``names``, or all) and store what they write, wall
    times included (run them on a quiet machine)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names or list(TIMED):
        timed = TIMED[name]
        unset = sorted({v for arg in timed.argv for v in _VARIABLE.findall(arg)
                        if v not in os.environ})
        if unset:
            needs = ", ".join(f"${v}" for v in unset)
            if names:
                raise NumbersError(f"timed record {name}: needs {needs} (a path on this "
                                   "machine; docs/sources/ says what it is)")
            print(f"timed record {name}: kept as it is (needs {needs})", file=sys.stderr)
            continue
        argv = [os.path.expandvars(arg) for arg in timed.argv]
        with tempfile.TemporaryDirectory(prefix="patton-build-") as fresh:
            env = dict(os.environ, **({"PATTON_BUILD": fresh} if timed.fresh_build else {}))
            command = ("PATTON_BUILD=EMPTY_FOLDER " if timed.fresh_build else "") + \
                "python " + " ".join(timed.argv)
            print(f"timed record {name}: {command}", file=sys.stderr, flush=True)
            started = time.perf_counter()
            done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env,
                                  capture_output=True, text=True, check=False)
            seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise NumbersError(f"timed record {name}: the command failed:\n"
                               f"{done.stderr[-2000:]}")
        output = json.loads(done.stdout if timed.output is None
                            else (ROOT / timed.output).read_text())
        stored = {"command": command, "machine": f"{os.cpu_count()} CPUs",
                  "wall_seconds": round(seconds, 3), "output": output}
        (folder / f"{name}.json").write_text(json.dumps(stored, indent=1, sort_keys=True)
                                             + "\n")
    record.cache_clear()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only list the disagreements")
    mode.add_argument("--records", nargs="*", metavar="NAME",
                      help="make the quick records (NAME ..., or all) anew, then fill in")
    mode.add_argument("--timed", nargs="*", metavar="NAME",
                      help="make the timed records (NAME ..., or all) anew on a quiet "
                           "machine, then fill in")
    ap.add_argument("--text", action="append", type=Path, metavar="FILE",
                    help="only this text (README.md, docs/PAGE.md; repeatable)")
    args = ap.parse_args()
    try:
        for names, known in ((args.records, RECORDS), (args.timed, TIMED)):
            unknown = sorted(set(names or ()) - set(known))
            if unknown:
                raise NumbersError(f"no such record: {', '.join(unknown)}")
        if args.records is not None:
            make_records(args.records or None)
        if args.timed is not None:
            make_timed(args.timed or None)
        texts = TEXTS
        if args.text:
            texts = [(ROOT / t).resolve() if not t.is_absolute() else t for t in args.text]
            unknown = [str(t) for t in texts if t not in TEXTS]
            if unknown:
                raise NumbersError(f"not a text with numbers: {', '.join(unknown)}")
        differs: list[str] = []
        for path in texts:
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
