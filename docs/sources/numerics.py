"""``docs/numerics.md``'s measured numbers: the MAC datapath's dot-product errors and AF16's
errors against float64 (``benchmarks/datapath_accuracy.py``, a quick record)."""

from __future__ import annotations

import math
from collections.abc import Callable

from patton.sim.datapath import AF_FUNCTIONS

from sources.common import Quick, record

_ACCURACY = "numerics-datapath-accuracy"

#: Quick record name -> the command (run from the repository's root) whose JSON output it is.
RECORDS: dict[str, Quick] = {
    _ACCURACY: Quick(["benchmarks/datapath_accuracy.py", "--json"]),
}

#: The AF16 functions as the page names them (the record's names otherwise).
_AF_NAMES = {"relu": "ReLU", "leaky_relu": "leaky ReLU", "gelu": "GELU", "silu": "SiLU"}


def _up(value: float) -> str:
    """``value`` rounded up to two significant figures, in the page's notation (``3.5e-8``):
    the text says "within" or "up to", which a rounded-down figure would not keep true."""
    if value == 0:
        return "0"
    exponent = math.floor(math.log10(value))
    mantissa = math.ceil(round(value / 10.0 ** exponent * 10, 9)) / 10
    if mantissa >= 10:
        mantissa, exponent = mantissa / 10, exponent + 1
    return f"{mantissa:.1f}e{exponent}"


def _dot(dist: str | None = None, upto: int | None = None) -> list[dict]:
    """The dot-product cases of one distribution (or all), lengths up to ``upto`` (or all)."""
    dots = record(_ACCURACY)["dot"]
    return [case for d, per in dots.items() if dist in (None, d)
            for k, case in per.items() if upto is None or int(k) <= upto]


def _dot_max(dist: str | None = None, upto: int | None = None) -> Callable[[], str]:
    """The largest relative error over the cases (:func:`_dot`)."""
    return lambda: _up(max(c["max_rel_error"] for c in _dot(dist, upto)))


def _dot_argmax(dist: str) -> Callable[[], str]:
    """The length ``K`` at which ``dist``'s largest error occurs."""
    def made() -> str:
        per = record(_ACCURACY)["dot"][dist]
        return str(int(max(per, key=lambda k: per[k]["max_rel_error"])))
    return made


def _af_max(key: str) -> float:
    """AF16's largest error ``key`` over every built-in function."""
    return max(e[key] for e in record(_ACCURACY)["af"].values())


def _af_exact() -> str:
    """The AF16 functions whose tables are exact on every input measured, by AFM."""
    af = record(_ACCURACY)["af"]
    exact = [_AF_NAMES.get(spec.name, spec.name) for _, spec in sorted(AF_FUNCTIONS.items())
             if af[spec.name]["max_ulps"] == af[spec.name]["max_abs_small"] == 0]
    return " and ".join([", ".join(exact[:-1]), exact[-1]] if len(exact) > 1 else exact)


#: Number name -> how it is made from the records.
NUMBERS: dict[str, Callable[[], str]] = {
    "numerics.mac.trials": lambda: str(record(_ACCURACY)["trials"]),
    "numerics.mac.normal.max_rel_error": _dot_max("normal"),
    "numerics.mac.positive.max_rel_error": _dot_max("positive"),
    "numerics.mac.positive.max_k": _dot_argmax("positive"),
    "numerics.mac.lognormal.max_rel_error": _dot_max("lognormal"),
    "numerics.mac.max_rel_error": _dot_max(),
    "numerics.mac.max_rel_error.k4096": _dot_max(upto=4096),
    "numerics.af.max_ulps": lambda: f"{math.ceil(10 * _af_max('max_ulps')) / 10:.1f}",
    "numerics.af.max_abs_small": lambda: _up(_af_max("max_abs_small")),
    "numerics.af.exact": _af_exact,
}
