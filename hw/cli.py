"""The ``patton hw`` commands.

``patton hw verilog [--rows N] [--out DIR]``
    Write the channel Verilog and the DRAM mat macro into ``DIR`` (default ``build/verilog``).

:func:`add_parser` adds the ``hw`` command to the top-level parser's subcommands.
"""

from __future__ import annotations

import argparse

from patton.options import integer
import sys

__all__ = ["add_parser"]

#: Default output directory of ``patton hw verilog``.
DEFAULT_OUT = "build/verilog"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hw`` (with its ``verilog`` verb) to ``subparsers``; return the ``hw`` parser."""
    hw = subparsers.add_parser("hw", help="the RTL channel")
    verbs = hw.add_subparsers(dest="verb", required=True)
    gen = verbs.add_parser("verilog", help="generate the channel Verilog and the mat macro")
    gen.add_argument("--rows", type=_positive, default=None,
                     help="rows per bank (default: the device's 16384)")
    gen.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                     help=f"output directory (default {DEFAULT_OUT})")
    gen.set_defaults(func=_verilog)
    return hw


_positive = integer(1)


def _verilog(args: argparse.Namespace) -> int:
    from patton.hw.generate import (
        emit_verilog,  # Amaranth loads only when the command runs
    )

    try:
        paths = emit_verilog(args.out, rows=args.rows)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0
