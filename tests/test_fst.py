"""FST waveforms on a machine without the LZ4 / zlib development packages (tb/fst.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from patton.tb import fst
from patton.tb.toolchain import BUILD_ROOT


@pytest.fixture
def bare_machine(monkeypatch):
    """Pretend no header is installed and no ``lib*.so`` link name exists (a fresh machine)."""
    monkeypatch.setattr(fst, "_INCLUDE_DIRS", ())
    monkeypatch.setattr(fst, "_LIB_DIRS", ())


def test_bare_machine_gets_our_headers_and_link_names(bare_machine):
    args = fst.build_args()
    cflags = args[args.index("-CFLAGS") + 1].split()
    assert cflags == [f"-I{Path(fst.__file__).parent / 'fst_headers' / lib.name}"
                      for lib in fst.LIBRARIES]
    assert args[args.index("-LDFLAGS") + 1] == f"-L{BUILD_ROOT / 'fst-libs'}"
    for lib in fst.LIBRARIES:
        link = BUILD_ROOT / "fst-libs" / f"lib{lib.name}.so"
        assert link.is_symlink() and link.resolve().exists()
        assert (Path(fst.__file__).parent / "fst_headers" / lib.name / lib.header).exists()


def test_missing_library_is_a_clear_error(bare_machine, monkeypatch):
    monkeypatch.setattr(fst, "_ldconfig", lambda: {})
    with pytest.raises(RuntimeError, match=r"liblz4\.so\.N.*liblz4-dev.*\.vcd"):
        fst.build_args()


@pytest.mark.verilator
def test_fst_waves_build_and_record_on_a_bare_machine(bare_machine, capsys, tmp_path,
                                                     traces_dir):
    from patton.cli import main

    out = tmp_path / "gemv.fst"
    assert main(["rtl", "run", str(traces_dir / "probe_gemv.trace"), "--waves", str(out)]) == 0
    capsys.readouterr()
    raw = out.read_bytes()
    # FST header block: type 0, section length 329, start and end time, then the
    # endianness test value e as a double in the writer's byte order.
    kind, length, start, end = struct.unpack(">BQQQ", raw[:25])
    assert (kind, length, start) == (0, 329, 0) and end > 0
    assert struct.unpack("<d", raw[25:33])[0] == pytest.approx(2.718281828459045)
    assert len(raw) > 1000
