"""The ``patton hw`` commands.

``patton hw verilog [--rows N] [--out DIR] [--timing PROFILE] [--device-ext SET]``
    Write the channel Verilog and the DRAM mat macro into ``DIR`` (default ``build/verilog``):
    its timing checker generated from ``PROFILE``, its decoder for the commands of device
    extension set ``SET`` (default ``aim``: the channel as it always was).
``patton hw prove [--only NAME ...] [--out DIR] [--json] [--device-ext SET]``
    Run the formal proofs (``docs/verification.md``) with SymbiYosys in ``DIR`` (default
    ``build/formal``); exit 1 if any fails. With ``--device-ext`` the timing and protocol
    proofs are those of that set's channel (``protocol+wr16``, ...); the JSON names the set
    when it is not ``aim``.

:func:`add_parser` adds the ``hw`` command to the top-level parser's subcommands.
"""

from __future__ import annotations

import argparse
import json
import sys

from patton.cli import interrupt
from patton.cli.options import (
    add_device_ext_option,
    add_timing_option,
    check_folder,
    commands,
    integer,
)
from patton.sim.extensions import ext_field
from patton.sim.progress import PROGRESS_HELP, Progress

__all__ = ["add_parser"]

#: Default output directory of ``patton hw verilog``.
DEFAULT_OUT = "build/verilog"
#: Default output directory of ``patton hw prove``.
PROVE_OUT = "build/formal"


def add_parser(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``hw`` (with its ``verilog`` verb) to ``subparsers``; return the ``hw`` parser."""
    hw = subparsers.add_parser("hw", help="the RTL channel's hardware: write its Verilog, run "
                                          "its formal proofs",
                               description="The RTL channel's hardware: write its Verilog and "
                                           "the DRAM mat macro, or run its formal proofs with "
                                           "SymbiYosys.")
    verbs = commands(hw, "verb")
    gen = verbs.add_parser("verilog", help="generate the channel Verilog and the mat macro",
                           description="Write the channel Verilog (its timing checker "
                                       "generated from the timing profile, its decoder for "
                                       "the device extension set) and the DRAM mat macro.")
    gen.add_argument("--rows", type=_positive, default=None,
                     help="rows per bank (default: the device's 16384)")
    gen.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                     help=f"output directory (default {DEFAULT_OUT})")
    add_timing_option(gen)
    add_device_ext_option(gen)
    gen.set_defaults(func=_verilog)
    prove = verbs.add_parser("prove", help="run the formal proofs (SymbiYosys)",
                             description="Run the channel's formal proofs with SymbiYosys "
                                         "(docs/verification.md); exit 1 if any fails.")
    prove.add_argument("--only", nargs="+", metavar="NAME", default=None,
                       help="run only these proofs (default: all)")
    prove.add_argument("--out", default=PROVE_OUT, metavar="DIR",
                       help=f"output directory (default {PROVE_OUT})")
    prove.add_argument("--json", action="store_true", help="print the results as JSON")
    prove.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help=PROGRESS_HELP + "; without --json a line per proof on stdout is "
                            "the progress")
    add_device_ext_option(prove)
    prove.set_defaults(func=_prove)
    return hw


_positive = integer(1)


def _verilog(args: argparse.Namespace) -> int:
    from patton.hw.generate import (
        emit_verilog,  # Amaranth loads only when the command runs
    )

    try:
        check_folder(args.out, "--out")
        paths = emit_verilog(args.out, rows=args.rows, timing=args.timing,
                             ext=args.device_ext)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    for path in paths:
        print(path)
    return 0


def _prove(args: argparse.Namespace) -> int:
    from patton.hw.formal.proofs import by_name, proofs  # Amaranth loads only here
    from patton.hw.formal.sby import ToolError

    ext = args.device_ext
    try:
        chosen = proofs(ext) if args.only is None else [by_name(n, ext) for n in args.only]
    except KeyError as error:
        print(f"error: {error.args[0]}", file=sys.stderr)
        return 2
    try:
        check_folder(args.out, "--out")
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    results: list[dict] = []
    running: list[str] = []

    def kept() -> str:
        done = f"{len(results)} proof(s) finished, their folders in {args.out}"
        partial = f"; {running[-1]}'s folder is incomplete" if running else ""
        return f"{done}{partial}; run the command again to prove them all"

    interrupt.keep(kept)
    # a row per proof on stdout shows the progress; --json prints only at the end
    show = args.progress if args.progress is not None or args.json else False
    bar = Progress(len(chosen), "hw prove", "proof", show=show)
    for proof in chosen:
        running[:] = [proof.name]
        try:
            outcome = proof.run(args.out)
        except ToolError as error:
            bar.close()
            print(f"error: {error}", file=sys.stderr)
            return 2
        bar.update()
        results.append({"name": proof.name, "mode": proof.mode, "depth": proof.depth,
                        "status": outcome.status, "seconds": round(outcome.seconds, 1),
                        "config": proof.config, "claim": proof.claim,
                        "trace": str(outcome.trace) if outcome.trace else None,
                        "failed": outcome.failed})
        running.clear()
        if not args.json:
            print(f"{proof.name:24} {proof.mode:5} depth {proof.depth:<3} "
                  f"{outcome.status:5} {outcome.seconds:6.1f} s"
                  + (f"  trace {outcome.trace}" if outcome.trace else ""))
    bar.close()
    if args.json:
        print(json.dumps({"proofs": results,
                          "passed": sum(r["status"] == "PASS" for r in results),
                          "total": len(results), **ext_field(ext)}, indent=2))
    return 0 if all(r["status"] == "PASS" for r in results) else 1
