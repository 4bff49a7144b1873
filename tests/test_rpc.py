"""Remote measurement through TVM's own RPC tracker and servers, all on 127.0.0.1.

The tests share one tracker and two servers (TVM's ``rpc_tracker`` and ``rpc_server``
commands as subprocesses, :class:`LoopbackDevices`); a server a test kills is restarted for
the next one, and all of them are killed at the end.
"""

from __future__ import annotations

import socket
import threading

import numpy as np
import psutil
import pytest

from tune_gym.measure import BACKENDS, make_backend
from tune_gym.measure.rpc import LoopbackDevices, RPCBackend, TrackerError
from tune_gym.session import TuningSession
from tune_gym.space import KnobSpace
from tune_gym.tasks import Task

KEY = "tune-gym-test"
FAST = {"repeat": 2, "min_repeat_ms": 10}


@pytest.fixture(scope="module")
def task():
    return Task.parse("resnet18:8")


@pytest.fixture(scope="module")
def space(task):
    return KnobSpace.for_task(task, "compact")


@pytest.fixture(scope="module")
def loopback():
    """A tracker and two servers on loopback ports; no process of theirs is left after."""
    with LoopbackDevices(servers=2, key=KEY) as devices:
        yield devices
        family = _family([devices.tracker.pid, *(p.pid for p in devices.servers)])
    alive = [p for p in family if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"RPC processes left running: {alive}"


@pytest.fixture
def cluster(loopback):
    """The loopback devices with every server running, registered and free."""
    loopback.revive()
    return loopback


def _family(pids: list[int]) -> list[psutil.Process]:
    out = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            out += [proc, *proc.children(recursive=True)]
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.heavy
def test_tune_through_two_devices(cluster, task, space, monkeypatch):
    assert "rpc" in BACKENDS
    configs = space.sample_unique(np.random.default_rng(0), 4)
    backend = make_backend("rpc", tracker=cluster.address, key=KEY, **FAST)
    try:
        with TuningSession(task, space, backend, budget=4) as session:
            ev = session.evaluate(configs)
        results = [o.result for o in ev.outcomes]
        assert all(r.ok for r in results), [r.error_msg for r in results]
        assert all(len(r.costs) == 2 and min(r.costs) > 0 and r.run_secs > 0 for r in results)
        assert {r.extra["rpc_device"] for r in results} == {0, 1}  # one queue, both devices took some
        assert any(r.extra.get("checked") for r in results)  # the first kernel was compared with PyTorch

        with pytest.raises(TrackerError, match=f"no server with key 'other'.*{KEY}"):
            RPCBackend(tracker=cluster.address, key="other")

        # An error that leaves the session alive is the config's own run_error; the device goes on.
        from tune_gym.measure import workers

        real, calls = workers.measure_kernel, []

        def failing(lib, dev, job, cache=None):
            calls.append(job["path"])
            if len(calls) == 1:
                raise RuntimeError("injected kernel failure")
            return real(lib, dev, job, cache)

        monkeypatch.setattr(workers, "measure_kernel", failing)
        backend.config.devices = 1
        more = space.sample_unique(np.random.default_rng(1), 3)
        results = backend.measure(task, space, more)
        assert [r.error for r in results].count("run_error") == 1
        assert sum(r.ok for r in results) == 2 and "injected" in next(r.error_msg for r in results if not r.ok)

        # A run past run_timeout is a timeout naming its device, which is dropped; nothing hangs.
        monkeypatch.setattr(workers, "measure_kernel", real)
        backend.config.run_timeout = 0.001
        results = backend.measure(task, space, more)
        assert results[0].error == "timeout" and "device 0" in results[0].error_msg
        assert all(r.error == "rpc_error" and "no device" in r.error_msg for r in results[1:])
    finally:
        backend.close()


@pytest.mark.heavy
def test_server_killed_mid_run(cluster, task, space):
    configs = space.sample_unique(np.random.default_rng(2), 6)
    calls: list[tuple[int, int]] = []
    victim: dict[str, int] = {}

    lock = threading.Lock()  # hooks run in the devices' threads

    def kill_on_first_result(device, index, result):
        with lock:
            calls.append((device.index, index))
            if not victim:  # kill this device's server: the config it takes next is in flight then
                victim["device"], server = device.index, cluster.server_of(device.session)
                assert server is not None
                cluster.kill_server(server)

    with RPCBackend(tracker=cluster.address, key=KEY, on_result=kill_on_first_result, **FAST) as backend:
        results = backend.measure(task, space, configs)
        failed = [i for i, r in enumerate(results) if not r.ok]
        assert len(failed) == 1, [(r.error, r.error_msg) for r in results]
        lost = results[failed[0]]
        assert lost.error == "rpc_error"
        assert f"device {victim['device']} (key '{KEY}'" in lost.error_msg and "lost" in lost.error_msg
        other = 1 - victim["device"]
        assert all(device == other for device, _ in calls[1:])  # the rest ran on the other device
        assert sum(r.ok for r in results) == 5

        # With no device left the rest of a batch is marked, and the call returns.
        victim.clear()
        calls.clear()
        results = backend.measure(task, space, configs)
        assert len(calls) == 1 and results[calls[0][1]].ok
        assert [r.error for r in results].count("rpc_error") == 5
        assert any("no device of key" in r.error_msg for r in results)


def test_bad_tracker_address_is_named():
    with socket.socket() as sock:  # a free port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(TrackerError, match=f"127.0.0.1:{port}"):
        make_backend("rpc", tracker=f"127.0.0.1:{port}", key=KEY)
    with pytest.raises(TrackerError, match="host:port"):
        RPCBackend(tracker="127.0.0.1", key=KEY)

