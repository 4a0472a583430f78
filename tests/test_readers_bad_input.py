"""Bad trace and schedule files (``tests/data/bad/{trace,schedule}/``) get exactly the error
each one is listed with: the readers' own type, ``file:line: reason``, structured fields."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from patton.sim import schedule, trace
from patton.sim.textfile import ReadError

BAD = Path(__file__).resolve().parent / "data" / "bad"
LEADING = "has a leading zero: write {} (a leading 0 reads as octal in C, so it is refused " \
          "rather than guessed)"
COMMENT = " (a '#' starts a comment: nothing after it is a field)"

#: file -> (line, reason)
TRACES = {
    "latin1.trace": (2, "not UTF-8 text"),
    "utf16.trace": (1, "not UTF-8 text"),
    "utf16le-no-bom.trace": (1, "not UTF-8 text (a NUL byte: UTF-16 or binary data?)"),
    "binary.trace": (2, "not UTF-8 text"),
    "hex-underscore.trace":
        (1, "channel_mask '0xC000_0000' is not a decimal or 0x-hex number (no '_' separators)"),
    "decimal-underscore.trace":
        (1, "opsize '1_0' is not a decimal or 0x-hex number (no '_' separators)"),
    "plus-sign.trace": (2, "opsize '+8' is not a decimal or 0x-hex number (no sign)"),
    "fullwidth-digits.trace": (1, "non-ASCII character '８' (U+FF18) outside a comment"),
    "leading-zero.trace": (1, "row '010' " + LEADING.format(10)),
    "octal-prefix.trace": (1, "row '0o17' is not a decimal or 0x-hex number"),
    "negative.trace": (1, "row '-7' is negative"),
    "gpr-too-large.trace": (1, "gpr 99999999999999999999 is too large (at most 2147483647)"),
    "data-word-signed.trace":
        (1, "data='+1:0:0:0:0:0:0:0:0:0:0:0:0:0:0:0': words must be hex separated by ':'"),
    "non-ascii-field.trace": (2, "non-ASCII character '\\xa0' (U+00A0) outside a comment"),
    "comment-hides-field.trace":
        (1, "AiM MAC_ABK takes 3 field(s) (opsize, channel_mask, row), got 2" + COMMENT),
    "repeated-col.trace": (1, "col= given twice (fields 6 and 7)"),
    "repeated-data.trace": (1, "data= given twice (fields 6 and 7)"),
    "no-eoc.trace": (2, "trace ends without AiM EOC"),
    "after-eoc.trace": (2, "instruction after AiM EOC (line 1)"),
}
SCHEDULES = {
    "latin1.schedule": (2, "not UTF-8 text"),
    "utf16.schedule": (1, "not UTF-8 text"),
    "binary.schedule": (2, "not UTF-8 text"),
    "hex-underscore.schedule":
        (1, "cycle '0x1_0' is not a decimal or 0x-hex number (no '_' separators)"),
    "decimal-underscore.schedule":
        (1, "cycle '1_0' is not a decimal or 0x-hex number (no '_' separators)"),
    "plus-sign.schedule": (1, "channel '+0' is not a decimal or 0x-hex number (no sign)"),
    "fullwidth-digits.schedule": (1, "non-ASCII character '１' (U+FF11) outside a comment"),
    "leading-zero.schedule": (1, "row '010' " + LEADING.format(10)),
    "leading-zero-src.schedule": (1, "src='07' " + LEADING.format(7)),
    "octal-prefix.schedule": (1, "row '0o17' is not a number (decimal, 0x-hex or '-')"),
    "empty.schedule": (2, "schedule is empty (no command lines)"),
    "zero-bytes.schedule": (1, "schedule is empty (no command lines)"),
    "out-of-order.schedule":
        (3, "cycle 40 is before cycle 45 of line 2: a schedule is in cycle order"),
    "act16-without-row.schedule": (1, "ACT16 opens a row; row must be given, not '-'"),
    "act-without-row.schedule": (1, "ACT opens a row; row must be given, not '-'"),
    "mac16-without-column.schedule":
        (2, "MAC16 addresses a column; col must be given, not '-'"),
    "comment-hides-field.schedule":
        (1, "expected 'cycle channel command [bank row col] [key=value ...]', got 5 "
            "positional fields" + COMMENT),
    "cycle-too-large.schedule": (1, "cycle 99999999999999999999 is too large (below 2^63)"),
    "non-ascii-field.schedule": (1, "non-ASCII character '١' (U+0661) outside a comment"),
}


#: ``patton aim run --reference`` files (``tests/data/bad/reference/``) -> (line, reason)
REFERENCES = {
    "not-json.json": (2, "not JSON: Expecting property name enclosed in double quotes at "
                         "column 30"),
    "not-an-object.json":
        (None, "a reference is a JSON object keyed by trace name, each entry an object"),
    "unknown-field.json":
        (None, ("entry 'probe_misc': fields ['cycles']; known: memory_system_cycles, "
                "command_counts, bank_state_cycles, schedule")),
    "latin1.json": (1, "not UTF-8 text"),
    # the public simulator's own statistics output (read by suffix)
    "no-cycles.yaml": (None, "no memory_system_cycles: not the public simulator's statistics "
                             "output"),
    "negative-count.yaml": (3, "CH0_num_ACT_commands: '-3' is not a non-negative integer"),
    "twice.yaml": (4, "CH0_idle_cycles given twice (lines 3 and 4)"),
    "repeated-key.json": (None, "key 'probe_misc' given twice in one object"),
    "long-number.yaml": (2, "memory_system_cycles: an integer of 5,000 digits (at most 30)"),
}


def _expect(error: ReadError, path: Path, line: int | None, reason: str) -> None:
    where = f"{path}:{line}" if line is not None else str(path)
    assert str(error) == f"{where}: {reason}"
    assert (error.file, error.line, error.reason) == (str(path), line, reason)
    assert error.source == str(path)
    assert json.loads(json.dumps(error.to_json())) == {"error": reason, "file": str(path),
                                                      "line": line}


def test_every_bad_file_is_listed():
    assert sorted(p.name for p in (BAD / "trace").iterdir()) == sorted(TRACES)
    assert sorted(p.name for p in (BAD / "schedule").iterdir()) == sorted(SCHEDULES)
    assert sorted(p.name for p in (BAD / "reference").iterdir()) == sorted(REFERENCES)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_bad_reference(name, capsys):
    from patton.sim.reference import ReferenceFileError
    from patton.sim.reference import read as _reference

    from patton.cli import main

    path = BAD / "reference" / name
    with pytest.raises(ReferenceFileError) as err:
        _reference(str(path), "tests/data/aim/probe_misc.trace")
    _expect(err.value, path, *REFERENCES[name])
    probe = str(Path(__file__).resolve().parent / "data" / "aim" / "probe_misc.trace")
    assert main(["aim", "run", probe, "--reference", str(path), "--json"]) == 2
    captured = capsys.readouterr()
    assert json.loads(captured.out) == err.value.to_json()
    assert captured.err == f"error: {err.value}\n"


@pytest.mark.parametrize("name", sorted(TRACES))
def test_bad_trace(name):
    path = BAD / "trace" / name
    with pytest.raises(trace.TraceError) as err:
        trace.read(path)
    _expect(err.value, path, *TRACES[name])


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_bad_schedule(name):
    path = BAD / "schedule" / name
    with pytest.raises(schedule.ScheduleError) as err:
        schedule.read(path)
    _expect(err.value, path, *SCHEDULES[name])


@pytest.mark.parametrize("module,error,what", [(trace, trace.TraceError, "trace"),
                                               (schedule, schedule.ScheduleError, "schedule")])
def test_paths_that_cannot_be_read_or_written(module, error, what, tmp_path):
    with pytest.raises(error) as err:
        module.read(tmp_path)
    _expect(err.value, tmp_path, None, f"cannot read {what}: Is a directory")
    missing = tmp_path / "missing"
    with pytest.raises(error) as err:
        module.read(missing)
    _expect(err.value, missing, None, f"cannot read {what}: No such file or directory")
    with pytest.raises(error) as err:
        module.write(tmp_path, [])
    _expect(err.value, tmp_path, None, f"cannot write {what}: Is a directory")
    with pytest.raises(error) as err:
        module.write(missing / "x", [])
    _expect(err.value, missing / "x", None, f"cannot write {what}: No such file or directory")


def test_bom_crlf_and_inline_comments_are_accepted(tmp_path):
    path = tmp_path / "ok.trace"
    path.write_bytes(b"\xef\xbb\xbfAiM MAC_ABK 0x2 0X80000000 7  # inline, caf\xc3\xa9\r\n"
                     b"W CFR 2 3# no space needed\r\nAiM EOC # done\r\n")
    program = trace.read(path)
    assert [i.opsize for i in program][:1] == [2] and program[0].row == 7
    assert list(program.line) == [1, 2, 3] and program[1].value == 3
    sched = tmp_path / "ok.schedule"
    sched.write_bytes(b"\xef\xbb\xbf# head\n10 0 ACT16 - 0 -  # open row 0\n10 1 TMOD#x=1\n"
                      b"12 0 MAC16 - 0 0x3 src=4 # src=5\n")
    got = schedule.read(sched)
    assert [(c.cycle, c.channel, c.col, c.source, c.line) for c in got] == \
        [(10, 0, -1, -1, 2), (10, 1, -1, -1, 3), (12, 0, 3, 4, 4)]
    # numbers the message promises: decimal (0 alone may lead) and 0x hex with leading zeros
    assert [c.cycle for c in schedule.parse(["0 0 TMOD", "0x0000000a 0 TMOD"])] == [0, 10]


def test_empty_schedule_may_be_allowed(tmp_path):
    path = tmp_path / "empty.schedule"
    path.write_text("# nothing\n")
    assert schedule.read(path, allow_empty=True) == []
    assert list(schedule.parse([])) == []


def test_readers_share_one_error_type_and_number_rule():
    assert issubclass(trace.TraceError, ReadError) and issubclass(schedule.ScheduleError,
                                                                  ReadError)
    for token in ("010", "+8", "1_0", "0xC000_0000", "0o7", "0b1", "1e3", "0x", "８"):
        with pytest.raises(trace.TraceError):
            list(trace.parse([f"AiM MAC_ABK 2 0x80000000 {token}", "AiM EOC"]))
        with pytest.raises(schedule.ScheduleError):
            list(schedule.parse([f"{token} 0 TMOD"]))
