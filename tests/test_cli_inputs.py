"""Inputs as people have them: every command that reads a trace, a schedule or a conversation
file takes it gzip-compressed (``x.trace.gz``) or on standard input (``-``)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
from patton.sim import reference

from patton.cli import main

ROOT = Path(__file__).resolve().parent.parent
AIM = ROOT / "tests" / "data" / "aim"
REFERENCE = str(AIM / "reference.json")
CONVERSATIONS = ROOT / "tests" / "data" / "serving" / "sharegpt-llama3-300.jsonl"


def _stdin(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    """Make standard input a pipe-like stream holding ``data``."""
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_aim_run_reads_a_gz_trace_and_finds_its_reference(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``probe_gemv.trace.gz`` runs as ``probe_gemv.trace`` and is ``probe_gemv`` in the
    reference file."""
    packed = tmp_path / "probe_gemv.trace.gz"
    packed.write_bytes(gzip.compress((AIM / "probe_gemv.trace").read_bytes()))
    code, out, _ = _run(capsys, "aim", "run", str(packed), "--json", "--reference", REFERENCE)
    report = json.loads(out)
    assert code == 0
    assert report["reference"]["key"] == "probe_gemv" and report["reference"]["found"]
    assert report["reference"]["differences"] == [] and report["reference"]["fields"]
    code, plain, _ = _run(capsys, "aim", "run", str(AIM / "probe_gemv.trace"), "--json")
    assert report["cycles"] == json.loads(plain)["cycles"] > 0
    code, out, _ = _run(capsys, "aim", "run", str(packed), "--reference", REFERENCE)
    assert code == 0 and "[probe_gemv]" in out and "all equal" in out


def test_aim_run_reads_a_trace_on_standard_input(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    text = (AIM / "all_isr.trace").read_bytes()
    _, plain, _ = _run(capsys, "aim", "run", str(AIM / "all_isr.trace"), "--json")
    for data in (text, gzip.compress(text)):
        _stdin(monkeypatch, data)
        code, out, _ = _run(capsys, "aim", "run", "-", "--json")
        assert code == 0
        assert json.loads(out)["trace"] == "-"
        assert json.loads(out)["cycles"] == json.loads(plain)["cycles"]


def test_bad_input_on_standard_input_is_named_stdin(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, b"AiM EOC\nAiM NOPE\n")
    code, out, err = _run(capsys, "aim", "run", "-")
    assert (code, out) == (2, "")
    assert err.startswith("error: <stdin>:2: ") and "Traceback" not in err
    packed = gzip.compress(b"".join(b"AiM WR_BIAS 4 0x%x\n" % i for i in range(1, 40_000)))
    _stdin(monkeypatch, packed[:len(packed) // 2])
    code, _, err = _run(capsys, "aim", "run", "-")
    assert code == 2
    assert "not a valid gzip file: its compressed data ends early" in err
    assert err.startswith("error: <stdin>:")


def test_a_trace_on_standard_input_has_no_name_to_look_up(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A JSON reference is keyed by trace name: refused for ``-``, as is ``--reference -``
    beside ``aim run -`` (one standard input for two files)."""
    _stdin(monkeypatch, (AIM / "probe_gemv.trace").read_bytes())
    code, out, err = _run(capsys, "aim", "run", "-", "--reference", REFERENCE)
    assert (code, out) == (2, "")
    assert "a trace read from standard input has none" in err
    _stdin(monkeypatch, (AIM / "probe_gemv.trace").read_bytes())
    code, out, err = _run(capsys, "aim", "run", "-", "--reference", "-")
    assert (code, out) == (2, "")
    assert "the trace and the reference cannot both be standard input" in err


def test_aim_check_reads_a_schedule_on_standard_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    written = tmp_path / "probe.schedule"
    code, _, _ = _run(capsys, "aim", "run", str(AIM / "probe_gemv.trace"), "--schedule",
                      str(written))
    assert code == 0
    text = written.read_bytes()
    _, plain, _ = _run(capsys, "aim", "check", str(written), "--json")
    for data in (text, gzip.compress(text)):
        _stdin(monkeypatch, data)
        code, out, _ = _run(capsys, "aim", "check", "-", "--json")
        assert code == 0
        assert json.loads(out) == {**json.loads(plain), "schedule": "-"}
        assert json.loads(out)["commands"] > 0
    lines = text.decode().splitlines()  # line 9's MAC16 40 cycles early: too soon after ACT16
    cycle, rest = lines[8].split(" ", 1)
    assert rest.startswith("0 MAC16")
    lines[8] = f"{int(cycle) - 40} {rest}"
    _stdin(monkeypatch, "\n".join(lines).encode())
    code, out, _ = _run(capsys, "aim", "check", "-")
    assert code == 1 and out.startswith("<stdin>:9: cycle ")


def _served(report: str) -> dict:
    """A ``serve --json`` report without what differs between two equal runs."""
    out = json.loads(report)
    del out["params"]["conversations"], out["steps_per_second"]
    out.pop("wall_seconds", None)
    return out


def test_serve_reads_gz_conversations_and_standard_input(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    small = ["--runtime", "gpu", "--clients", "4", "--pool", "8", "--num-blocks", "256",
             "--max-model-len", "2048", "--max-batched-tokens", "512", "--steps", "300",
             "--json"]
    packed = tmp_path / "conv.jsonl.gz"
    packed.write_bytes(gzip.compress(CONVERSATIONS.read_bytes()))
    code, plain, _ = _run(capsys, "serve", "--conversations", str(CONVERSATIONS), *small)
    assert code == 0 and _served(plain)["requests"] > 0
    code, out, _ = _run(capsys, "serve", "--conversations", str(packed), *small)
    assert code == 0 and _served(out) == _served(plain)
    _stdin(monkeypatch, packed.read_bytes())
    code, out, _ = _run(capsys, "serve", "--conversations", "-", *small)
    assert code == 0 and _served(out) == _served(plain)
    _stdin(monkeypatch, b'{"id": "a", "messages": [[1], [2]]}\n{"id": "a"}\n')
    code, out, err = _run(capsys, "serve", "--conversations", "-", *small)
    assert (code, out) == (2, "") and err.startswith("error: <stdin>:2: ")


def test_a_real_pipe_into_patton(tmp_path: Path) -> None:
    """``gzip -c x.trace | patton aim run -`` in a separate process (the real standard input);
    a terminal would be refused, not waited on (tests/test_line_reader.py)."""
    text = (AIM / "probe_misc.trace").read_bytes()
    done = subprocess.run([sys.executable, "-m", "patton.cli", "aim", "run", "-", "--json"],
                          input=gzip.compress(text), capture_output=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["commands"] > 0


def test_reference_keys_and_compressed_statistics(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The key of ``x.trace.gz`` is ``x``; a ``.yaml.gz`` reference is the statistics it
    holds, and statistics on standard input are told from JSON by their text."""
    assert reference.key("runs/x.trace.gz") == reference.key("x.trace") == "x"
    stats = next((AIM / "cent").glob("*.yaml"))
    packed = tmp_path / f"{stats.name}.gz"
    packed.write_bytes(gzip.compress(stats.read_bytes()))
    expected = reference.read(str(stats), "any.trace")
    assert expected and reference.read(str(packed), "any.trace") == expected
    _stdin(monkeypatch, stats.read_bytes())
    assert reference.read("-", "any.trace") == expected
