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
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("measured", ROOT / "docs" / "measured.py")
assert _spec is not None and _spec.loader is not None
measured = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(measured)

def test_the_text_says_what_the_records_say():
    differs = []
    for path in measured.TEXTS:
        _, changed = measured.fill(path.read_text(), str(path.relative_to(ROOT)))
        differs += changed
    assert differs == [], "\n".join(differs) + "\n(python docs/measured.py fills them in)"


def test_every_number_and_record_is_used():
    """No number or block without a marker in the text, no record without its command."""
    used, blocks = set(), set()
    for path in measured.TEXTS:
        used |= {m.group(1) for m in measured._MARK.finditer(path.read_text())}
        blocks |= {m.group(1) for m in measured._BLOCK.finditer(path.read_text())}
    assert used == set(measured.NUMBERS)
    assert blocks == set(measured.BLOCKS)
    assert {p.stem for p in measured.RECORDS_DIR.glob("*.json")} == set(measured.RECORDS)
    assert {p.stem for p in measured.TIMED_DIR.glob("*.json")} == set(measured.TIMED)


#: The demo's figures that only a run on the RTL has, or that count the RTL's side of a
#: check: its simulators' cycles and times, the mat words compared at the end, and the K/V
#: elements read back (from the RTL's mats as well as the functional model's: twice as many).
RTL_ONLY = {"device", "rtl_cycles", "rtl_seconds", "channel_cycles", "rtl_cycles_per_second",
            "channel_cycles_per_second", "mat_words", "placement_checked", "ready_seconds",
            "memory_mib"}
#: Wall times.
WALL = {"seconds", "wall_seconds"}


def _demo_options(name: str) -> list[str]:
    """The record's ``--channels`` option, if its command has one."""
    argv = measured.TIMED[name].argv
    return argv[argv.index("--channels"):argv.index("--channels") + 2] \
        if "--channels" in argv else []


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=[pytest.mark.slow] if _demo_options(n) else [])
    for n in measured.TIMED if n.startswith("demo")])
def test_a_timed_demo_record_is_what_the_models_make_now(tmp_path, name):
    """The timed runs' figures that do not depend on the machine (steps, tokens, cycles by
    phase, checks) are today's: the device models make the same (the RTL's cycles equal
    the cycle model's, a check of every demo step). The whole device's (``--channels 32``,
    marked slow: two minutes on the models) likewise."""
    done = subprocess.run([sys.executable, "-m", "patton.cli", "demo", "--device", "model",
                           *_demo_options(name), "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    made = json.loads((tmp_path / "chat.json").read_text())
    stored = measured.record(name)
    assert stored["device"] == "rtl" and not stored["failures"]
    assert stored["placement_checked"] == 2 * made["placement_checked"]
    keep = set(made) - RTL_ONLY - WALL - {"per_step"}
    assert {k: stored[k] for k in keep} == {k: made[k] for k in keep}
    assert [{k: v for k, v in s.items() if k not in RTL_ONLY} for s in stored["per_step"]] \
        == [{k: v for k, v in s.items() if k not in RTL_ONLY} for s in made["per_step"]]


def test_a_block_that_differs_is_named_at_its_line():
    text = "x\n<!-- block aim.reference -->\n| stale |\n<!-- /block -->\ny\n"
    new, changed = measured.fill(text, "X.md")
    assert changed == ["X.md:2: block aim.reference differs from its record"]
    assert new == text.replace("| stale |", measured.BLOCKS["aim.reference"]())
    again, unchanged = measured.fill(new, "X.md")
    assert (again, unchanged) == (new, [])


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if q.slow else [])
                                  for n, q in measured.RECORDS.items()])
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
    monkeypatch.setattr(sys.modules["sources.common"], "RECORDS_DIR", folder)
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
    ("x\n\n<!-- block no.such -->\n1\n<!-- /block -->", "X.md:3: no block named 'no.such'"),
])
def test_a_marker_naming_no_number_is_an_error(text, said):
    with pytest.raises(measured.NumbersError, match=said):
        measured.fill(text, "X.md")


def test_the_timed_quick_repro_made_the_golden_records():
    """The timed ``patton repro all --quick`` made what ``tests/test_repro_pipeline.py``
    requires of it, wall times aside."""
    golden = json.loads((ROOT / "tests" / "data" / "repro" / "quick.json").read_text())
    assert measured.without_wall_times(measured.record("repro-quick")) == golden


def test_a_timed_record_needing_an_unset_path_is_refused_or_kept(tmp_path, monkeypatch,
                                                                 capsys):
    """A machine's path is a ``$NAME`` in the command: named when asked for and unset, kept
    as it is when every record is made; no record holds the machine's path."""
    monkeypatch.delenv("NO_SUCH_PATH", raising=False)
    timed = sys.modules["sources.common"].Timed(["$NO_SUCH_PATH/run.py"])
    monkeypatch.setattr(measured, "TIMED", {"x": timed})
    with pytest.raises(measured.NumbersError, match=r"timed record x: needs \$NO_SUCH_PATH"):
        measured.make_timed(["x"], folder=tmp_path)
    measured.make_timed(None, folder=tmp_path)
    assert "timed record x: kept as it is (needs $NO_SUCH_PATH)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    script = tmp_path / "run.py"
    script.write_text("print('{\"ran\": 1}')")
    monkeypatch.setenv("NO_SUCH_PATH", str(tmp_path))
    measured.make_timed(["x"], folder=tmp_path)
    made = json.loads((tmp_path / "x.json").read_text())
    assert (made["command"], made["output"]) == ("python $NO_SUCH_PATH/run.py", {"ran": 1})
    measured.record.cache_clear()


def test_no_record_holds_a_path_of_this_machine():
    for path in [*measured.RECORDS_DIR.glob("*.json"), *measured.TIMED_DIR.glob("*.json")]:
        command = json.loads(path.read_text())["command"]
        assert str(ROOT) not in command and "/work/" not in command, path
