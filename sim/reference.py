"""The public AiM simulator's results for a trace, read from a reference file and compared.

A reference file (``tests/data/aim/reference.json``) is a JSON object keyed by trace stem,
each entry with some of ``memory_system_cycles``, ``command_counts``, ``bank_state_cycles`` and
``schedule`` (the public simulator's statistics and command trace). :func:`read` takes a
trace's entry; :func:`differences` lists how a cycle-model run differs from it
(``patton aim run --reference``).

A reference may also be the public simulator's own output for one trace: the statistics YAML
``ramulator2 -f <config> -t <trace>`` prints (a ``.yaml`` or ``.yml`` file), read by
:func:`statistics` into the same entry.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from patton.sim.cycle_model import RunResult
from patton.sim.jsontext import MAX_DIGITS, json_value
from patton.sim.textfile import STDIN, ReadError, document, shown

__all__ = ["ReferenceFileError", "FIELDS", "key", "read", "statistics", "differences"]


class ReferenceFileError(ReadError):
    """A ``--reference`` file that cannot be read or is not a reference of the right shape."""


def key(trace_path: str | os.PathLike[str]) -> str:
    """Return the key of a trace in a reference file: its stem, without a ``.gz`` suffix
    (``x.trace.gz`` and ``x.trace`` are both ``x``)."""
    name = os.fspath(trace_path)
    return Path(name.removesuffix(".gz")).stem


def read(path: str, trace_path: str) -> dict | None:
    """Return the entry of ``trace_path``'s :func:`key` in the reference file (None if it has
    none).

    The file is the public simulator's results (``tests/data/aim/reference.json``): a JSON
    object keyed by trace stem, each entry with some of ``memory_system_cycles``,
    ``command_counts``, ``bank_state_cycles`` and ``schedule``; or the statistics output of
    one trace (a ``.yaml`` or ``.yml`` file, gzip or not; from standard input, ``-``, text
    that does not start with ``{``).

    Raises:
        ReferenceFileError: as :func:`statistics`; a file that cannot be read or is not a
            reference; the trace and the reference both standard input; a JSON reference
            for a trace read from standard input (it has no name to look up).
    """
    given, name = os.fspath(path), shown(path)
    from_stdin = os.fspath(trace_path) == STDIN
    if from_stdin and given == STDIN:
        raise ReferenceFileError(name, None, "the trace and the reference cannot both be "
                                             "standard input ('-')")
    text = document(given, ReferenceFileError, "reference")
    if (Path(given.removesuffix(".gz")).suffix in (".yaml", ".yml") if given != STDIN
            else not text.lstrip().startswith("{")):
        return statistics(text, name)
    if from_stdin:
        raise ReferenceFileError(name, None, "a JSON reference is keyed by trace name, and a "
                                             "trace read from standard input has none: give "
                                             "the trace's file name, or a .yaml reference (the "
                                             "statistics of that one trace)")
    try:
        data = json_value(text, name, None)
    except ReadError as error:
        raise ReferenceFileError(name, error.line, error.reason) from None
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ReferenceFileError(name, None, "a reference is a JSON object keyed by trace name, "
                                         "each entry an object")
    entry = data.get(key(trace_path))
    if entry is not None:
        unknown = set(entry) - set(FIELDS)
        if unknown or not entry:
            raise ReferenceFileError(name, None, f"entry {key(trace_path)!r}: fields "
                                             f"{sorted(unknown) or '(none)'}; known: "
                                             + ", ".join(FIELDS))
    return entry


#: A statistic of the public simulator's output: ``  name: value  # comment``.
_STAT = re.compile(r"^\s*([A-Za-z0-9_]+):\s*(\S+)\s*(#.*)?$")
#: Per-channel statistics the entry is made of.
_COUNT = re.compile(r"^CH(\d+)_num_([A-Za-z0-9]+)_commands$")
_STATE = re.compile(r"^CH(\d+)_(active|precharged|idle)_cycles$")


def statistics(text: str, name: str = "<statistics>") -> dict:
    """Return the reference entry of the public simulator's statistics output (YAML text).

    Reads ``memory_system_cycles``, every ``CH<c>_num_<COMMAND>_commands`` (zeros left
    out, as in ``reference.json``) and ``CH<c>_{active,precharged,idle}_cycles``; other
    statistics are ignored.

    Raises:
        ReferenceFileError: no ``memory_system_cycles``, a statistic given twice, or a value
            of one of these that is not a non-negative integer (``file:line: reason``).
    """
    cycles: int | None = None
    counts: dict[str, dict[str, int]] = {}
    states: dict[str, dict[str, int]] = {}
    first: dict[str, int] = {}  # statistic -> its line
    for line, raw in enumerate(text.splitlines(), start=1):
        found = _STAT.match(raw)
        if found is None:
            continue
        key, value = found.group(1), found.group(2)
        count, state = _COUNT.match(key), _STATE.match(key)
        if key != "memory_system_cycles" and count is None and state is None:
            continue
        if not value.isdigit() or not value.isascii():
            raise ReferenceFileError(name, line, f"{key}: {value!r} is not a non-negative "
                                                 "integer")
        if len(value) > MAX_DIGITS:
            raise ReferenceFileError(name, line, f"{key}: an integer of {len(value):,} digits "
                                                 f"(at most {MAX_DIGITS})")
        if key in first:
            raise ReferenceFileError(name, line, f"{key} given twice (lines {first[key]} and "
                                                 f"{line})")
        first[key] = line
        number = int(value)
        if key == "memory_system_cycles":
            cycles = number
            continue
        match = count or state
        assert match is not None
        table = counts if count else states
        entry = table.setdefault(str(int(match.group(1))), {})
        if match.group(2) in entry:  # the same statistic spelled differently (CH01, CH1)
            raise ReferenceFileError(name, line, f"{key} given twice")
        entry[match.group(2)] = number
    if cycles is None:
        raise ReferenceFileError(name, None, "no memory_system_cycles: not the public "
                                             "simulator's statistics output")
    counts = {ch: {k: v for k, v in c.items() if v} for ch, c in counts.items()}
    entry: dict = {"memory_system_cycles": cycles,
                   "command_counts": {ch: c for ch, c in counts.items() if c}}
    if states:
        entry["bank_state_cycles"] = states
    return entry


#: Reference fields and the report field each is compared with.
FIELDS = {"memory_system_cycles": "cycles", "command_counts": "command_counts",
                     "bank_state_cycles": "bank_state_cycles", "schedule": "schedule"}


def differences(expected: dict, report: dict[str, Any], result: RunResult) -> list[dict]:
    """Return every difference between a reference entry and this run, one dict each."""
    out: list[dict] = []
    for key, field in FIELDS.items():
        if key not in expected:
            continue
        want = expected[key]
        if key == "memory_system_cycles":
            if want != result.cycles:
                out.append({"field": "cycles", "reference": want, "model": result.cycles})
        elif key == "schedule":
            got = [[c.cycle, c.channel, c.command.name] for c in result.schedule]
            if got != want:
                at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                          min(len(got), len(want)))
                out.append({"field": f"schedule[{at}]",
                            "reference": want[at] if at < len(want) else None,
                            "model": got[at] if at < len(got) else None})
                if len(got) != len(want):
                    out.append({"field": "schedule length", "reference": len(want),
                                "model": len(got)})
        else:
            have = report[field]
            for ch in sorted(set(want) | set(have), key=lambda c: (len(c), c)):
                a, b = want.get(ch, {}), have.get(ch, {})
                for name in sorted(set(a) | set(b)):
                    if a.get(name, 0) != b.get(name, 0):
                        out.append({"field": f"{field}[{ch}][{name}]",
                                    "reference": a.get(name, 0), "model": b.get(name, 0)})
    return out
