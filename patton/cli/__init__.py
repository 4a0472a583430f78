"""The ``patton`` command.

``patton aim run TRACE [--json] [--schedule OUT] [--readouts FILE] [--reference REF] ...``
    Run the cycle model on a trace (the public AiM simulator's format or ours) and report
    cycles, per-channel command counts and energy. ``--schedule`` writes the timed command
    schedule with the data it carries (the trace's payloads, lane masks, CFR state and the
    instruction each command came from; ``patton.sim.schedule``). ``--readouts`` writes the
    values read (``patton.sim.readouts``: JSON or NPY). ``--reference`` compares the run with the
    public simulator's results for the trace and exits 1 on a difference. Output paths are
    checked before the run, and written before anything is printed.
``patton aim check SCHEDULE [--json] [--progress] [--timing PROFILE]``
    List every timing, bus and protocol violation in a timed schedule; exit 1 if there is any.

``--timing`` picks the public simulator's GDDR6 timing rules: ``aimsim-0f28a07`` (its head, the
default) or ``aimsim-2eb1ee0`` (the commit CENT pins; ``docs/timing-profiles.md``). The JSON
output names the profile used (``"timing"``).
``patton runtime scenario [--model M] [--requests N] [--steps N] [--seed S] [--json]``
    Run a PATTON serving scenario on the functional and cycle models.
``patton rtl run TRACE [--rows N] [--seed S] [--waves FILE] [--readouts FILE] [--json] [-v]``
    Run a trace on the RTL channel under Verilator and score it against the models.
``patton rtl check SCHEDULE [--rows N] [--json] [-v]``
    Replay a timed schedule on the RTL; compare its checker's verdict with the model's.
``patton hw verilog [--rows N] [--out DIR]``
    Write the RTL channel's Verilog and the DRAM mat macro.
``patton demo [--device rtl|model] [--channels N] [--steps N] [--waves STEP] [--json]``
    Serve a multi-turn chat through the PATTON runtime on four live RTL channels (one KV head
    of Llama-3-8B; ``--channels 32``: its 8 heads on 32) or the models, checking every step
    (``patton.cli.demo``).
``patton repro fig7|fig8|fig9|micro|all [--quick] [--out DIR] [--workers N] [--json] [--ray A]``
    Reproduce the paper's evaluation side by side with its numbers (``patton.eval``,
    ``docs/evaluation.md``).
``patton cost [--model M] [--runtime R] [--steps N] [--json] ...``
    The cost of one serving run (``patton.cli.cost``, ``docs/run-cost.md``).

^C or SIGTERM stops any command with one line on stderr (``interrupted: ...``: what was kept
and how to continue) and exit status 130 (:mod:`patton.cli.interrupt`, ``docs/reliability.md``).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import signal
import sys
from collections.abc import Sequence

from patton.cli import aim, cost, demo, hw, interrupt, repro, rtl, runtime, serve
from patton.cli.options import commands
from patton.sim.native import KernelError
from patton.sim.textfile import ReadError

#: The top parser's description (plain text: ``--help`` prints it as written).
DESCRIPTION = ("The PATTON testbench: the AiM device's cycle and functional models, its RTL "
               "channel under Verilator, the PATTON serving runtime on them, and the paper's "
               "evaluation.")


def version() -> str:
    """This installation's version (the ``patton-testbench`` distribution's)."""
    try:
        return importlib.metadata.version("patton-testbench")
    except importlib.metadata.PackageNotFoundError:  # run from a tree that is not installed
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    """Return the command-line parser."""
    top = argparse.ArgumentParser(prog="patton", description=DESCRIPTION,
                                  epilog="patton COMMAND --help lists a command's options. "
                                         "Documentation: docs/ in the source tree.")
    top.add_argument("--version", action="version", version=f"patton {version()}")
    sub = commands(top, "part")
    aim.add_parser(sub)
    hw.add_parser(sub)
    runtime.add_parser(sub)
    serve.add_parsers(sub)  # patton workload ..., patton serve
    rtl.add_parser(sub)
    demo.add_parser(sub)
    repro.add_parser(sub)  # patton repro ...
    cost.add_parser(sub)
    return top


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    args = parser().parse_args(argv)
    with interrupt.handling() as interrupted:
        return _run(args)
    return interrupted[0]  # ^C or SIGTERM: reported by interrupt.handling


def _run(args: argparse.Namespace) -> int:
    """Run the parsed command; report the errors every command shares."""
    try:
        return args.func(args)
    except KernelError as error:  # the compiled cycle model could not be built or failed
        print(f"error: {error}", file=sys.stderr)
        if getattr(args, "json", False):
            json.dump({"error": str(error), "file": None, "line": None}, sys.stdout)
            sys.stdout.write("\n")
        return 2
    except ReadError as error:  # a trace, schedule or conversation file (file:line: reason)
        print(f"error: {error}", file=sys.stderr)
        if getattr(args, "json", False):
            json.dump(error.to_json(), sys.stdout)
            sys.stdout.write("\n")
        return 2
    except BrokenPipeError:  # the reader of our output went away (``| head``): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the exit's flush does not fail again
        os.close(devnull)
        return 128 + signal.SIGPIPE  # what a process that SIGPIPE ended reports


if __name__ == "__main__":
    sys.exit(main())
