"""The chat, the demo and the runtime scenario on a device with the extension ``wr16``.

The runtime takes its extension set from the executor's timing table, so the Commit Zone's
token writes become ``WR_ABK_OPEN`` on ``aim+wr16`` and every check still passes; the figures
record the set (``"device_ext"``) only when it is not ``aim``, so default outputs keep their
keys.
"""

from __future__ import annotations

import argparse
import json

import pytest
from patton.serving import conversations as cv
from patton.serving.chat import DEMO_CONVERSATIONS, Chat, ChatSetup
from patton.sim.executor import CycleExecutor
from patton.sim.isa import Opcode
from patton.sim.timing import timing_table

from patton.cli.runtime import add_parser

SETUP = ChatSetup()
STEPS = 25


class _Ops:
    """The opcodes of every program a chat runs (an observer of its driver)."""

    def __init__(self) -> None:
        self.ops: set[Opcode] = set()

    def ran(self, work, phase, program, result) -> None:
        self.ops.update(i.opcode for i in program.to_instructions())


@pytest.fixture(scope="module")
def chats():
    convs = cv.read(DEMO_CONVERSATIONS)
    out = {}
    for ext in ("aim", "aim+wr16"):
        ops = _Ops()
        ex = CycleExecutor(SETUP.config().device, timing_table(None, ext))
        chat = Chat(convs, ex, SETUP, max_steps=STEPS, observers=[ops])
        out[ext] = (chat, chat.run().as_dict(), ops.ops)
    return out


def test_the_chat_on_wr16_passes_every_check(chats):
    chat, f, ops = chats["aim+wr16"]
    assert chat.runtime.device_ext == "aim+wr16" and f["device_ext"] == "aim+wr16"
    assert f["failures"] == [] and f["steps"] == STEPS
    assert f["placement_checked"] > 0 and f["placement_mismatches"] == 0
    assert f["mismatches"] == f["violations"] == 0 and f["commits"] > 0
    assert Opcode.WR_ABK_OPEN in ops


def test_only_the_writes_change(chats):
    _, aim, aim_ops = chats["aim"]
    _, wr16, _ = chats["aim+wr16"]
    assert "device_ext" not in aim and Opcode.WR_ABK_OPEN not in aim_ops
    assert list(wr16) == ["device", "device_ext"] + list(aim)[1:]  # one key, after "device"
    by, by16 = aim["cycles_by_phase"], wr16["cycles_by_phase"]
    assert by16["writes"] < by["writes"]
    assert {p: by[p] for p in ("commits", "qk", "sv")} == {p: by16[p] for p in
                                                            ("commits", "qk", "sv")}
    for key in ("prefill_tokens", "decode_tokens", "kv_writes", "commits", "evictions",
                "placement_checked"):
        assert aim[key] == wr16[key], key


def test_demo_on_wr16(tmp_path, capsys):
    from patton.cli import main

    assert main(["demo", "--device", "model", "--device-ext", "aim+wr16", "--steps", "3",
                 "--out", str(tmp_path), "--json"]) == 0
    got = capsys.readouterr()
    figures = json.loads(got.out)
    assert figures["device_ext"] == "aim+wr16" and figures["failures"] == []
    assert json.loads((tmp_path / "chat.json").read_text())["device_ext"] == "aim+wr16"
    assert "on the device models with the device extension aim+wr16:" in got.err


def test_demo_refuses_an_unknown_extension(tmp_path, capsys):
    from patton.cli import main

    with pytest.raises(SystemExit) as e:
        main(["demo", "--device", "model", "--device-ext", "wr16", "--out", str(tmp_path)])
    assert e.value.code == 2 and "--device-ext" in capsys.readouterr().err


def test_runtime_scenario_on_wr16(capsys):
    def scenario(*extra: str) -> dict:
        parser = argparse.ArgumentParser(prog="patton")
        add_parser(parser.add_subparsers(dest="command", required=True))
        args = parser.parse_args(["runtime", "scenario", "--requests", "1", "--steps", "10",
                                  "--json", *extra])
        assert args.func(args) == 0
        return json.loads(capsys.readouterr().out)

    aim, wr16 = scenario(), scenario("--device-ext", "aim+wr16")
    assert "device_ext" not in aim and wr16["device_ext"] == "aim+wr16"
    assert wr16["ok"] and wr16["failures"] == [] and wr16["violations"] == 0
    cycles, cycles16 = aim["value_write_cycles"], wr16["value_write_cycles"]
    assert cycles16["cz"] < cycles["cz"]  # the Commit Zone's token writes are WR_ABK_OPEN
    assert cycles16["no_cz"] < cycles["no_cz"]  # no CZ's WR_ABK are WR_ABK_OPEN, by row
