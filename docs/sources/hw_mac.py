"""``docs/hw-mac.md``'s numbers: the Verilog each unit converts to (lines, a quick record) and
how long ``MacUnit``'s conversion takes (timed)."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Quick, Timed, record

#: Converts each unit to Verilog (``emit_src=False``); prints its lines (and with ``TIMED``
#: set, the seconds) per unit, JSON.
_VERILOG = """
import json, time
from amaranth.back import verilog
from patton.hw.mac import Bf16Readout, BiasLoad, MacUnit
out = {}
for name, unit in (("mac_unit", MacUnit), ("bf16_readout", Bf16Readout), ("bias_load", BiasLoad)):
    started = time.perf_counter()
    text = verilog.convert(unit(), name=name, emit_src=False)
    out[name] = {"lines": text.count(chr(10))}
    if TIMED:
        out[name]["seconds"] = time.perf_counter() - started
print(json.dumps(out))
"""

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {"hw-mac-verilog": Quick(["-c", "TIMED = False" + _VERILOG])}

#: Timed record name -> how it is made.
TIMED: dict[str, Timed] = {"hw-mac-verilog-timed": Timed(["-c", "TIMED = True" + _VERILOG])}


def _lines(unit: str) -> Callable[[], str]:
    """The lines of Verilog ``unit`` converts to."""
    return lambda: f"{record('hw-mac-verilog')[unit]['lines']:,}"


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "hw-mac.verilog.mac_unit": _lines("mac_unit"),
    "hw-mac.verilog.bf16_readout": _lines("bf16_readout"),
    "hw-mac.verilog.bias_load": _lines("bias_load"),
    "hw-mac.verilog.seconds": lambda: (
        f"{record('hw-mac-verilog-timed')['mac_unit']['seconds']:.1f} s"),
}
