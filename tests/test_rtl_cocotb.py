"""The cocotb regressions of ``tb/regressions.py``, run by the cocotb runner under pytest.

Each ``@cocotb.test`` runs in its own simulator of the schedule player, which follows a regular
schedule file (``+FOLLOW``) the test's driver appends segments to; the monitor, the reference
model (functional replay) and the scoreboard run inside the simulator's Python.
"""

from __future__ import annotations

import pytest
from patton.hw.params import ChannelParams

pytestmark = pytest.mark.verilator

REGRESSIONS = ("random_programs_on_a_live_channel", "accumulators_and_buffer_survive_programs")


@pytest.fixture(scope="module")
def player():
    from patton.tb.player import SchedulePlayer

    return SchedulePlayer(ChannelParams(rows=64))


@pytest.mark.parametrize("name", REGRESSIONS)
def test_cocotb_regression(player, name, tmp_path):
    from cocotb_tools.runner import get_results
    from patton.tb.toolchain import SIMULATOR_ENV as _SIM_ENV

    schedule = tmp_path / "schedule.hex"
    schedule.write_text("")
    xml = tmp_path / "results.xml"
    player.runner.test(hdl_toplevel="patton_player", test_module="patton.tb.regressions",
                       testcase=name, build_dir=player.build_dir, test_dir=tmp_path,
                       results_xml=str(xml), extra_env=_SIM_ENV,
                       plusargs=[f"+SCHEDULE={schedule}", f"+RESULTS={tmp_path / 'results.hex'}",
                                 f"+MATS={tmp_path / 'mats.hex'}", "+FOLLOW", "+ROWS=64"])
    tests, failed = get_results(xml)
    assert (tests, failed) == (1, 0)
