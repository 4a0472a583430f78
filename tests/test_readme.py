"""The README is a front page, and the examples the docs pages give run unchanged, with the
results they promise."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXECUTORS = ROOT / "docs" / "executors.md"
FORMATS = ROOT / "docs" / "formats.md"
RTL = ROOT / "docs" / "rtl.md"


def _example() -> str:
    text = EXECUTORS.read_text()
    found = re.search(r"<!-- example: executors -->\n```python\n(.*?)```", text, re.S)
    assert found, "docs/executors.md lost its executor example"
    return found.group(1)


def test_example_is_short():
    assert len(_example().strip().splitlines()) <= 30


@pytest.mark.verilator
def test_example_runs_on_three_executors_with_equal_results():
    scope: dict = {}
    exec(compile(_example(), str(EXECUTORS), "exec"), scope)
    results = scope["results"]
    assert list(results) == ["FunctionalExecutor", "CycleExecutor", "RtlExecutor"]
    (s0, o0, c0), (s1, o1, c1), (s2, o2, c2) = results.values()
    assert np.array_equal(s0, s1) and np.array_equal(s0, s2)  # QK^T scores, bit for bit
    assert np.array_equal(o0, o1) and np.array_equal(o0, o2)  # SV outputs
    assert c0 is None and c1 == c2 > 0  # the RTL runs the cycle model's schedule
    assert s0.shape == (1, 41) and np.isfinite(o0).all()
    said = " ".join(EXECUTORS.read_text().split())
    assert f"report the same {c1} cycles for the SV program" in said


def _schedule_example() -> str:
    found = re.search(r"<!-- example: schedule -->\n```\n(.*?)```", FORMATS.read_text(), re.S)
    assert found, "docs/formats.md lost its schedule example"
    return found.group(1)


def test_schedule_example_is_six_legal_lines(tmp_path, capsys):
    from patton.sim import schedule
    from patton.sim.check import verify
    from patton.sim.isa import Command

    from patton.cli import main

    text = _schedule_example()
    assert len(text.splitlines()) == 6
    path = tmp_path / "example.schedule"
    path.write_text(text)
    cmds = schedule.read(path)
    assert [(c.cycle, c.channel, c.command) for c in cmds] == [
        (1, 0, Command.ACT), (37, 0, Command.WR), (70, 0, Command.RD), (72, 0, Command.RD),
        (120, 0, Command.PRE), (121, 31, Command.TMOD)]
    assert cmds[1].mask == 0x000F and cmds[1].payload[:4].tolist() == [0x3F80, 0x4000,
                                                                        0x4040, 0x4080]
    assert cmds[2].row == -1 and cmds[3].row == 8  # '-': the open row
    assert main(["aim", "check", str(path)]) == 0
    assert "6 commands, 0 violation(s)" in capsys.readouterr().out
    # what the page says happens when the WR moves to cycle 5
    moved = text.replace("37 0 WR", "5 0 WR")
    found = verify(list(schedule.parse(moved.splitlines())))
    assert "rule 90 nRCDWR (ACT -> WR): needs 28, got 4" in str(found[0])
    assert "rule 90 nRCDWR (ACT -> WR): needs 28, got 4" in FORMATS.read_text()


@pytest.mark.verilator
def test_schedule_example_is_legal_on_the_rtl(tmp_path, capsys):
    import json

    from patton.cli import main

    path = tmp_path / "example.schedule"
    path.write_text(_schedule_example())
    assert main(["rtl", "check", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["agree"] and report["reads"] == 2 and report["mismatches"] == 0


def test_trace_example_reads_and_its_mask_bits_select_channels(tmp_path):
    from patton.sim import trace
    from patton.sim.functional import FunctionalModel
    from patton.sim.isa import Opcode

    found = re.search(r"## Trace format.*?```\n(.*?)```", FORMATS.read_text(), re.S)
    assert found, "docs/formats.md lost its trace example"
    path = tmp_path / "example.trace"
    path.write_text(found.group(1))
    program = list(trace.read(path))
    assert [i.opcode for i in program] == [Opcode.WR_CFR, Opcode.WR_SBK, Opcode.RD_SBK,
                                           Opcode.MAC_ABK, Opcode.RD_MAC, Opcode.EOC]
    assert program[1].channels() == [0] and sorted(program[3].channels()) == [0, 1]
    from patton.sim.isa import mask_channels

    assert mask_channels(0x00000001) == [31]  # bit 31 - c selects channel c
    readouts = FunctionalModel().run(program)
    from patton.sim.datapath import from_bf16

    assert from_bf16(readouts[0].data)[:4].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_rtl_page_figures_of_the_replay_are_the_code_s():
    from patton.sim.timing import TIMING
    from patton.tb.driver import DRAIN, DRAIN_MARGIN

    # as rendered: a generated number's markers do not show
    text = re.sub(r"<!-- /?n[^>]*-->", "", " ".join(RTL.read_text().split()))
    assert (f"the RTL count runs {DRAIN} cycles (the longest read latency, "
            f"{DRAIN - DRAIN_MARGIN}, plus {DRAIN_MARGIN})") in text
    assert f"every timing window ({TIMING.quiet} cycles)" in text
    assert "`verilator-cli`" in text


def test_readme_is_a_front_page():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"the README has {len(lines)} lines: move detail to docs/"
    first_screen = "\n".join(lines[:40])
    assert "pip install -e . && patton demo" in first_screen
    assert "python -m pytest -q" in first_screen
    assert "](docs/index.md)" in first_screen  # the next step, one link away


def test_readme_links_resolve():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert len(links) >= 10
    missing = [link for link in links if not (ROOT / link).exists()]
    assert not missing, f"README links to files that do not exist: {missing}"


def test_readme_commands_are_real_commands():
    """Every ``patton ...`` the README shows names a command (and verb) the CLI has."""
    import argparse

    from patton.cli import parser

    def verbs(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
        for action in p._actions:
            if isinstance(action, argparse._SubParsersAction):
                return dict(action.choices)
        return {}

    shown = re.findall(r"`patton ([a-z][a-z-]*)(?: ([a-z][a-z-]*))?", README.read_text())
    assert len(shown) >= 10
    top = verbs(parser())
    for command, verb in shown:
        assert command in top, f"README shows `patton {command}`, which the CLI lacks"
        sub = verbs(top[command])
        if sub:
            assert verb in sub, f"README shows `patton {command} {verb}`, which the CLI lacks"
