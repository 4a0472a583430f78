# amaranth: UnusedElaboratable=no
"""Formal proofs of the channel's parts (SymbiYosys, ``docs/verification.md``).

Every proof of :data:`patton.hw.formal.proofs.PROOFS` must pass, and a timing checker built
from a table with one rule's gap off by one cycle must fail with a counterexample trace that
shows exactly that rule at exactly that distance. The tools are dependencies of the project:
a missing one fails these tests (``ToolError``), it never skips them.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from patton.hw.formal import sby
from patton.hw.formal.proofs import (
    FEW_ROWS,
    MUTANT_RULE,
    PROOFS,
    SMALL,
    by_name,
    mutant,
)
from patton.hw.formal.protocol import ProtocolProperty
from patton.hw.formal.timing import off_by_one, pairs
from patton.hw.formal.vcd import steps
from patton.hw.isa import Opcode
from patton.hw.params import ChannelParams
from patton.sim.isa import Command, Scope
from patton.sim.protocol import RULES, Need
from patton.sim.timing import TIMING

pytestmark = pytest.mark.formal


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("formal")


@pytest.fixture(scope="module")
def broken(out):
    """The outcomes of the broken checkers' proofs, by the gap's change (run once)."""
    return {delta: mutant(delta).run(out) for delta in (-1, 1)}


def test_tools_are_installed():
    for name in (sby.SBY, sby.SOLVER[1], *sby.TOOLS.values()):
        assert sby.tool(name)
    with pytest.raises(sby.ToolError, match="not installed"):
        sby.tool("yowasp-no-such-tool")


@pytest.mark.parametrize("proof", PROOFS, ids=lambda p: p.name)
def test_proof_passes(proof, out):
    outcome = proof.run(out)
    assert outcome.status == "PASS", (outcome.failed, outcome.log)
    assert outcome.trace is None and not outcome.failed
    text = (outcome.folder / "sby.log").read_text()
    if proof.mode == "prove":
        assert "successful proof by k-induction" in text
    else:
        assert f"Checking assertions in step {proof.depth - 1}.." in text


@pytest.mark.parametrize("delta", [-1, 1])
def test_off_by_one_checker_fails_with_counterexample(delta, broken):
    gap = TIMING.rule(MUTANT_RULE).cycles
    outcome = broken[delta]
    assert outcome.status == "FAIL"
    assert outcome.trace is not None and outcome.trace.stat().st_size > 0
    trace = steps(outcome.trace, ["valid", "command", "mismatch"])[:outcome.step + 1]
    # Only the mutated rule differs, in the last step, and there only.
    assert [s["mismatch"] for s in trace] == [0] * outcome.step + [1 << MUTANT_RULE]
    acts = [k for k, s in enumerate(trace)
            if s["valid"] and s["command"] == Opcode.ACT.value]
    # An ACT then an ACT at exactly the distance the broken gap misjudges.
    assert acts[-1] == outcome.step
    assert acts[-1] - acts[-2] == (gap - 1 if delta < 0 else gap)


def test_mutant_rule_is_a_channel_act_pair():
    rows = [r for r in pairs()[Scope.CHANNEL] if r[0] == MUTANT_RULE]
    assert (MUTANT_RULE, Command.ACT, Command.ACT, TIMING.rule(MUTANT_RULE).cycles) in rows


def test_off_by_one_changes_one_gap():
    table = off_by_one(TIMING, MUTANT_RULE, -1)
    changed = [r.id for r, s in zip(table.rules, TIMING.rules) if r != s]
    assert changed == [MUTANT_RULE]
    assert table.rule(MUTANT_RULE).cycles == TIMING.rule(MUTANT_RULE).cycles - 1
    with pytest.raises(ValueError, match="no rule 999"):
        off_by_one(TIMING, 999)


def test_protocol_harness_needs_the_device_rows():
    with pytest.raises(ValueError, match="must equal the device's"):
        ProtocolProperty(ChannelParams(rows=4))
    assert ProtocolProperty(FEW_ROWS).channel.params.rows == 4


def test_trace_reader_names_missing_signals(broken):
    outcome = broken[-1]
    with pytest.raises(KeyError, match="no_such_signal"):
        steps(outcome.trace, ["valid", "no_such_signal"])


def test_cli_prove_json(tmp_path, capsys):
    from patton.cli import main

    assert main(["hw", "prove", "--only", "protocol-small", "--out", str(tmp_path),
                 "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["passed"], report["total"]) == (1, 1)
    assert report["proofs"][0]["name"] == "protocol-small"
    assert report["proofs"][0]["status"] == "PASS"
    assert main(["hw", "prove", "--only", "no-such-proof", "--out", str(tmp_path)]) == 2
    assert "no proof 'no-such-proof'" in capsys.readouterr().err


def test_cli_prove_with_a_relative_out_folder(tmp_path, monkeypatch, capsys):
    """The default --out is relative (build/formal): the solver is found from sub-folders."""
    from patton.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["hw", "prove", "--only", "gb-any", "--out", "relative/formal"]) == 0
    assert "PASS" in capsys.readouterr().out


def test_wrong_protocol_table_fails_the_decoder_proof(tmp_path):
    # A table in which RD needs no open bank: the RTL's BANK_CLOSED is then a wrong code.
    rules = {**RULES, Command.RD: dataclasses.replace(RULES[Command.RD], need=Need.ANY)}
    proof = dataclasses.replace(by_name("protocol-small"), name="wrong-table",
                                build=lambda: ProtocolProperty(SMALL, rules=rules))
    outcome = proof.run(tmp_path)
    assert outcome.status == "FAIL"
    assert outcome.trace is not None
    last = steps(outcome.trace, ["cmd.valid", "cmd.command"])[outcome.step]
    assert (last["cmd.valid"], last["cmd.command"]) == (1, Opcode.RD.value)


def test_wrong_lut_condition_fails_the_decoder_proof(tmp_path):
    # A table in which AF16 needs no LUT row: the RTL's LUT_ROW is then a wrong code.
    rules = {**RULES, Command.AF16: dataclasses.replace(RULES[Command.AF16], lut=False)}
    proof = dataclasses.replace(by_name("protocol-small"), name="wrong-lut",
                                build=lambda: ProtocolProperty(SMALL, rules=rules))
    outcome = proof.run(tmp_path)
    assert outcome.status == "FAIL"
    assert outcome.trace is not None
    last = steps(outcome.trace, ["cmd.valid", "cmd.command", "cmd.lut"])[outcome.step]
    assert (last["cmd.valid"], last["cmd.command"]) == (1, Opcode.AF16.value)
