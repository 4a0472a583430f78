"""The package as a wheel installs it: every data file the code reads is package data, and a
wheel built from the checkout runs ``patton aim run`` and ``patton demo`` from its own files.

The slow test builds the wheel from the files git has (tracked, or new and not ignored), so
it sees what a clone would build, installs it without dependencies into a fresh virtual
environment that sees this interpreter's packages (the dependencies are installed here), and
checks first that ``patton`` is imported from that wheel and not from this checkout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from fnmatch import fnmatchcase
from pathlib import Path, PurePosixPath

import pytest
from patton.sim import native

ROOT = Path(__file__).resolve().parents[1]
#: The folders of the packages that hold files other than Python modules.
DATA_FOLDERS = ("sim", "serving", "tb", "eval", "hw")
#: The example trace the wheel runs, and the cycles the public simulator reports for it.
EXAMPLE = "micro_macab_1024_16banks"
#: Seconds one step of the slow test (a build, an install, a run) may take.
STEP_SECONDS = 600


def _git_files(*folders: str) -> list[str]:
    """The files under ``folders`` that a commit of this tree would hold: tracked, or new
    and not ignored."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                          "--", *folders], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    return sorted({f for f in out.splitlines() if (ROOT / f).is_file()})


def _setuptools() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def _package_dirs(config: dict) -> dict[str, PurePosixPath]:
    """Each listed package's folder in the checkout (``package-dir``, then its parents')."""
    mapping = config["package-dir"]
    dirs = {}
    for package in config["packages"]:
        parts = package.split(".")
        for cut in range(len(parts), 0, -1):
            base = ".".join(parts[:cut])
            if base in mapping:
                dirs[package] = PurePosixPath(mapping[base], *parts[cut:])
                break
        else:
            dirs[package] = PurePosixPath(*parts)
    return dirs


def _matches(relative: PurePosixPath, pattern: str) -> bool:
    """setuptools' package-data glob: ``*`` within one path segment."""
    want = PurePosixPath(pattern).parts
    return len(want) == len(relative.parts) and all(
        fnmatchcase(p, w) for p, w in zip(relative.parts, want, strict=True))


def unshipped(files: list[str], config: dict) -> list[str]:
    """The non-Python ``files`` that no package-data glob of their package matches."""
    dirs = _package_dirs(config)
    data = config.get("package-data", {})
    missing = []
    for name in files:
        path = PurePosixPath(name)
        if path.suffix == ".py":
            continue
        owners = [(p, d) for p, d in dirs.items() if d in path.parents]
        if not owners:
            missing.append(f"{name} (in no package)")
            continue
        package, folder = max(owners, key=lambda pd: len(pd[1].parts))
        relative = path.relative_to(folder)
        if not any(_matches(relative, g) for g in data.get(package, [])):
            missing.append(f"{name} ({package})")
    return missing


def test_every_data_file_is_package_data():
    files = _git_files(*DATA_FOLDERS)
    assert "sim/native/cycle_kernel.c" in files and "tb/player.v" in files
    assert unshipped(files, _setuptools()) == []


def test_the_guard_names_a_file_no_glob_matches():
    config = _setuptools()
    assert unshipped(["sim/native/new_kernel.cu", "sim/data/examples/x.json",
                      "tb/fst_headers/lz4/deeper/x.h", "sim/isa.py"], config) == [
        "sim/native/new_kernel.cu (patton.sim)", "sim/data/examples/x.json (patton.sim)",
        "tb/fst_headers/lz4/deeper/x.h (patton.tb)"]


def test_build_root_is_the_checkouts_build_then_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.delenv("PATTON_BUILD", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert native._build_root() == ROOT / "build"
    installed = tmp_path / "site-packages" / "patton" / "sim" / "native.py"
    monkeypatch.setattr(native, "__file__", str(installed))
    assert native._build_root() == tmp_path / "cache" / "patton"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # not absolute: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert native._build_root() == tmp_path / "home" / ".cache" / "patton"
    monkeypatch.setenv("PATTON_BUILD", str(tmp_path / "mine"))
    assert native._build_root() == tmp_path / "mine"


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=STEP_SECONDS,
                          stdin=subprocess.DEVNULL, **kwargs)
    assert done.returncode == 0, (f"{' '.join(command)}: exit {done.returncode}\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


@pytest.mark.slow
def test_the_wheel_runs_from_its_own_files(tmp_path):
    source = tmp_path / "source"
    for name in ["pyproject.toml", "README.md", *_git_files(
            "patton", "runtime", *DATA_FOLDERS)]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / name, source / name)
    dist = tmp_path / "dist"
    # build isolation, as a user's `pip wheel .`: the build requirements come from the index
    _run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w",
          str(dist)], cwd=tmp_path)
    wheel, = dist.glob("patton_testbench-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        shipped = set(archive.namelist())
    dirs = {str(d): p.replace(".", "/") for p, d in _package_dirs(_setuptools()).items()}
    for name in _git_files(*DATA_FOLDERS):  # every data file, where the package has it
        folder = max((d for d in dirs if name.startswith(d + "/")), key=len)
        assert dirs[folder] + name[len(folder):] in shipped, name
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)])
    python = venv / "bin" / "python"
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)])
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PATTON_BUILD")}
    env |= {"PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "PYTHONDONTWRITEBYTECODE": "1"}
    # patton from the wheel (not this checkout, which the interpreter's site also offers)
    where = json.loads(_run([str(python), "-c", (
        "import json, patton.sim.native as n, patton.tb.player as p, patton.cli as c\n"
        "from importlib.resources import files\n"
        "print(json.dumps([n.__file__, p.__file__, c.__file__, str(n.BUILD_ROOT),"
        " str(files('patton.sim') / 'data/examples')]))")], cwd=work, env=env).stdout)
    site = venv.resolve()
    for module in where[:3]:
        assert Path(module).resolve().is_relative_to(site), where
    assert Path(where[3]) == tmp_path / "cache" / "patton"  # outside a checkout: the cache
    examples = Path(where[4])
    assert examples.resolve().is_relative_to(site)
    assert (examples / "README.md").is_file()

    # the C kernel compiled from the wheel's sources into the user cache, run on the example
    trace = examples / f"{EXAMPLE}.trace"
    report = json.loads(_run(["patton", "aim", "run", str(trace), "--json"], cwd=work,
                             env=env).stdout)
    reference = json.loads((ROOT / "tests" / "data" / "aim" / "reference.json").read_text())
    assert report["cycles"] == reference[EXAMPLE]["memory_system_cycles"]
    assert list((tmp_path / "cache" / "patton" / "native").glob("cycle_kernel-*.so"))
    assert not list(site.rglob("cycle_kernel-*.so"))  # nothing built inside the install

    # the chat demo on the models, its build under $PATTON_BUILD
    build = tmp_path / "build"
    demo = _run(["patton", "demo", "--device", "model", "--steps", "12", "--json", "--out",
                 str(tmp_path / "demo")], cwd=work, env=env | {"PATTON_BUILD": str(build)})
    figures = json.loads(demo.stdout)
    assert figures["steps"] == 12 and figures["checks"] == 12 and figures["cycles"] > 0
    assert figures["mismatches"] == figures["violations"] == 0 and not figures["failures"]
    assert list((build / "native").glob("cycle_kernel-*.so"))
    assert (tmp_path / "demo" / "chat.json").is_file()
