"""The bank MAC datapath against float64: dot-product errors and AF16's error per function.

Dot products (``docs/numerics.md`` section 4): per distribution and length ``K``, ``--trials``
random dot products of ``K`` bfloat16 pairs accumulated by :func:`patton.sim.datapath.accumulate`
(``K / 16`` MAC commands from a zero binary32 accumulator), each compared with the exact sum of
the same bfloat16 products in float64; the error is divided by ``sum |a_i b_i|``. The inputs
are those of ``tests/test_datapath.py::test_dot_products_are_within_the_stated_float64_tolerance``
(the same distributions, the generator seeded with ``K``), at the test's lengths and 16,384.
The error bound the page derives, ``K / 16 * 2**-23``, is reported beside each maximum.

AF16: every normal bfloat16 input in ``(-8 + 1/32, 8 - 1/32)`` through each built-in table
(:data:`patton.sim.datapath.AF_FUNCTIONS`), against the function in float64: the largest error
in bfloat16 ulps of the exact value where ``|f| > 2**-6``, and the largest absolute error
elsewhere (as ``tests/test_datapath.py::test_activation_accuracy_inside_the_domain`` has them).

    python benchmarks/datapath_accuracy.py [--trials 64] [--json]
"""

from __future__ import annotations

import argparse
import json

import numpy as np
from patton.sim import datapath as dp

LANES = 16
#: The dot products' lengths: ``tests/test_datapath.py``'s, and a longer one.
LENGTHS = (16, 128, 1024, 4096, 16384)
#: The operand distributions (``tests/test_datapath.py``'s ``operands``).
DISTRIBUTIONS = ("normal", "positive", "lognormal")
#: AF16's inputs: every normal bfloat16 with ``|x|`` below this (the outermost segments are
#: the tails).
AF_LIMIT = 8.0 - 2.0 ** -5
#: Where AF16's error is counted in ulps of the exact value (``|f|`` above) or absolute.
AF_SMALL = 2.0 ** -6


def _sig(value: float) -> float:
    """``value`` to six significant figures (a last-bit difference of a float64 library
    function does not show)."""
    return float(f"{value:.6g}")


def operands(dist: str, rng: np.random.Generator,
             shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Two float64 operand arrays of ``shape``, drawn as ``tests/test_datapath.py`` does."""
    if dist == "normal":
        return rng.standard_normal(shape), rng.standard_normal(shape) * 3.0 + 0.5
    if dist == "positive":
        return rng.random(shape), rng.random(shape)
    signs = rng.choice([-1.0, 1.0], shape)
    return rng.lognormal(0.0, 4.0, shape) * signs, rng.standard_normal(shape)


def dot_errors(dist: str, k: int, trials: int) -> dict[str, float]:
    """The largest relative error of ``trials`` dot products of length ``k``, and its bound."""
    rng = np.random.default_rng(k)
    steps = k // LANES
    x, y = operands(dist, rng, (trials, steps, LANES))
    a, b = dp.to_bf16(x), dp.to_bf16(y)
    acc = dp.accumulate(np.zeros(trials, np.uint32), a, b)
    prod = dp.from_bf16(a) * dp.from_bf16(b)  # exact in float64
    err = np.abs(dp.from_fp32(acc) - prod.sum(axis=(1, 2))) / np.abs(prod).sum(axis=(1, 2))
    return {"max_rel_error": _sig(err.max()), "bound": steps * 2.0 ** -23}


def ulp16(f: np.ndarray) -> np.ndarray:
    """One bfloat16 ulp of each value (of the smallest normal's at zero)."""
    return 2.0 ** (np.floor(np.log2(np.maximum(np.abs(f), 2.0 ** -126))) - 7)


def af_errors() -> dict[str, dict[str, float]]:
    """Per built-in function: AF16's largest error in ulps where ``|f| > AF_SMALL``, and the
    largest absolute error where ``|f| <= AF_SMALL``."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    exp = (bits >> 7) & 0xFF
    bits = bits[(exp != 0) & (exp != 0xFF)]
    bits = bits[np.abs(dp.from_bf16(bits)) < AF_LIMIT]
    x = dp.from_bf16(bits)
    out = {}
    for afm, spec in sorted(dp.AF_FUNCTIONS.items()):
        y = dp.from_bf16(dp.af(dp.bias(bits), dp.af_lut(afm)))
        f = np.array([spec.fn(v) for v in x])
        err = np.abs(y - f)
        large = np.abs(f) > AF_SMALL
        out[spec.name] = {"max_ulps": _sig((err[large] / ulp16(f[large])).max()),
                          "max_abs_small": _sig(err[~large].max(initial=0.0))}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=64, help="dot products per case")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    args = ap.parse_args()
    dots = {dist: {str(k): dot_errors(dist, k, args.trials) for k in LENGTHS}
            for dist in DISTRIBUTIONS}
    af = af_errors()
    if args.json:
        print(json.dumps({"trials": args.trials, "dot": dots, "af": af}, indent=1))
        return
    print(f"dot products ({args.trials} per case): max |acc - exact| / sum|a b| (bound)")
    print(f"{'K':>6s} " + " ".join(f"{d:>22s}" for d in DISTRIBUTIONS))
    for k in LENGTHS:
        cells = [dots[d][str(k)] for d in DISTRIBUTIONS]
        print(f"{k:6d} " + " ".join(f"{c['max_rel_error']:10.2e} ({c['bound']:8.2e})"
                                    for c in cells))
    print(f"AF16 on every normal bfloat16 in (-{AF_LIMIT}, {AF_LIMIT}): max ulps where "
          f"|f| > {AF_SMALL}, max absolute error elsewhere")
    for name, e in af.items():
        print(f"{name:11s} {e['max_ulps']:6.3f} ulp  {e['max_abs_small']:.2e}")


if __name__ == "__main__":
    main()
