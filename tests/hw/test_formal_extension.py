# amaranth: UnusedElaboratable=no
"""Formal proofs of the channel on the device extension set ``aim+wr16`` (SymbiYosys).

``proofs("aim")`` is :data:`~patton.hw.formal.proofs.PROOFS`, unchanged; ``proofs("aim+wr16")``
proves the timing checker and the decoder of the extension's channel (WR16 among the free
commands, rule 104 among the rules) and keeps the storage proofs. The proofs can fail: a
protocol table in which WR16 closes the row, and checkers that time WR16 wrongly, are refused.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from patton.hw.formal.proofs import FULL, PROOFS, SMALL, Proof, by_name, proofs
from patton.hw.formal.protocol import ProtocolProperty
from patton.hw.formal.timing import TimingProperty, off_by_one, pairs
from patton.hw.formal.vcd import steps
from patton.hw.isa import hw_isa
from patton.sim.isa import Command, Scope
from patton.sim.protocol import RULES, Action
from patton.sim.timing import PROFILES, TimingTable, timing_table

pytestmark = pytest.mark.formal

EXT = "aim+wr16"
TABLE = timing_table(None, EXT)
WR16 = hw_isa(EXT, TABLE.slots).Opcode.WR16.value
#: The extension's own rule: WR16 -> PRE/PRE4/PREA, 41 cycles.
WR16_PRE = 104
#: The proofs only the extension set has.
ADDED = [p for p in proofs(EXT) if p not in PROOFS]


def test_the_default_proofs_are_unchanged_and_the_extension_adds_its_own():
    assert proofs() is proofs("aim") is PROOFS
    assert [p.name for p in PROOFS[:4]] == [*(f"timing-{p}" for p in PROFILES), "protocol",
                                            "protocol-small"]
    names = [p.name for p in proofs(EXT)]
    assert names[:4] == [*(f"timing-{p}+wr16" for p in PROFILES), "protocol+wr16",
                         "protocol-small+wr16"]
    assert names[4:] == [p.name for p in PROOFS[4:]]  # the storage proofs, on every set
    assert [p.name for p in ADDED] == names[:4]
    assert by_name("protocol+wr16", EXT).name == "protocol+wr16"
    with pytest.raises(KeyError, match="no proof 'protocol\\+wr16'"):
        by_name("protocol+wr16")
    assert (WR16_PRE, Command.WR16, Command.PREA, 41) in pairs(TABLE)[Scope.CHANNEL]
    assert not any(Command.WR16 in (p, f) for _, p, f, _ in pairs()[Scope.CHANNEL])
    assert WR16_PRE == TABLE.slots - 1


@pytest.mark.parametrize("proof", ADDED, ids=lambda p: p.name)
def test_extension_proof_passes(proof, tmp_path):
    outcome = proof.run(tmp_path)
    assert outcome.status == "PASS", (outcome.failed, outcome.log)
    assert "successful proof by k-induction" in (outcome.folder / "sby.log").read_text()


def test_a_table_in_which_wr16_closes_the_row_fails_the_decoder_proof(tmp_path):
    # WR16 with WRA16's auto-precharge: the RTL leaves the row open, so after a legal WR16
    # the row state is not the (wrong) rule's.
    rules = {**RULES, Command.WR16: dataclasses.replace(RULES[Command.WR16],
                                                        action=Action.CLOSE)}
    proof = dataclasses.replace(
        by_name("protocol-small+wr16", EXT), name="wr16-closes",
        build=lambda: ProtocolProperty(SMALL, rules=rules, timing=TABLE))
    outcome = proof.run(tmp_path)
    assert outcome.status == "FAIL" and outcome.trace is not None
    trace = steps(outcome.trace, ["cmd.valid", "cmd.command"])
    assert (trace[outcome.step - 1]["cmd.valid"], trace[outcome.step - 1]["cmd.command"]) == (
        1, WR16)


def test_a_checker_that_does_not_time_wr16_as_a_write_fails(tmp_path):
    # rule 1 (a write after a write, 2 cycles) without WR16 on its preceding side
    rules = [dataclasses.replace(r, preceding=r.preceding - {Command.WR16}) if r.id == 1
             else r for r in TABLE.rules]
    table = TimingTable(rules, TABLE.params, name="no-wr16-in-rule1", ext=EXT)
    proof = Proof("wr16-untimed", lambda: TimingProperty(FULL, TABLE, checker_timing=table),
                  "prove", 4, "", "")
    outcome = proof.run(tmp_path)
    assert outcome.status == "FAIL" and outcome.trace is not None
    trace = steps(outcome.trace, ["valid", "command", "mismatch"])[:outcome.step + 1]
    issued = [s["command"] for s in trace if s["valid"]]
    assert issued[-2] == WR16 and trace[-1]["mismatch"] == 1 << 1


def test_a_checker_with_rule_104_off_by_one_is_not_proved(tmp_path):
    # WR16 -> PREA in 40 cycles: too deep for the base case, found by the induction step
    wrong = off_by_one(TABLE, WR16_PRE, -1)
    proof = Proof("rule104-1", lambda: TimingProperty(FULL, TABLE, checker_timing=wrong),
                  "prove", 4, "", "")
    outcome = proof.run(tmp_path)
    assert outcome.status != "PASS"
    assert "counterexample trace [induction]" in "\n".join(outcome.log)
    with pytest.raises(ValueError, match="another device"):
        TimingProperty(FULL, TABLE, checker_timing=off_by_one(timing_table(), 27, -1))


def test_cli_prove_with_the_device_extension(tmp_path, capsys):
    from patton.cli import main

    assert main(["hw", "prove", "--device-ext", EXT, "--only", "protocol-small+wr16",
                 "--out", str(tmp_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["passed"], report["total"], report["device_ext"]) == (1, 1, EXT)
    assert main(["hw", "prove", "--only", "protocol-small+wr16", "--out", str(tmp_path)]) == 2
    assert "no proof 'protocol-small+wr16'" in capsys.readouterr().err
