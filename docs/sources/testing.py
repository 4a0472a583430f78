"""``docs/testing.md``'s numbers: the mutation scores of the core modules
(``benchmarks/mutation_score.py``, minutes each: timed records)."""

from __future__ import annotations

from collections.abc import Callable

from sources.common import Timed, record

#: Each core module and its own test file, as the mutation table lists them.
MODULES = {"energy": ("sim/energy.py", "tests/test_energy.py"),
           "block_pool": ("serving/block_pool.py", "tests/test_block_pool.py"),
           "allocator": ("runtime/patton/allocator.py", "tests/test_allocator.py"),
           "protocol": ("sim/protocol.py", "tests/test_protocol.py"),
           "datapath": ("sim/datapath.py", "tests/test_datapath.py"),
           "cost_cache": ("sim/cost_cache.py", "tests/test_cost_cache.py")}

#: Timed record name -> how it is made (mutmut's mutants of the module, its tests on each).
TIMED: dict[str, Timed] = {
    f"testing-mutation-{name}": Timed(["benchmarks/mutation_score.py", module, tests, "--json"])
    for name, (module, tests) in MODULES.items()}


def _run(name: str) -> dict:
    return record(f"testing-mutation-{name}")


NUMBERS: dict[str, Callable[[], str]] = {}
for _name in MODULES:
    NUMBERS.update({
        f"testing.mutation.{_name}.mutants": lambda n=_name: str(_run(n)["mutants"]),
        f"testing.mutation.{_name}.killed": lambda n=_name: str(_run(n)["killed"]),
        f"testing.mutation.{_name}.score": lambda n=_name: f"{100 * _run(n)['score']:.1f} %",
    })
#: The rows whose "what survives" cell starts with the count.
for _name in ("protocol", "datapath", "cost_cache"):
    NUMBERS[f"testing.mutation.{_name}.survived"] = lambda n=_name: str(_run(n)["survived"])
