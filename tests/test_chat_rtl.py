"""The multi-turn chat served by the PATTON runtime on four live RTL channels under Verilator
(and, for a few steps, on the whole 32-channel device).

Each channel is a Verilator simulation of the Amaranth channel run by the cocotb runner (the
schedule player's cocotb test); the engine, the runtime, the driver, the monitor and the
scoreboard run here and drive the four as one device (``patton.tb.executor.RtlExecutor``).
Every step is checked (``patton.serving.chat``); the faults show the checks catch what
they claim to.
"""

from __future__ import annotations

import pytest
from patton.serving import conversations as cv
from patton.serving.chat import DEMO_CONVERSATIONS, Chat, ChatSetup
from patton.serving.faults import Faults

pytestmark = pytest.mark.verilator

SETUP = ChatSetup()


def _chat(faults: Faults | None = None, max_steps: int | None = None):
    from patton.tb.executor import RtlExecutor

    ex = RtlExecutor(SETUP.config().device, channels=range(4), rows=SETUP.rows, strict=False,
                     name="test-chat")
    try:
        chat = Chat(cv.read(DEMO_CONVERSATIONS), ex, SETUP, faults=faults, max_steps=max_steps)
        return chat, chat.run()
    finally:
        ex.close()


def test_the_whole_chat_on_the_rtl_passes_every_check():
    chat, rep = _chat()
    f = rep.as_dict()
    assert f["failures"] == []
    assert f["complete"] and f["finished"] == f["requests"] > 10
    assert f["checks"] == f["steps"]
    assert f["commits"] > 0 and f["hit_tokens"] > 0 and f["evictions"] > 0
    assert f["finished_partial"] > 0 and f["prefill_tokens"] > 0 and f["decode_tokens"] > 0
    assert f["placement_mismatches"] == 0 and f["mismatches"] == 0 and f["violations"] == 0
    assert f["mat_words"] > 5_000  # the RTL's whole mats equal the functional model's
    assert f["rtl_cycles"] > f["cycles"]  # each program's RTL segment adds the read drain
    board = chat.executor.scoreboard
    assert board.reads > 1000 and board.mismatches == 0 and board.violations == 0


@pytest.mark.parametrize("kind", Faults.KINDS)
def test_each_injected_fault_is_reported_exactly(kind):
    """One fault at a time: the step it hits is the first that fails, and its first failure
    is that fault's (a misplaced element, a misplaced commit, a timing violation at the moved
    command, a read differing from the functional model)."""
    faults = Faults(kind, step=14)
    _, rep = _chat(faults, max_steps=60 if kind == "commit-row" else 18)  # commits are rarer
    assert faults.hit is not None, "the fault found nothing to corrupt"
    step = int(faults.hit.split()[1].rstrip(":"))
    first = next(s for s in rep.steps if s.failures)
    assert first.step == step
    failure = first.failures[0]
    if kind == "kv-column":
        assert "placement in the RTL's mats: block" in failure
        assert first.violations == 0
    elif kind == "commit-row":
        assert "commit of block" in failure and "the RTL's mats" in failure
        assert first.violations == 0
    elif kind == "early":
        cycle = faults.hit.split("issued at ")[1]
        assert "violation" in failure and f"cycle {cycle}" in failure
        assert first.violations == 1 and first.placement_mismatches == 0
    else:  # read-bit
        assert ": value: expected" in failure and first.violations == 0
        assert first.placement_mismatches == 0


def test_demo_on_the_rtl_writes_the_waveform_of_a_step(tmp_path, capsys):
    import json
    import struct

    from patton.cli import main

    assert main(["demo", "--steps", "4", "--waves", "2", "--out", str(tmp_path),
                 "--json"]) == 0
    got = capsys.readouterr()
    figures = json.loads(got.out)
    assert figures["device"] == "rtl" and figures["steps"] == 4 and figures["failures"] == []
    assert figures["channel_cycles_per_second"] > 0 and figures["rtl_cycles"] > 0
    assert "make:" not in got.out + got.err  # the build's output went to the log
    assert "step 2 spans cycles" in got.err
    raw = (tmp_path / "step2.fst").read_bytes()
    kind, length, start, end = struct.unpack(">BQQQ", raw[:25])
    assert (kind, length, start) == (0, 329, 0) and end > 0


def test_the_whole_device_on_the_rtl_passes_every_check(tmp_path, capsys):
    """``patton demo --channels 32``: Llama-3-8B's 8 KV heads on 32 live RTL channels for a
    few steps. Every check passes; the RTL ran the cycle model's schedule (the same cycles as
    the models make for those steps), every KV element was read back from the RTL's mats as
    well as the functional model's, and the mats compared at the end are every word the
    functional model's 32 channels hold, each channel holding some."""
    import json

    from patton.sim.executor import CycleExecutor
    from patton.tb.reference import changed_words

    from patton.cli import main

    steps = 3
    assert main(["demo", "--channels", "32", "--steps", str(steps), "--out", str(tmp_path),
                 "--json"]) == 0
    got = capsys.readouterr()
    f = json.loads((tmp_path / "chat.json").read_text())
    assert (f["device"], f["kv_heads"], f["channels"]) == ("rtl", 8, 32)
    assert f["failures"] == [] and f["steps"] == f["checks"] == steps
    assert f["placement_mismatches"] == f["mismatches"] == f["violations"] == 0
    assert f["decode_tokens"] > 0 and 0 < f["max_tolerance_ratio"] <= 1.0
    assert "Llama-3-8B, 8 KV heads on 32 AiM channels" in got.err
    assert "32 channel simulations ready" in got.err and "by 32 channel simulators" in got.err
    # peak memory: the host's, and each simulator's as /proc noted it before it ended
    assert f["memory_mib"]["host"] > 0 and 0 < f["memory_mib"]["simulator"] < f["memory_mib"][
        "host"]
    setup = ChatSetup.of_channels(32)
    ex = CycleExecutor(setup.config().device)
    model = Chat(cv.read(DEMO_CONVERSATIONS), ex, setup, max_steps=steps).run().as_dict()
    assert f["cycles_by_phase"] == model["cycles_by_phase"]
    assert f["placement_checked"] == 2 * model["placement_checked"]  # the RTL's mats too
    words = [len(changed_words(ex.model.channels[c].mats, ex.device)) for c in range(32)]
    assert min(words) > 0 and f["mat_words"] == sum(words)
    assert f["channel_cycles"] > f["rtl_cycles"] > 0
