"""PATTON runtime programs on the RTL channel: real attention with real bf16 data.

``patton runtime scenario --trace`` runs a multi-request scenario (prefill, decode across block
boundaries, Commit Zone writes and commits, QK^T and SV) on the functional model, checks every
score and output bit-exact against the runtime's reference and writes the programs as a trace.
``patton rtl run`` then replays that trace's schedule, channel by channel, on the Verilator
build of the channel and requires every RD_MAC read-out and the final contents of the mats
(every Key and Value word written) bit-exact with the functional model, and no violation.
Together: RTL == functional model == the runtime's attention reference.
"""

from __future__ import annotations

import json

import pytest

from patton.cli import main

pytestmark = pytest.mark.verilator


def _json(capsys, argv: list[str]) -> tuple[int, dict]:
    status = main(argv + ["--json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("model, requests, steps", [("llama3-8b", 2, 20), ("opt-6.7b", 1, 18)])
def test_runtime_attention_on_the_rtl(model, requests, steps, tmp_path, capsys):
    path = tmp_path / f"{model}.trace"
    status, scenario = _json(capsys, ["runtime", "scenario", "--model", model, "--requests",
                                      str(requests), "--steps", str(steps), "--seed", "5",
                                      "--trace", str(path)])
    assert status == 0 and scenario["ok"]
    assert scenario["attention_checks"] > 0 and scenario["commits"] > 0
    status, rtl = _json(capsys, ["rtl", "run", str(path), "--rows", "1024"])
    assert rtl["payloads_filled"] == 0  # every write carries the runtime's own data
    assert rtl["reads"] > 0 and rtl["mismatches"] == 0
    assert rtl["mat_words"] > 0 and rtl["mat_mismatches"] == 0  # every K and V word written
    assert rtl["violations"] == 0 and rtl["model_violations"] == 0 and rtl["agree"]
    assert rtl["ok"] and status == 0
