"""The ``patton`` command's conventions, over every command at once.

Every command and sub-command has a one-line help of its own and plain-text descriptions (no
reST markup); ``patton --version`` names the installed version; a command given without its
sub-command (``patton``, ``patton aim``, ...) prints its help on stdout and exits 0, as cargo
does (git exits 1): asking what a command does is not an error. Option values are spelled with
hyphens (``per-channel``); the records' spelling (``per_channel``) is accepted with a note.
``patton demo``'s files go to a folder per device. A build says what it does only when it
builds, naming the real build root, and keeps saying it while it runs.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import time
from collections.abc import Iterator

import pytest
from patton.sim import native
from patton.tb import builds, toolchain
from patton.tb.toolchain import quiet

from patton.cli import main, parser
from patton.cli import repro as repro_cli
from patton.cli import serve as serve_cli
from patton.cli.options import Choice


def _parsers(p: argparse.ArgumentParser, name: str = "patton"
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``p`` and every parser under it, with the command that reaches it."""
    yield name, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for verb, sub in action.choices.items():
                yield from _parsers(sub, f"{name} {verb}")


def _groups(p: argparse.ArgumentParser) -> Iterator[argparse._SubParsersAction]:
    return (a for a in p._actions if isinstance(a, argparse._SubParsersAction))


PARSERS = dict(_parsers(parser()))


def test_the_walk_finds_every_command():
    assert {"patton aim run", "patton hw prove", "patton rtl coverage", "patton workload sharegpt",
            "patton runtime scenario", "patton serve", "patton demo", "patton repro",
            "patton cost"} <= set(PARSERS)


@pytest.mark.parametrize("name", [n for n, p in PARSERS.items() if any(_groups(p))])
def test_every_command_has_a_one_line_help_of_its_own(name):
    for group in _groups(PARSERS[name]):
        helps = {a.dest: a.help for a in group._choices_actions}
        assert set(helps) == set(group.choices), name  # every sub-command has a help
        for verb, text in helps.items():
            assert text and "\n" not in text and len(text) < 100, f"{name} {verb}: {text!r}"
        assert len(set(helps.values())) == len(helps), f"{name}: two commands, one help"


def test_hw_and_rtl_say_which_is_which():
    helps = {a.dest: a.help for g in _groups(PARSERS["patton"]) for a in g._choices_actions}
    assert "Verilog" in helps["hw"] and "proofs" in helps["hw"]
    assert "Verilator" in helps["rtl"] and "trace" in helps["rtl"]


@pytest.mark.parametrize("name", list(PARSERS))
def test_help_is_plain_text(name):
    p = PARSERS[name]
    texts = [p.description or "", p.epilog or "", p.format_help()]
    texts += [a.help or "" for a in p._actions]
    texts += [c.help or "" for g in _groups(p) for c in g._choices_actions]
    for text in texts:
        assert "``" not in text and ":func:" not in text and ":mod:" not in text, \
            f"{name}: {text[:200]!r}"
    if name != "patton":  # the top's description is the package's, not a docstring's
        assert p.description, f"{name} has no description"


def _options_with_values() -> Iterator[tuple[str, argparse.Action]]:
    for name, p in PARSERS.items():
        for action in p._actions:
            if not isinstance(action, argparse._SubParsersAction | argparse._HelpAction):
                yield f"{name} {'/'.join(action.option_strings) or action.dest}", action


def test_option_values_are_spelled_with_hyphens():
    """Every option with a set of values takes them through :class:`Choice` (none through
    argparse's own ``choices``), and none of its values has an underscore."""
    typed = 0
    for where, action in _options_with_values():
        assert action.choices is None, f"{where}: choices= instead of options.choice"
        if isinstance(action.type, Choice):
            typed += 1
            assert not [c for c in action.type.choices if "_" in c], where
            assert action.default is None or not isinstance(action.default, str) \
                or action.default in action.type.choices, f"{where}: default {action.default}"
    assert typed >= 20  # --timing, --device-ext, --frontend, --standby, ... on every command


def test_the_other_spelling_is_taken_with_a_note(capsys):
    checked = set()
    for where, action in _options_with_values():
        if not isinstance(action.type, Choice):
            continue
        for name, spelled in zip(action.type.names, action.type.choices, strict=True):
            assert action.type(spelled) == name and capsys.readouterr().err == ""
            if name != spelled:
                assert action.type(name) == name, where
                assert capsys.readouterr().err == f"note: {name} is spelled {spelled}\n"
                checked.add(where.split(" --")[-1])
    assert {"frontend", "standby", "what-if"} <= checked
    with pytest.raises(argparse.ArgumentTypeError, match="choose from 'shared', 'per-channel'"):
        Choice(("shared", "per_channel"))("per-chan")


@pytest.mark.parametrize("argv, dest", [
    (["aim", "run", "t.trace", "--frontend", "per_channel"], "frontend"),
    (["aim", "run", "t.trace", "--standby", "per_channel"], "standby"),
    (["cost", "--frontend", "per_channel"], "frontend"),
    (["cost", "--standby", "per_channel"], "standby"),
    (["repro", "fig7", "--frontend", "per_channel"], "frontend"),
])
def test_every_command_takes_both_spellings_as_one_value(argv, dest, capsys):
    hyphens = [a.replace("per_channel", "per-channel") for a in argv]
    assert getattr(parser().parse_args(hyphens), dest) == "per_channel"
    assert capsys.readouterr().err == ""
    assert getattr(parser().parse_args(argv), dest) == "per_channel"
    assert capsys.readouterr().err == "note: per_channel is spelled per-channel\n"


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == \
        f"patton {importlib.metadata.version('patton-testbench')}\n"


@pytest.mark.parametrize("name", [n for n, p in PARSERS.items() if any(_groups(p))])
def test_a_command_without_its_sub_command_prints_its_help(name, capsys):
    """Exit 0 and the help on stdout (nothing on stderr), not "arguments are required"."""
    assert main(name.split()[1:]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"usage: {name} ") and captured.err == ""
    assert "commands:" in captured.out and "COMMAND" in captured.out
    for verb in next(_groups(PARSERS[name])).choices:
        assert f"    {verb} " in captured.out


@pytest.mark.parametrize("alone", [repro_cli.main, serve_cli.main])
def test_a_command_run_alone_prints_its_help_too(alone, capsys):
    assert alone([]) == 0
    assert capsys.readouterr().out.startswith("usage: patton ")


def test_the_demo_keeps_each_devices_files_apart(tmp_path, monkeypatch, capsys):
    """The default ``--out`` is ``build/demo/<device>``: a model run leaves the RTL run's
    chat.json and cycles.png as they were."""
    monkeypatch.chdir(tmp_path)
    rtl = tmp_path / "build" / "demo" / "rtl"
    rtl.mkdir(parents=True)
    (rtl / "chat.json").write_text('{"device": "rtl"}\n')
    assert main(["demo", "--device", "model", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    model = tmp_path / "build" / "demo" / "model"
    assert json.loads((model / "chat.json").read_text())["device"] == "model"
    assert (model / "cycles.png").is_file() and "build/demo/model/chat.json" in out
    assert (rtl / "chat.json").read_text() == '{"device": "rtl"}\n'
    assert sorted(p.name for p in rtl.iterdir()) == ["chat.json"]
    assert not (tmp_path / "build" / "demo" / "chat.json").exists()


class _NoSimulator(Exception):
    pass


def _demo_on_rtl(monkeypatch, pending: str | None) -> str:
    """``patton demo``'s stderr up to the RTL's start, which fails here (no simulator is
    built: the build is faked as ``pending`` says)."""
    import patton.tb.executor

    def no_simulator(*args, **kwargs):
        raise _NoSimulator("not built in this test")

    monkeypatch.setattr(builds, "pending_build", lambda *a, **k: pending)
    monkeypatch.setattr(toolchain, "record_build_seconds", lambda kind, seconds: None)
    monkeypatch.setattr(patton.tb.executor, "RtlExecutor", no_simulator)
    return no_simulator


def test_a_cached_build_says_nothing_and_a_new_one_names_the_real_root(tmp_path, monkeypatch,
                                                                       capfd):
    for pending in (None, "new"):
        _demo_on_rtl(monkeypatch, pending)
        assert main(["demo", "--steps", "1", "--out", str(tmp_path)]) == 2
        err = capfd.readouterr().err
        assert "not built in this test" in err
        said = [line for line in err.splitlines() if line.startswith("building")]
        if pending is None:
            assert said == []
        else:
            assert said == [f"building the RTL channel (rows 64) under {native.BUILD_ROOT}: "
                            f"a Verilator build, {toolchain.estimate('channel')}, "
                            f"log: {tmp_path / 'build.log'}"]


def test_a_build_keeps_saying_it_runs_while_its_output_goes_to_a_log(tmp_path, monkeypatch,
                                                                     capfd):
    """The heartbeat reaches the terminal's stderr from inside ``quiet`` (which sends file
    descriptors 1 and 2 to the log); the build's time is kept and estimates the next one."""
    monkeypatch.setattr(native, "BUILD_ROOT", tmp_path / "root")
    monkeypatch.setattr(builds, "HEARTBEAT_SECONDS", 0.05)
    log = tmp_path / "build.log"
    assert toolchain.last_build_seconds("channel") is None
    typical = f"about {toolchain.TYPICAL_SECONDS['channel']:.0f} s on 2 CPUs"
    assert toolchain.estimate("channel") == typical
    with builds.announce("new", "the RTL channel (rows 64)", log), quiet(log):
        os.write(2, b"%Warning: verilator\n")
        time.sleep(0.3)
    err = capfd.readouterr().err.splitlines()
    assert err[0] == (f"building the RTL channel (rows 64) under {tmp_path / 'root'}: a "
                      f"Verilator build, {typical}, log: {log}")
    assert len(err) >= 3 and all(
        line.startswith("building the RTL channel (rows 64): ")
        and line.endswith(f" s ({typical}), log: {log}") for line in err[1:])
    assert log.read_text() == "%Warning: verilator\n"
    seconds = toolchain.last_build_seconds("channel")
    assert seconds is not None and 0.2 < seconds < 5
    assert (tmp_path / "root" / "verilator" / "build-seconds.json").is_file()
    assert toolchain.estimate("channel") == f"the last build took {seconds:.0f} s"
    with builds.announce(None, "the RTL channel (rows 64)", log), quiet(log):
        time.sleep(0.2)
    assert capfd.readouterr().err == ""  # cached: nothing said, no heartbeat


def test_a_failed_build_keeps_the_last_measured_time(tmp_path, monkeypatch, capfd):
    monkeypatch.setattr(native, "BUILD_ROOT", tmp_path)
    with pytest.raises(RuntimeError), builds.announce("new", "the RTL channel", None):
        raise RuntimeError("make failed")
    assert toolchain.last_build_seconds("channel") is None
    assert capfd.readouterr().err.startswith(f"building the RTL channel under {tmp_path}: ")


def test_serve_says_the_device_size_once(capsys):
    serve_cli._print({
        "runtime": "patton", "capacity": {"bytes": 16 * 2**30, "crs_rows": None,
                                          "layer_rows": None, "blocks": 10, "tokens": 160},
        "params": {"num_blocks_default": True, "num_blocks": 10, "max_model_len": 8192},
        "requests": 1, "steps": 1, "complete": True, "wall_seconds": 0.1, "passed_over": 0,
        "hit_rate": 0.0, "cached_tokens": 0, "prompt_tokens": 1, "recomputed_tokens": 0,
        "preemptions": 0, "live_context_tokens": {"mean": 1.0, "max": 1}})
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("runtime     patton on the AiM device (16 GiB): ")
    assert first.count("GiB") == 1


def test_the_row_message_names_the_build_estimate():
    from patton.sim.isa import Instruction, Opcode
    from patton.tb.prepare import RowsError, check_trace_rows

    ins = Instruction(Opcode.WR_SBK, gpr0=0, channel_mask=1, bank=0, row=100, col=0)
    with pytest.raises(RowsError, match=f"Verilator build the first time: "
                                        f"{toolchain.estimate('channel')}"):
        check_trace_rows([ins], 64, "t.trace")
