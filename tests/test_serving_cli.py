"""``patton serve`` and ``patton workload sharegpt``: JSON keys, exit codes, error messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from patton.serving.conversations import from_sharegpt, read

from patton.cli import main

ROOT = Path(__file__).resolve().parent.parent
FILE = str(ROOT / "tests/data/serving/sharegpt-llama3-300.jsonl")
BAD = ROOT / "tests/data/bad/serving"
SMALL = ["--clients", "4", "--pool", "8", "--num-blocks", "256", "--max-model-len", "2048",
         "--max-batched-tokens", "512", "--steps", "300"]

KEYS = {"steps", "requests", "prompt_tokens", "cached_tokens", "hit_rate", "preemptions",
        "recomputed_tokens", "complete", "live_context_tokens", "capacity", "usage",
        "refusals", "placement_evictions", "runtime", "engine", "params"}


def serve(capsys, *args: str) -> tuple[int, str, str]:
    code = main(["serve", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("runtime", ["gpu", "patton", "patton-no-o2v"])
def test_json_has_the_report_keys_and_nothing_else_on_stdout(capsys, runtime):
    code, out, err = serve(capsys, "--conversations", FILE, "--runtime", runtime, *SMALL,
                           "--json")
    assert code == 0 and err == ""
    report = json.loads(out)  # one object, nothing else
    assert KEYS <= set(report)
    assert report["steps"] == 300 and report["requests"] > 0 and not report["complete"]
    assert report["hit_rate"] == report["cached_tokens"] / report["prompt_tokens"]
    live = report["live_context_tokens"]
    assert 0 < live["mean"] <= live["max"]
    cap = report["capacity"]
    assert cap["variant"] == runtime and cap["num_blocks"] == 256
    assert (cap["layer_rows"] is None) == (runtime == "gpu")
    assert report["usage"]["blocks_peak"] <= cap["blocks"]


def test_default_capacity_is_the_16_gib_device(capsys):
    code, out, _ = serve(capsys, "--conversations", FILE, "--runtime", "patton", "--steps",
                         "50", "--json")
    report = json.loads(out)
    assert code == 0 and report["params"]["num_blocks_default"]
    cap = report["capacity"]
    assert (cap["num_blocks"], cap["layer_rows"], cap["blocks"], cap["bytes"]) == (
        8192, 512, 8128, 16 << 30)
    code, out, _ = serve(capsys, "--conversations", FILE, "--steps", "50")
    assert code == 0 and "on the AiM device (16 GiB)" in out and "8191 blocks" in out
    assert out.count("GiB") == 1  # the size said once


def test_a_turn_longer_than_max_model_len_is_passed_over(capsys):
    # the client model passes over conversations whose first turn does not fit
    code, out, _ = serve(capsys, "--conversations", FILE, *SMALL[:6], "--max-model-len",
                         "100", "--json")
    report = json.loads(out)
    assert code == 0 and report["complete"]
    assert report["requests"] < 300 and report["passed_over"] > 0  # counted, and printed:
    code, out, _ = serve(capsys, "--conversations", FILE, *SMALL[:6], "--max-model-len", "100")
    assert f"passed over {report['passed_over']:,} conversations whose first turn" in out


def test_serving_nothing_is_an_error(capsys):
    # every first turn is longer than 8 tokens: the exit 0 with "complete"
    code, out, err = serve(capsys, "--conversations", FILE, "--max-model-len", "8", "--json")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith(f"error: {FILE}: nothing was served: all 300 conversations' first "
                          "turns exceed --max-model-len 8")


@pytest.mark.parametrize("args, message", [
    (["--pool", "12", "--clients", "8"], "--pool must be a positive multiple of --clients (8)"),
    (["--pool", "4", "--clients", "8"], "--pool must be a positive multiple of --clients (8)"),
    (["--runtime", "patton", "--num-blocks", "16"], "which the runtime cannot lay out"),
    (["--num-blocks", "4", "--steps", "100"], "the run cannot go on"),
])
def test_bad_parameters_exit_2_without_a_traceback(capsys, args, message):
    code, out, err = serve(capsys, "--conversations", FILE, *args)
    assert code == 2 and out == ""
    assert err.startswith("error: ") and message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--clients", "0"], "argument --clients: must be 1..4096, got 0"),
    (["--clients", "1e12"], "argument --clients: "),
    (["--pool", "1000000000000"], "argument --pool: must be 1..65536, got 1000000000000"),
    (["--num-blocks", "1"], "argument --num-blocks: must be 2..1048576, got 1"),
    (["--num-blocks", "1e15"], "argument --num-blocks: "),  # was a MemoryError traceback
    (["--block-size", str(1 << 40)], "argument --block-size: must be 1..1024"),
    (["--max-model-len", "1"], "argument --max-model-len: must be 2..1048576, got 1"),
    (["--max-batched-tokens", "0"], "argument --max-batched-tokens: must be 1..1048576"),
    (["--steps", "1_0"], "argument --steps: "),  # was read as 10
    (["--steps", "0"], "argument --steps: must be 1..1000000000, got 0"),
])
def test_options_past_their_bounds_are_refused_by_the_parser(capsys, args, message):
    with pytest.raises(SystemExit) as stop:
        main(["serve", "--conversations", FILE, *args])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and out == "" and message in err and "Traceback" not in err


def test_engine_vllm_without_vllm_names_the_recipe(capsys, monkeypatch):
    from patton.serving import vllm_engine

    def missing():
        raise vllm_engine.VllmUnavailable("vLLM 0.33.0 is not importable here (test); install "
                                          "it with docs/serving.md's lean CPU recipe")

    monkeypatch.setattr(vllm_engine, "import_vllm", missing)
    code, out, err = serve(capsys, "--conversations", FILE, "--engine", "vllm", "--runtime",
                           "patton")
    assert code == 2 and out == "" and "Traceback" not in err
    assert err.startswith("error: ") and "docs/serving.md" in err


@pytest.mark.parametrize("name", ["not-json", "negative-token", "duplicate-id", "user-only"])
def test_malformed_conversation_file_is_file_line_reason(capsys, name):
    path = BAD / f"{name}.jsonl"
    with pytest.raises(ValueError) as expected:
        read(path)
    code, out, err = serve(capsys, "--conversations", str(path))
    assert code == 2 and out == ""
    assert err == f"error: {expected.value}\n"
    assert err.startswith(f"error: {path}:")


def test_missing_file(capsys):
    code, _, err = serve(capsys, "--conversations", "/nonexistent/x.jsonl")
    assert code == 2 and "/nonexistent/x.jsonl" in err


def test_workload_sharegpt_writes_the_builders_file(tmp_path, capsys):
    out = tmp_path / "three.jsonl"
    code = main(["workload", "sharegpt", "--out", str(out), "--skip", "2", "--count", "3",
                 "--max-message-tokens", "32"])
    printed = capsys.readouterr().out
    assert code == 0 and "3 conversations" in printed
    assert read(out) == from_sharegpt(skip=2, count=3, max_message_tokens=32)
    assert json.loads(out.with_suffix(".meta.json").read_text())["max_message_tokens"] == 32
    with pytest.raises(SystemExit) as stop:
        main(["workload", "sharegpt", "--out", str(out), "--count", "-1"])
    assert stop.value.code == 2 and "argument --count: value '-1' is negative" in \
        capsys.readouterr().err


def test_patton_command_in_a_subprocess():
    done = subprocess.run([sys.executable, "-m", "patton.cli", "serve", "--conversations",
                           FILE, *SMALL, "--runtime", "patton", "--json"],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert KEYS <= set(json.loads(done.stdout))
    done = subprocess.run([sys.executable, "-m", "patton.cli", "serve", "--conversations",
                           str(BAD / "not-json.jsonl")],
                          capture_output=True, text=True, check=False, cwd=ROOT)
    assert done.returncode == 2 and done.stdout == ""
    assert "Traceback" not in done.stderr and "not-json.jsonl:" in done.stderr
