"""The measured numbers in the README and ``docs/`` are their records', and the quick records
are what today's code makes (``docs/measured.py``).

The text is checked against every record; the quick records are made again by their commands
and must equal the stored ones (wall times aside). The full-scale records (``patton repro``
under the paper configuration, half an hour) are checked against the text only.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("measured", ROOT / "docs" / "measured.py")
assert _spec is not None and _spec.loader is not None
measured = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measured)

#: The records whose commands take minutes (the Value-write benchmark over both timings).
SLOW = {"value-writes-llama3-8b", "value-writes-opt-6.7b"}


def test_the_text_says_what_the_records_say():
    differs = []
    for path in measured.TEXTS:
        _, changed = measured.fill(path.read_text(), str(path.relative_to(ROOT)))
        differs += changed
    assert differs == [], "\n".join(differs) + "\n(python docs/measured.py fills them in)"


def test_every_number_and_record_is_used():
    """No number without a marker in the text, no quick record without a number."""
    used = set()
    for path in measured.TEXTS:
        used |= {m.group(1) for m in measured._MARK.finditer(path.read_text())}
    assert used == set(measured.NUMBERS)
    assert {p.stem for p in measured.RECORDS_DIR.glob("*.json")} == set(measured.RECORDS)


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n in SLOW else [])
                                  for n in measured.RECORDS])
def test_a_quick_record_is_what_its_command_makes_now(tmp_path, name):
    measured.make_records([name], folder=tmp_path)
    made = json.loads((tmp_path / f"{name}.json").read_text())
    stored = json.loads((measured.RECORDS_DIR / f"{name}.json").read_text())
    assert made == stored


def test_a_number_that_differs_is_named_at_its_line(tmp_path, monkeypatch):
    folder = tmp_path / "records"
    shutil.copytree(measured.RECORDS_DIR, folder)
    run = json.loads((folder / "aim-micro_macab.json").read_text())
    run["output"]["energy_nj"] += 1000
    (folder / "aim-micro_macab.json").write_text(json.dumps(run))
    monkeypatch.setattr(measured, "RECORDS_DIR", folder)
    measured.record.cache_clear()
    try:
        text = "a\nb <!-- n energy.micro_macab -->5,584,276 nJ<!-- /n --> c\n"
        new, changed = measured.fill(text, "X.md")
    finally:
        measured.record.cache_clear()
    assert changed == ["X.md:2: energy.micro_macab is 5,585,276 nJ, the text says 5,584,276 nJ"]
    assert new == text.replace("5,584,276", "5,585,276")


@pytest.mark.parametrize("text, said", [
    ("x\n<!-- n no.such -->1<!-- /n -->", "X.md:2: no number named 'no.such'"),
])
def test_a_marker_naming_no_number_is_an_error(text, said):
    with pytest.raises(measured.NumbersError, match=said):
        measured.fill(text, "X.md")
