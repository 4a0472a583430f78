"""``docs/isa.md``'s numbers: a wide EWMUL's cycles (the cycle model, at once) and the time
writing the public micro trace's schedule takes (timed)."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Timed, record

#: Times ``schedule.write`` on the schedule of ``micro_macab_1024_16banks.trace``; prints JSON.
_WRITE = """
import json, time
from patton.sim import schedule, trace
from patton.sim.cycle_model import CycleModel
run = CycleModel(record=True).run(trace.read("tests/data/aim/micro_macab_1024_16banks.trace"))
started = time.perf_counter()
schedule.write("build/records/isa-micro_macab.schedule", run.schedule)
print(json.dumps({"commands": len(run.schedule), "write_seconds": time.perf_counter() - started}))
"""

#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {
    "isa-schedule-write": Timed(["-c", _WRITE]),
}


def _wide_ewmul() -> str:
    """The cycles of ``AiM EWMUL 256`` alone (``tests/test_cent_traces.py`` requires four
    ``AiM EWMUL 64`` to take as many)."""
    from patton.sim import trace
    from patton.sim.cycle_model import CycleModel

    run = CycleModel().run(trace.parse(["AiM EWMUL 256 0x80000000 387", "AiM EOC"]))
    return str(run.cycles)


#: Number name -> how it is made from the code and the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "isa.wide_ewmul.cycles": _wide_ewmul,
    "isa.schedule.commands": lambda: f"{record('isa-schedule-write')['commands'] / 1e6:.2f} M",
    "isa.schedule.seconds": lambda: f"{record('isa-schedule-write')['write_seconds']:.1f} s",
}
