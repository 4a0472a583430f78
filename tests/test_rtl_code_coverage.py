"""Verilator code coverage of the RTL channel (``tb/code_coverage.py``).

The reader on a hand-written ``coverage.dat`` fragment (no simulator): points, merging of
files, instances folded, copies grouped, uncovered lines with their source text, the lcov
tracefile and the Markdown table; malformed input names its file and line. End to end: the
coverage build of the player replays cycle-model schedules in a session, which writes its
counts on close; every module of the channel is there, counts grow with more stimulus. Only
that test is marked ``verilator`` (it makes the coverage build).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest


def _point(kind: str, module: str, file: str, line: int, comment: str, count: int,
           hier: str = "", column: int = 1, spans: str = "") -> str:
    keys = {"t": kind, "page": f"v_{kind}/{module}", "f": file, "l": str(line),
            "n": str(column), "o": comment}
    if spans:
        keys["S"] = spans
    if hier:
        keys["h"] = hier
    return "C '" + "".join(f"\x01{k}\x02{v}" for k, v in keys.items()) + f"' {count}\n"


def _fragment(src: Path) -> str:
    """Two copies of a bank (bank0 hit, bank1 not), a two-instance mat, a toggle, a branch."""
    top, mat = str(src / "top.v"), str(src / "mat.v")
    return ("# SystemC::Coverage-3\n"
            + _point("line", "top.bank0", top, 3, "block", 5, "p.dut.bank0", spans="3-4")
            + _point("line", "top.bank1", top, 7, "block", 0, "p.dut.bank1")
            + _point("toggle", "top.bank0", top, 2, "q[0]:0->1", 2, "p.dut.bank0")
            + _point("toggle", "top.bank0", top, 2, "q[0]:1->0", 0, "p.dut.bank0")
            + _point("branch", "top.bank0", top, 3, "if", 1, "p.dut.bank0")
            + _point("line", "mat__R40_RB6", mat, 2, "block", 0, "p.dut.bank0.mat")
            + _point("line", "mat__R40_RB6", mat, 2, "block", 4, "p.dut.bank1.mat")
            + _point("line", "mat__R40_RB6", mat, 5, "block", 0, "p.dut.bank0.mat")
            + _point("line", "mat__R40_RB6", mat, 5, "block", 0, "p.dut.bank1.mat"))


@pytest.fixture()
def fragment(tmp_path: Path) -> Path:
    (tmp_path / "top.v").write_text("module top;\n  reg q;\n  always @(posedge c) q <= 1;\n"
                                    "  // next\n\n\n  assign z = 0;\n")
    (tmp_path / "mat.v").write_text("module mat;\n  always @* x = y;\n\n\n  initial x = 0;\n")
    path = tmp_path / "coverage.dat"
    path.write_text(_fragment(tmp_path))
    return path


def test_reads_points_and_merges_files(fragment: Path):
    from patton.tb.code_coverage import read

    points = read(fragment)
    assert len(points) == 9
    first = next(p for p in points if p.module == "top.bank0" and p.kind == "line")
    assert (first.line, first.lines, first.comment, first.hierarchy, first.count) == (
        3, (3, 4), "block", "p.dut.bank0", 5)
    assert {p.kind for p in points} == {"line", "toggle", "branch"}
    twice = {p.key: p.count for p in read(fragment, fragment)}
    assert twice == {p.key: 2 * p.count for p in points}


def test_summary_folds_instances_and_groups_copies(fragment: Path):
    from patton.tb.code_coverage import read, summarise, table

    rows = {s.module: s for s in summarise(read(fragment))}
    assert set(rows) == {"mat__R40_RB6", "top.bank*", "total"}
    bank = rows["top.bank*"]
    assert (bank.modules, bank.lines, bank.lines_hit, bank.toggles, bank.toggles_hit) == (
        2, 2, 1, 2, 1)
    assert (bank.branches, bank.branches_hit) == (1, 1)
    # the mat's line 2 was hit by one of its two instances: hit; line 5 by neither
    assert (rows["mat__R40_RB6"].lines, rows["mat__R40_RB6"].lines_hit) == (2, 1)
    assert rows["mat__R40_RB6"].toggles == 0 and rows["mat__R40_RB6"].toggle_percent == 100.0
    total = rows["total"]
    assert (total.modules, total.lines, total.lines_hit) == (3, 4, 2)
    assert total.line_percent == 50.0
    each = {s.module for s in summarise(read(fragment), group=False)}
    assert each == {"mat__R40_RB6", "top.bank0", "top.bank1", "total"}
    text = table(summarise(read(fragment)))
    assert "| top.bank* | 2 | 1/2 | 50.0 | 1/1 | 100.0 | 1/2 | 50.0 |" in text
    assert text.count("\n") == 5


def test_uncovered_lines_carry_their_source(fragment: Path):
    from patton.tb.code_coverage import read, uncovered

    lines = uncovered(read(fragment))
    assert [(Path(u.file).name, u.line, u.module, u.source) for u in lines] == [
        ("mat.v", 5, "mat__R40_RB6", "initial x = 0;"), ("top.v", 7, "top.bank1", "assign z = 0;")]
    toggles = uncovered(read(fragment), "toggle")
    assert [(t.comment, t.source) for t in toggles] == [("q[0]:1->0", "reg q;")]


def test_lcov_has_a_record_per_file(fragment: Path):
    from patton.tb.code_coverage import lcov, read

    text = lcov(read(fragment))
    records = text.split("end_of_record\n")
    assert records[-1] == "" and len(records) == 3
    mat, top = records[0].splitlines(), records[1].splitlines()
    assert mat[1].endswith("mat.v") and top[1].endswith("top.v")
    assert "DA:2,4" in mat and "DA:5,0" in mat and "LH:1" in mat and "LF:2" in mat
    # block 3-4 spans two lines; toggles and the branch are branch entries
    assert {"DA:3,5", "DA:4,5", "DA:7,0", "LF:3", "LH:2", "BRF:3", "BRH:2"} <= set(top)
    assert "BRDA:2,0,0,2" in top and "BRDA:2,0,1,0" in top and "BRDA:3,1,0,1" in top


@pytest.mark.parametrize("bad", ["C 'x' 1\n", "C '\x01page\x02v_line/m\x01f\x02a.v' 1\n",
                                 "D '\x01page\x02v_line/m\x01f\x02a.v\x01l\x021' 1\n",
                                 "C '\x01page\x02v_line/m\x01f\x02a.v\x01l\x021' many\n",
                                 "C '\x01page\x02v_line/m\x01f\x02a.v\x01l\x02one' 1\n",
                                 "C '\x01page\x02v_line/m\x01f\x02a.v\x01l\x021\x01S\x02a-b' 1\n",
                                 "C '\x01page\x01f\x02a.v\x01l\x021' 1\n"])
def test_malformed_input_names_file_and_line(tmp_path: Path, bad: str):
    from patton.tb.code_coverage import read

    path = tmp_path / "broken.dat"
    path.write_text("# SystemC::Coverage-3\n" + _point("line", "m", "a.v", 1, "block", 1) + bad)
    with pytest.raises(ValueError, match=re.escape(f"{path}:3")):
        read(path)


# -- end to end: see tests/test_rtl_coverage.py (``patton rtl coverage --code``) ----------------
