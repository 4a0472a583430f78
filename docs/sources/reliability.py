"""``docs/reliability.md``'s numbers: how soon each command stops after SIGINT and SIGTERM
(``benchmarks/interrupt_latency.py``, timed)."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Timed, record

#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {
    "reliability-interrupts": Timed(["benchmarks/interrupt_latency.py", "--json"]),
}


def _interrupts() -> str:
    """The table of seconds from the signal to the exit, per command and signal."""
    runs = record("reliability-interrupts")
    lines = ["| command | SIGINT | SIGTERM |", "|---|---|---|",
             *(f"| `{name}` | " + " | ".join(f"{run[sig]['seconds']:.2f} s"
                                             for sig in ("SIGINT", "SIGTERM")) + " |"
               for name, run in runs.items())]
    return "\n".join(lines)


#: Block name -> how it is made from the records.
BLOCKS: dict[str, Callable[[], str]] = {"reliability.interrupts": _interrupts}
