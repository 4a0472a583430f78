"""``patton repro all --quick --ray ADDRESS`` on a real Ray cluster: a head started here.

The module fixture starts a Ray head on 127.0.0.1 at a free port (two CPUs, a bounded object
store, its own temporary folder, in a process group of its own) and ends exactly that group
afterwards, so no other Ray on the machine is touched. The run's records must equal
``tests/data/repro/quick.json`` wall times aside: the golden that the local run
(``tests/test_repro_pipeline.py``) must equal too, so the cluster's results are the local
ones. Without the ray extra the test is skipped, and fails under CI (``$CI`` set), where
``.ci/run`` installs it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from patton.eval.repro import without_wall_times

pytestmark = pytest.mark.ray

GOLDEN = Path(__file__).resolve().parent / "data" / "repro" / "quick.json"
#: Seconds the head may take to accept connections, and to end once asked.
START_SECONDS, STOP_SECONDS = 60.0, 5.0
#: Seconds the whole quick reproduction may take on the cluster.
RUN_SECONDS = 1800
#: Ray on Linux binds its node to the machine's routable address even when told 127.0.0.1;
#: this switch (Ray's own, for single-machine use) keeps every Ray socket on loopback.
LOOPBACK = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0"}


def _environment(token: str) -> dict[str, str]:
    """The head's and the driver's environment: loopback only, and token authentication
    with one token of this module's own (not whatever ``~/.ray/auth_token`` holds, which a
    local ``ray.init()`` elsewhere may create while this runs)."""
    return {**os.environ, **LOOPBACK, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}


def _free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 (all held open until all are chosen)."""
    held = [socket.socket() for _ in range(n)]
    try:
        for s in held:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in held]
    finally:
        for s in held:
            s.close()


def _ray_command() -> list[str]:
    """The ``ray`` command of this interpreter's installation."""
    beside = Path(sys.executable).with_name("ray")
    found = str(beside) if beside.exists() else shutil.which("ray")
    if found is None:
        pytest.fail("the ray package is importable but its `ray` command is not on PATH")
    return [found]


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def _stop(head: subprocess.Popen) -> None:
    """End the head's process group (everything ``ray start`` started): SIGTERM, then
    SIGKILL for what is left after :data:`STOP_SECONDS`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(head.pid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + STOP_SECONDS
        while time.monotonic() < deadline:
            head.poll()  # reap the head itself, or its group id stays taken
            if not _group_alive(head.pid):
                return
            time.sleep(0.2)


@pytest.fixture(scope="module")
def ray_head() -> Iterator[tuple[str, Path, dict[str, str]]]:
    """A Ray head on 127.0.0.1: its address, its temporary folder and the environment a
    driver connects with."""
    if importlib.util.find_spec("ray") is None:
        if os.environ.get("CI"):
            pytest.fail("CI installs the ray extra (.ci/run): `import ray` must work here",
                        pytrace=False)
        pytest.skip("needs the ray extra: pip install -e '.[ray]'")
    # a short folder: Ray's socket paths live under it (Unix sockets take 107 bytes at most)
    temp = Path(tempfile.mkdtemp(prefix="pray", dir="/tmp"))
    # every port Ray would otherwise take at a fixed default (another Ray here may hold it)
    port, dashboard, agent, agent_grpc, runtime_env, metrics = _free_ports(6)
    log = temp / "ray-start.log"
    env = _environment(secrets.token_hex(32))
    command = [*_ray_command(), "start", "--head", "--block", "--node-ip-address=127.0.0.1",
               f"--port={port}", f"--dashboard-port={dashboard}",
               f"--dashboard-agent-listen-port={agent}",
               f"--dashboard-agent-grpc-port={agent_grpc}",
               f"--runtime-env-agent-port={runtime_env}", f"--metrics-export-port={metrics}",
               "--num-cpus=2",
               "--include-dashboard=false", "--disable-usage-stats",
               "--object-store-memory=300000000", f"--temp-dir={temp}"]
    with log.open("wb") as out:
        head = subprocess.Popen(command, env=env, cwd=temp,
                                stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if head.poll() is not None or time.monotonic() > deadline:
                    pytest.fail(f"the Ray head did not start:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
        yield f"127.0.0.1:{port}", temp, env
    finally:
        _stop(head)
        left = _group_alive(head.pid)
        shutil.rmtree(temp, ignore_errors=True)
        assert not left, f"Ray processes of group {head.pid} outlived SIGKILL"


def test_quick_repro_on_a_ray_cluster_equals_the_local_run(ray_head, tmp_path):
    address, temp, env = ray_head
    out = tmp_path / "repro"
    # a process of its own, as a user runs it: its Ray driver state ends with it
    run = subprocess.run(
        [sys.executable, "-m", "patton.cli", "repro", "all", "--quick", "--ray", address,
         "--json", "--no-progress", "--out", str(out)],
        env=env, capture_output=True, text=True, timeout=RUN_SECONDS,
        stdin=subprocess.DEVNULL)
    assert run.returncode == 0, run.stderr[-5000:]
    records = json.loads(run.stdout)
    assert records == json.loads((out / "repro.json").read_text())
    assert without_wall_times(records) == json.loads(GOLDEN.read_text())
    # the tasks ran in the cluster's worker processes, not in the driver
    workers = list(temp.glob("session_*/logs/worker-*.out"))
    assert len(workers) >= 2, sorted(p.name for p in temp.glob("session_*/logs/*"))
