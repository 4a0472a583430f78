"""``patton rtl coverage``: functional coverage closure on the RTL channel under Verilator.

The closure must hit every reachable bin with the RTL agreeing with the models on every flag,
read and mat word; and it must notice an RTL that misbehaves (a channel wrapper that hides one
rule's flags stands in for a broken checker).
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from patton.hw.params import ChannelParams

from patton.cli import main

pytestmark = pytest.mark.verilator

NRRDS = 27  # ACT -> ACT on the channel


@pytest.fixture(scope="module")
def player():
    from patton.tb.player import SchedulePlayer

    return SchedulePlayer(ChannelParams(rows=64))


def test_coverage_closes_and_reports(capsys, tmp_path):
    status = main(["rtl", "coverage", "--commands", "0", "--out", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0, report
    assert report["rules_total"] == report["rules_boundary_hit"] == report["rules_violation_hit"]
    assert report["rules_total"] == 62 and report["rules_dominated"] == 4
    assert report["rules_legal_boundary_hit"] == 62 - 4
    assert report["bins_hit"] == report["bins_total"] - report["bins_unreachable"] > 200
    assert report["closed"] and report["agree"] and not report["holes"]
    assert report["flagged"] > 0 and report["reads"] > 0 and report["mat_words"] > 0
    assert report["disagreements"] == report["read_mismatches"] == report["mat_mismatches"] == 0
    text = (tmp_path / "coverage.md").read_text()
    assert "| `timing.boundary` | 62 | 62 |" in text and "## Holes" in text
    assert json.loads((tmp_path / "coverage.json").read_text())["bins_hit"] == report["bins_hit"]
    assert "<rtl" in (tmp_path / "coverage.xml").read_text()  # cocotb-coverage's export


def test_coverage_notices_a_checker_that_misses_a_rule(player):
    from patton.tb.closure import close
    from patton.tb.session import Session

    class Blind:
        """The live channel, with every nRRDS flag removed from its verdicts."""

        def __init__(self, session):
            self.session = session

        def run(self, schedule):
            result = self.session.run(schedule)
            kept = [dataclasses.replace(v, rules=v.rules - {NRRDS}) for v in result.violations]
            return dataclasses.replace(result, violations=[v for v in kept
                                                            if v.rules or v.protocol])

        def mats(self):
            return self.session.mats()

    with Session(player, "coverage-blind") as session:
        run = close(Blind(session), budget=6000)
    assert not run.agree and run.scoreboard.disagreements > 0
    assert "timing.violation" in run.monitor.holes()  # nRRDS was never seen flagged
    assert any(label.startswith(f"{NRRDS} ") for label in run.monitor.holes()["timing.violation"])
    assert not run.ok


def test_coverage_refuses_bad_options(capsys, tmp_path):
    assert main(["rtl", "coverage", "--commands", "10", "--budget", "5"]) == 2
    assert "--budget 5 is below --commands 10" in capsys.readouterr().err
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["rtl", "coverage", "--out", str(blocker / "sub")]) == 2
    assert "cannot write there" in capsys.readouterr().err


def test_code_coverage_of_the_closure_run(capsys, tmp_path):
    """One run on the coverage build: functional closure, and every module's code coverage."""
    from patton.tb.code_coverage import module_group, read

    status = main(["rtl", "coverage", "--code", "--commands", "8000", "--out", str(tmp_path),
                   "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["closed"] and report["agree"]
    code = report["code"]
    rows = code["by_module"]
    assert {"patton_channel", "patton_channel.bank*", "patton_channel.bank*.mat",
            "patton_mac", "patton_channel.checker", "patton_channel.decoder",
            "patton_channel.gb", "patton_channel.readout*"} <= set(rows)
    assert code["lines_hit"] / code["lines"] > 0.95 and code["toggles_hit"] > 0
    # the stimulus refuses commands and breaks rules: every decoder error arm, every checker
    # rule branch and every line of the channel top, the banks and the checker run
    for module in ("patton_channel", "patton_channel.bank*", "patton_channel.checker",
                   "patton_channel.decoder"):
        assert rows[module]["lines_hit"] == rows[module]["lines"], module
    assert rows["patton_channel.checker"]["branches_hit"] > 0.8 * rows[
        "patton_channel.checker"]["branches"]
    # the branch points not taken are Yosys's empty ``if`` artefacts, the global buffer's
    # write-first bypass (one per lane: the buffer reads only for WRCP, MAC and MAC16, and the
    # stimulus rarely puts one right after a WRGB of its column; docs/verification.md), or the
    # testbench's
    missed = code["branches"] - code["branches_hit"] - code["branch_artefacts"]
    bypass = rows["patton_channel.gb"]["branches"] - rows["patton_channel.gb"]["branches_hit"]
    assert 0 <= bypass <= 16 and 0 <= missed - bypass <= 16
    points = read(tmp_path / "coverage.dat")
    assert {module_group(p.module) for p in points} >= set(rows) - {"total"}
    info = (tmp_path / "coverage.info").read_text()
    assert info.count("end_of_record") == 3  # patton_channel.v, patton_mat.v, player.v
    assert "## Line points not reached" in (tmp_path / "code-coverage.md").read_text()
