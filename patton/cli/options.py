"""Command-line option types: integers checked by the parser, with one syntax everywhere.

Every integer option of the ``patton`` command is parsed by :func:`integer`: decimal only (the
syntax of :func:`patton.sim.textfile.decimal`: ASCII digits, no sign, no ``_``, no leading
zero) and within stated bounds, so a bad value is a usage error (exit 2) naming the option's
rule, never a traceback from deep inside a run; :func:`fraction` does the same for shares.
:func:`add_timing_option` adds the one ``--timing`` option, :func:`add_strict_option` the one
``--strict``, and :func:`read_trace` reads a trace under it, printing its notes.

Option values are spelled with hyphens on the command line (``per-channel``, ``wo-cz-write``),
as every other name the command takes is (``llama3-8b``, ``aimsim-0f28a07``); records and JSON
keep the code's names (``per_channel``). :func:`choice` is the argparse type of every option
with a fixed set of values: it returns the code's name and accepts the other spelling with a
note on stderr. :func:`commands` adds a command's sub-commands, printed as its help when none
is given.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import numpy as np

from patton.sim import trace
from patton.sim.extensions import DEFAULT_EXT, EXTENSIONS, NotOnDeviceError, device_ext
from patton.sim.program import OP_ID, OPCODES, Program
from patton.sim.schedule import check_writable
from patton.sim.textfile import ReadError, decimal
from patton.sim.timing import DEFAULT_PROFILE, PROFILES
from patton.sim.trace import TraceNote

__all__ = ["check_folder", "check_file", "integer", "fraction", "SEED", "CLIENTS", "POOL",
           "BLOCKS", "BLOCK_SIZE", "MODEL_LEN", "TOKENS", "STEPS", "COUNT", "SKIP",
           "add_timing_option", "add_strict_option", "read_trace", "SHOW_NOTES", "Choice",
           "choice", "spelled", "commands", "assumption", "plain"]


def spelled(name: str) -> str:
    """``name`` (an option value as the code names it) as the command line spells it: with
    hyphens (``per_channel`` -> ``per-channel``)."""
    return name.replace("_", "-")


class Choice:
    """The argparse type of an option with a fixed set of values (made by :func:`choice`).

    It takes a value as the command line spells it (:func:`spelled`) and returns it as the
    code names it (``per-channel`` -> ``per_channel``); the code's own spelling is accepted
    too, with ``note: per_channel is spelled per-channel`` on stderr. Anything else is a usage
    error (exit 2) listing the values. :attr:`choices` are the command line's spellings.
    """

    def __init__(self, values: Iterable[str]) -> None:
        self.names = tuple(values)
        self.choices = tuple(spelled(v) for v in self.names)
        self._by_spelling = dict(zip(self.choices, self.names, strict=True))
        self.__name__ = "choice"  # argparse names the type in some messages

    @property
    def metavar(self) -> str:
        """The values in braces, as argparse shows an option's choices."""
        return "{" + ",".join(self.choices) + "}"

    def __call__(self, text: str) -> str:
        if text in self._by_spelling:
            return self._by_spelling[text]
        other = spelled(text)
        if text not in self.choices and other in self._by_spelling:
            print(f"note: {text} is spelled {other}", file=sys.stderr)
            return self._by_spelling[other]
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(map(repr, self.choices))})")


def choice(values: Iterable[str]) -> Choice:
    """The argparse type of an option whose value is one of ``values`` (the code's names);
    pass ``metavar=`` (or the type's :attr:`Choice.metavar`) and a ``default`` spelled as
    the command line spells it."""
    return Choice(values)


def plain(text: str) -> str:
    """``text`` (a docstring's paragraph) as ``--help`` prints it: without reST markup
    (``:mod:`x``` -> ``x``, double backquotes dropped)."""
    return re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text).replace("``", "")


def assumption(axes: Mapping[str, Iterable[str]]) -> Callable[[str], str]:
    """The argparse type of ``--assume AXIS=VALUE``: ``axes`` maps each axis to its values
    (the code's names). Returns ``axis=value`` in the code's names; the axis and the value
    are each read as :class:`Choice` reads a value (the other spelling with a note)."""
    names = Choice(axes)
    values = {axis: Choice(known) for axis, known in axes.items()}

    def parse(text: str) -> str:
        name, sep, value = text.partition("=")
        if not sep or not name or not value:
            raise argparse.ArgumentTypeError(f"takes AXIS=VALUE, got {text!r}")
        try:
            axis = names(name)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"unknown axis {name!r} in {text!r} (choose from "
                f"{', '.join(map(repr, names.choices))})") from None
        try:
            return f"{axis}={values[axis](value)}"
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{spelled(axis)}: invalid value {value!r} (choose from "
                f"{', '.join(map(repr, values[axis].choices))})") from None

    parse.__name__ = "AXIS=VALUE"
    return parse


def commands(parser: argparse.ArgumentParser, dest: str) -> argparse._SubParsersAction:
    """Add ``parser``'s sub-commands (stored in ``dest``); without one, the command prints
    its help on stdout and exits 0 (as ``cargo`` does), not a usage error."""
    def show_help(args: argparse.Namespace) -> int:
        parser.print_help()
        return 0

    parser.set_defaults(func=show_help)
    return parser.add_subparsers(dest=dest, metavar="COMMAND", title="commands")


def integer(low: int, high: int | None = None) -> Callable[[str], int]:
    """Return an argparse type for decimal integers in ``low .. high`` (``high`` None: no
    upper bound)."""
    span = f"{low}..{high}" if high is not None else f">= {low}"

    def parse(text: str) -> int:
        try:
            value = decimal(text, "value")
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{e} (expected a decimal integer {span})") from None
        if value < low or (high is not None and value > high):
            raise argparse.ArgumentTypeError(f"must be {span}, got {text}")
        return value

    parse.__name__ = f"integer {span}"  # argparse names the type in its messages
    return parse


def fraction(text: str) -> float:
    """Argparse type for a share: a decimal number from 0 to 1 (``0.5``, ``1``, ``.25``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}") from None
    if not 0.0 <= value <= 1.0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be from 0 to 1, got {text}")
    return value


fraction.__name__ = "share 0..1"


#: A seed: any decimal integer from 0 (NumPy's generators refuse negative seeds).
SEED = integer(0)

# The serving options' bounds: what the embedded engine's Python structures can hold on a
# machine of a few GiB (a block costs a few hundred bytes of pool state; a client or a live
# conversation some kilobytes), far above any configuration the paper or vLLM uses. A value
# past them is refused by the parser, naming the option, before anything is allocated.
#: Closed-loop clients (``--clients``) and running requests (``--max-num-seqs``).
CLIENTS = integer(1, 4096)
#: Live conversations (``--pool``).
POOL = integer(1, 65_536)
#: KV blocks (``--num-blocks``, the null block included: at least 2).
BLOCKS = integer(2, 1 << 20)
#: Tokens per KV block (``--block-size``).
BLOCK_SIZE = integer(1, 1024)
#: Tokens: ``--max-model-len`` (at least 2: a prompt token and an output),
#: ``--max-batched-tokens``, ``--max-message-tokens``.
MODEL_LEN = integer(2, 1 << 20)
TOKENS = integer(1, 1 << 20)
#: Scheduler steps of a serving run.
STEPS = integer(1, 10**9)
#: Conversations of a workload file (``--count``; ``--skip`` from 0).
COUNT = integer(1, 10**7)
SKIP = integer(0, 10**7)


def add_timing_option(sub: argparse.ArgumentParser) -> None:
    """Add ``--timing PROFILE`` (one of :data:`patton.sim.timing.PROFILES`) to ``sub``.

    An unknown name is a usage error (exit 2) that lists the profiles.
    """
    sub.add_argument("--timing", type=choice(PROFILES), default=DEFAULT_PROFILE,
                     metavar="PROFILE",
                     help="timing rules of the public AiM simulator at one commit: "
                          + " or ".join(PROFILES) + f" (default {DEFAULT_PROFILE})")


def add_device_ext_option(sub: argparse.ArgumentParser) -> None:
    """Add ``--device-ext SET`` (one of :data:`patton.sim.extensions.EXTENSIONS`) to ``sub``.

    An unknown name is a usage error (exit 2) that lists the sets.
    """
    sub.add_argument("--device-ext", type=choice(EXTENSIONS), default=DEFAULT_EXT,
                     metavar="SET",
                     help="device extension set: " + " or ".join(EXTENSIONS)
                          + f" (default {DEFAULT_EXT}, AiM as the public simulator has it; "
                          "docs/extensions.md)")


def add_strict_option(sub: argparse.ArgumentParser) -> None:
    """Add ``--strict``: refuse what the public AiM simulator accepts but a 64-column row
    cannot hold (:func:`patton.sim.trace.validate`)."""
    sub.add_argument("--strict", action="store_true",
                     help="refuse column instructions whose columns run past the row or the "
                          "global buffer (default: accept them as the public simulator "
                          "does, with a warning)")


#: Trace notes printed one per line; the rest are counted (``--json`` lists every one).
SHOW_NOTES = 10


def read_trace(path: str, strict: bool, quiet: bool = False, ext: str = DEFAULT_EXT
               ) -> tuple[Program, list[str]]:
    """Read a trace for a command (``strict`` as ``--strict``) on a device of extension set
    ``ext``; return it and its notes.

    Unless ``quiet`` (``--json``, where the notes go into the report), each note is printed
    to stderr as ``warning: file:line: reason``, the first :data:`SHOW_NOTES` of them.

    Raises:
        TraceError: as :func:`patton.sim.trace.read`, or the first instruction of an extension
            the device lacks.
    """
    notes: list[TraceNote] = []
    program = trace.read(path, strict=strict, notes=notes)
    device = device_ext(ext)
    lacking = [OP_ID[op] for op in device.lacking]
    found = np.flatnonzero(np.isin(np.asarray(program.op), lacking))
    if len(found):
        i = int(found[0])
        line = None if program.line is None else int(np.asarray(program.line)[i])
        try:
            device.refuse(OPCODES[int(program.op[i])])
        except NotOnDeviceError as e:
            raise trace.TraceError(str(path), line, str(e)) from None
    if not quiet:
        for note in notes[:SHOW_NOTES]:
            print(f"warning: {note}", file=sys.stderr)
        if len(notes) > SHOW_NOTES:
            print(f"warning: ... {len(notes) - SHOW_NOTES} more such lines (--json lists "
                  "every one)", file=sys.stderr)
    return program, [str(n) for n in notes]


def check_folder(folder: str | Path, option: str) -> Path:
    """Make sure ``folder`` (an output option's value) is a folder this process can write
    into, creating it if missing; return it. Commands call it before any work starts.

    Raises:
        ValueError: ``"<option> <folder>: exists and is not a folder"`` or ``"... cannot
            write there: <reason>"``.
    """
    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise ValueError(f"{option} {out}: exists and is not a folder")
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".probe-", delete=True):
            pass
    except OSError as e:
        raise ValueError(f"{option} {out}: cannot write there: {e.strerror or e}") from None
    return out


def check_file(path: str | Path, option: str) -> Path:
    """Make sure ``path`` (an output file option's value) can be written: its folder as
    :func:`check_folder` makes sure (creating it if missing), the file as
    :func:`patton.sim.schedule.check_writable` does; return it. Commands call it before any
    work starts.

    Raises:
        ValueError: ``"<option> <path>: cannot write it: Is a directory"`` (and the other
            reasons of ``check_writable``), or as :func:`check_folder` for its folder.
    """
    out = Path(path)
    check_folder(out.parent, f"{option} {out}: its folder")
    try:
        check_writable(out, "it")
    except ReadError as error:
        raise ValueError(f"{option} {out}: {error.reason}") from None
    return out
