"""Every public AiM trace on the RTL channel (``patton rtl run``), with seeded random data.

Each trace goes through the cycle model (its cycle count must equal the public simulator's
``memory_system_cycles``), every channel's schedule is replayed on the Verilator build of the
channel and scored: every RD, RDMAC16 and RDAF16 and the final contents of every mat (the AF
LUT rows included) bit-exact with the functional model, no violation from the RTL's checker or
the model's ``verify``, and every command replayed and executed: the controller issues nothing
this RTL version refuses by design (EWMUL16, AF16 on its LUT row and RDAF16 are executed). The
``micro_*`` traces address rows up to 1023 and run 2-6.5 M commands (about 2.5 minutes
together, the 1024-row build included).
"""

from __future__ import annotations

import json

import pytest
from patton.hw.isa import REJECTED
from patton.sim import trace as trace_io
from patton.sim.cycle_model import CycleModel
from patton.sim.isa import Command

from patton.cli import main

pytestmark = pytest.mark.verilator

PUBLIC = ("all_isr", "probe_2ch", "probe_act", "probe_af", "probe_block", "probe_gemv",
          "probe_misc", "micro_ewmul_16banks", "micro_macab_1024_16banks",
          "micro_rdmac_1024_16banks", "micro_wrab_1024_1bank", "micro_wrbias_1024_16banks",
          "micro_wrbias_mac_af_rdaf_16banks", "micro_wrbias_mac_rdmac_mac_16banks",
          "micro_wrgb_gbbk_bggb_16banks")


def test_the_list_is_every_public_trace(reference):
    assert sorted(PUBLIC) == sorted(reference)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow)
                                  if n.startswith("micro") else n for n in PUBLIC])
def test_public_trace_on_the_rtl(name, traces_dir, reference, capsys):
    path = traces_dir / f"{name}.trace"
    rows = "1024" if name.startswith("micro") else "64"
    status = main(["rtl", "run", str(path), "--rows", rows, "--seed", "7", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert report["model_cycles"] == reference[name]["memory_system_cycles"]
    assert report["mismatches"] == 0 and report["violations"] == 0
    assert report["read_mismatches"] == report["mat_mismatches"] == 0  # final mats too
    assert report["model_violations"] == 0 and report["agree"]
    assert report["rejections_not_flagged"] == 0
    assert report["ok"] and status == 0
    # Nothing is refused by design or left out: every command the controller issued replays.
    schedule = CycleModel(record=True).run(trace_io.read(path)).schedule
    assert not any(c.command in REJECTED for c in schedule)
    assert report["rejections"] == 0 and report["rejected"] == {}
    for channel in report["channels"].values():
        assert channel["not_replayed"] == {} and channel["rejected"] == {}
        assert channel["replayed_commands"] == channel["commands"]
    returns = sum(c.command in (Command.RD, Command.RDMAC16, Command.RDAF16) for c in schedule)
    assert report["reads"] == returns
