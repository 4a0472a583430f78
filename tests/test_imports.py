"""The import direction of ``docs/architecture.md``, parsed from the source (not guessed).

Every ``import`` and ``from ... import`` of every module (at module level, inside functions
and under ``TYPE_CHECKING`` alike) is an edge from the importing module to the module it
names. The parts are the folders of the data flow: ``sim`` (the device model), ``runtime``,
``serving``, ``eval``, ``hw``, ``tb`` and the command line ``patton.cli``. The rules:

- ``sim`` imports none of the others;
- ``runtime`` imports ``sim`` only; ``serving`` ``runtime`` and ``sim`` only; ``eval``
  ``serving``, ``runtime`` and ``sim`` only;
- ``hw`` imports only ``sim``'s tables it implements (the ISA, the timing rules, the protocol,
  the device) and the lazy-export helper every package's ``__init__`` uses;
- ``tb`` imports ``hw`` and ``sim`` only;
- nothing imports the command line;
- no two modules import each other, directly or through others.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Folder -> package name (pyproject.toml's package-dir).
PACKAGES = {"patton": "patton", "sim": "patton.sim", "runtime": "patton.runtime",
            "serving": "patton.serving", "eval": "patton.eval", "hw": "patton.hw",
            "tb": "patton.tb"}
#: Part -> the parts it may import.
ALLOWED = {"sim": set(), "runtime": {"sim"}, "serving": {"runtime", "sim"},
           "eval": {"serving", "runtime", "sim"}, "hw": {"sim"}, "tb": {"hw", "sim"},
           "cli": {"sim", "runtime", "serving", "eval", "hw", "tb"}, "patton": set()}
#: The modules of ``sim`` that ``hw`` may import: the tables it implements, and the datapath's
#: activation-function tables (the LUT rows' power-up contents and layout, read when the
#: channel is built: ``docs/hw.md`` decision 12).
HW_SIM = {"patton.sim.isa", "patton.sim.timing", "patton.sim.protocol", "patton.sim.device",
          "patton.sim._exports", "patton.sim.datapath"}


def modules() -> dict[str, Path]:
    """Every module of the packages, by dotted name."""
    out = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT / folder).with_suffix("")
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([package, *parts])] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports (a name imported from a package is
    its submodule when it is one, else the package)."""
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importing module's package
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base
                           for a in node.names]
            else:
                continue
            for t in targets:
                while t and t not in mods:  # a name inside a module: the module
                    t = t.rpartition(".")[0]
                if t and t != name:
                    edges[name].add(t)
    return edges


def part(module: str) -> str:
    """The part of the data flow a module belongs to."""
    bits = module.split(".")
    if len(bits) == 1:
        return "patton"
    return bits[1] if bits[1] != "cli" else "cli"


MODULES = modules()
EDGES = imports(MODULES)


def test_the_parts_import_only_downstream() -> None:
    wrong = sorted(f"{a} -> {b}" for a, bs in EDGES.items() for b in bs
                   if part(b) != part(a) and part(b) not in ALLOWED[part(a)])
    assert wrong == []


def test_hw_imports_only_the_tables_it_implements() -> None:
    wrong = sorted(f"{a} -> {b}" for a, bs in EDGES.items() for b in bs
                   if part(a) == "hw" and part(b) == "sim" and b not in HW_SIM)
    assert wrong == []


def test_nothing_imports_the_command_line() -> None:
    wrong = sorted(f"{a} -> {b}" for a, bs in EDGES.items() for b in bs
                   if part(b) == "cli" and part(a) != "cli")
    assert wrong == []


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in EDGES.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in sorted(MODULES):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_parser_sees_the_modules_and_their_imports() -> None:
    """The checks above can fail: the graph holds what a reader sees in the files."""
    assert {"patton.sim.isa", "patton.serving.driver", "patton.eval.cost",
            "patton.cli.rtl", "patton.tb.player"} <= set(MODULES)
    assert "patton.serving.clients" in EDGES["patton.serving.driver"]
    assert "patton.sim.isa" in EDGES["patton.hw.isa"]
    assert {"patton.eval.cost", "patton.serving.driver"} <= EDGES["patton.eval.cz_bound"] | \
        EDGES["patton.eval.cost"]
    assert part("patton.cli.serve") == "cli" and part("patton.serving.serve") == "serving"


def test_every_package_is_installed() -> None:
    """A non-editable install carries every package: pyproject.toml lists each folder that has
    an ``__init__.py``."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    packages = {name for name, path in MODULES.items() if path.name == "__init__.py"}
    assert packages == listed
