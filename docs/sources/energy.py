"""``docs/energy.md``'s numbers: the CENT-calculator reference's traces, the PHY charge per
SYNC/EOC (from the energy constants), and the micro trace's energy (the README's records)."""

from __future__ import annotations

from collections.abc import Callable

from patton.sim.energy import CONSTANTS

from sources.common import ROOT, record

#: Stored record name -> its file: every DRAM-side component CENT's calculator computes per
#: trace, which ``tests/test_energy.py`` requires the energy model to equal.
STORED = {"energy-cent-calculator": ROOT / "tests" / "data" / "aim"
          / "energy-cent-calculator.json"}


def _traces(cent: bool | None = None) -> Callable[[], str]:
    """How many traces the calculator's reference holds (CENT's, the public ones, or all)."""
    return lambda: str(sum(cent is None or name.startswith("cent_") == cent
                           for name in record("energy-cent-calculator")))


def _phy(times: int, digits: int) -> Callable[[], str]:
    """The controller PHY's charge for ``times`` commands on one channel, in nJ."""
    one = CONSTANTS.ctrl_phy_mw / CONSTANTS.channels_per_ctrl / CONSTANTS.freq_ghz / 1000
    return lambda: f"{times * one:.{digits}f} nJ"


#: Number name -> how it is made.
NUMBERS: dict[str, Callable[[], str]] = {
    "energy.calc.public": _traces(False),
    "energy.calc.cent": _traces(True),
    "energy.calc.traces": _traces(),
    "energy.calc.public_other": lambda: str(int(_traces(False)()) - 1),
    "energy.phy.one": _phy(1, 4),
    "energy.phy.two": _phy(2, 2),
    "energy.phy.six": _phy(6, 3),
}
