"""What every text's numbers share: where records live, how one is read, and the formats."""

from __future__ import annotations

import gzip
import importlib
import json
import pkgutil
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[2]
#: The quick records.
RECORDS_DIR = ROOT / "docs" / "records"
#: The timed records.
TIMED_DIR = RECORDS_DIR / "timed"


class NumbersError(Exception):
    """A marker names no number, or a record is missing (the message names the place)."""


class Quick(NamedTuple):
    """A quick record's command (run from the repository's root; its standard output is the
    record, JSON), ``slow`` when it takes more than about ten seconds (its test is marked
    slow)."""

    argv: list[str]
    slow: bool = False


class Timed(NamedTuple):
    """A timed record's command (run from the repository's root), with ``fresh_build``: in an
    empty build folder (``PATTON_BUILD``), so that the Verilator build is part of the run;
    ``output``: the file it writes that is the record (None: its standard output, JSON)."""

    argv: list[str]
    fresh_build: bool = False
    output: str | None = None


class Registry(NamedTuple):
    """Every text's numbers, blocks and records, merged."""

    numbers: dict[str, Callable[[], str]]
    blocks: dict[str, Callable[[], str]]
    records: dict[str, Quick]
    timed: dict[str, Timed]
    stored: dict[str, Path]


@cache
def registry() -> Registry:
    """Merge the text modules' tables; a name defined twice is a :class:`NumbersError`."""
    import sources

    merged = Registry({}, {}, {}, {}, {})
    for info in pkgutil.iter_modules(sources.__path__):
        if info.name == "common":
            continue
        module = importlib.import_module(f"sources.{info.name}")
        for field, table in zip(Registry._fields, merged):
            for name, value in getattr(module, field.upper(), {}).items():
                if name in table:
                    raise NumbersError(f"docs/sources/{info.name}.py: {field[:-1]} {name!r} "
                                       "is defined twice")
                table[name] = value
    kinds = [set(merged.records), set(merged.timed), set(merged.stored)]
    if any(a & b for i, a in enumerate(kinds) for b in kinds[i + 1:]):
        raise NumbersError("a record name is both quick, timed or stored")
    return merged


@cache
def record(name: str) -> dict:
    """The record ``name``: a quick or timed one's output, or a stored file."""
    known = registry()
    path = known.stored.get(name, (TIMED_DIR if name in known.timed else RECORDS_DIR)
                            / f"{name}.json")
    if not path.is_file():
        raise NumbersError(f"{path.relative_to(ROOT)}: no such record (make it with "
                           + ("python docs/measured.py --records)" if name in known.records
                              else "python docs/measured.py --timed)" if name in known.timed
                              else "the command its page names)"))
    data = json.loads(path.read_text())
    return data["output"] if name in known.records or name in known.timed else data


def wall(name: str) -> float:
    """The seconds the timed record ``name``'s whole command took (start-up included)."""
    record(name)  # the same errors for a missing record
    return float(json.loads((TIMED_DIR / f"{name}.json").read_text())["wall_seconds"])


#: The runs recorded from real vLLM 0.33 that the embedded engine must equal step by step.
GOLDEN_DIR = ROOT / "tests" / "data" / "serving" / "golden"


@cache
def golden(name: str) -> dict:
    """The golden run ``name`` (``GOLDEN_DIR/NAME.json.gz``)."""
    return json.loads(gzip.decompress((GOLDEN_DIR / f"{name}.json.gz").read_bytes()))


def golden_names() -> list[str]:
    """Every golden run's name, sorted."""
    return sorted(p.name.removesuffix(".json.gz") for p in GOLDEN_DIR.glob("*.json.gz"))


def x(value: float, digits: int = 2) -> str:
    """A ratio: ``1.95x``."""
    return f"{value:.{digits}f}x"


def pct(value: float) -> str:
    """A share: ``12.5 %``."""
    return f"{100 * value:.1f} %"


def slash(values: list[float], unit: str = "x") -> str:
    """Ratios side by side: ``1.20 / 2.31 / 1.05x``."""
    return " / ".join(f"{v:.2f}" for v in values) + unit


def span(values: list[float], fmt: Callable[[float], str]) -> str:
    """``low-high`` of ``values`` in ``fmt``, the unit once (``1.36-1.82x``, ``79-92 %``); one
    value when both ends read the same."""
    low, high = fmt(min(values)), fmt(max(values))
    if low == high:
        return low
    unit = low.lstrip("-0123456789.,")
    return f"{low[:len(low) - len(unit)]}-{high}"


def minutes(seconds: float) -> str:
    """``2 min 12 s``, or ``44 s`` under a minute."""
    m, s = divmod(round(seconds), 60)
    return f"{m} min {s} s" if m else f"{s} s"
