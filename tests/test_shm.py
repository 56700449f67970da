"""Shared-memory arenas are tracked only by their owner: a process that maps one and exits leaves
it in place (Python >= 3.13: track=False; before: unregistered from the tracker), and the arenas of
a killed owner are removed at the next start."""
import multiprocessing
import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

import triforce.offload.tier as tier_mod
from triforce.offload.tier import HostTier, owned_prefix, remove_dead_segments

REPO = Path(__file__).resolve().parents[1]


def _attach_and_exit(prefix: str) -> None:
    tensor, arena = HostTier.attach(prefix, "w", (16,), torch.float32)
    assert float(tensor.sum()) == 16.0
    # exits normally: its resource tracker must not unlink the owner's arena


def test_a_process_that_maps_an_arena_and_exits_leaves_it_to_its_owner():
    tier = HostTier(torch.device("cpu"))
    tier.allocate("w", (16,), torch.float32).fill_(1.0)
    proc = multiprocessing.get_context("spawn").Process(target=_attach_and_exit, args=(tier.prefix,))
    proc.start()
    proc.join(60)
    assert proc.exitcode == 0
    assert os.path.exists(f"/dev/shm/{tier.prefix}-w"), "the attaching process's exit deleted the owner's arena"
    tensor, arena = HostTier.attach(tier.prefix, "w", (16,), torch.float32)
    assert float(tensor.sum()) == 16.0
    del tensor
    arena.close()
    tier.close()
    assert not os.path.exists(f"/dev/shm/{tier.prefix}-w")


@pytest.mark.parametrize("version", [(3, 11, 7), (3, 13, 0), (3, 14, 0)])
def test_attach_never_leaves_the_segment_tracked(monkeypatch, version):
    """The attach path per Python version: 3.13+ opens with track=False, older ones unregister."""
    calls, unregistered = [], []

    class FakeSegment:
        def __init__(self, name, create=False, size=0, **kwargs):
            calls.append(kwargs)
            self._name, self.name = f"/{name}", name

    monkeypatch.setattr(tier_mod, "sys", types.SimpleNamespace(version_info=version))
    monkeypatch.setattr(tier_mod.shared_memory, "SharedMemory", FakeSegment)
    monkeypatch.setattr(tier_mod.resource_tracker, "unregister", lambda name, kind: unregistered.append(name))
    tier_mod.open_segment("triforce-1-x")
    if version >= (3, 13):
        assert calls == [{"track": False}] and unregistered == []
    else:
        assert calls == [{}] and unregistered == ["/triforce-1-x"]


def test_arenas_are_named_by_their_owner_pid():
    assert owned_prefix("abc") == f"triforce-pid{os.getpid()}-abc"
    tier = HostTier(torch.device("cpu"))
    assert tier.prefix.startswith(f"triforce-pid{os.getpid()}-")
    tier.close()
    # names of other shapes (older versions, other tools) are never taken for a dead owner's
    assert [tier_mod._owner_pid(n) for n in ("triforce-123456789012-x", "triforce-pid99999999999-x",
                                             "triforce-abc-x", "other-pid12-x", "triforce-pid12-x")] == \
        [None, None, None, None, 12]


def test_a_killed_owners_arenas_are_removed_at_the_next_start():
    code = ("import os, signal, torch; from offload.tier import HostTier; t = HostTier(torch.device('cpu')); "
            "t.allocate('kv', (1024,), torch.float32); print(t.prefix, flush=True); os.killpg(0, signal.SIGKILL)")
    # killpg: the owner and its resource tracker die together, as under ray.kill or the OOM killer
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL
    dead = f"{proc.stdout.strip()}-kv"
    assert os.path.exists(f"/dev/shm/{dead}"), "the killed owner's arena should have leaked"
    mine = HostTier(torch.device("cpu"))
    mine.allocate("live", (8,), torch.float32)
    removed = remove_dead_segments()
    assert dead in removed and not os.path.exists(f"/dev/shm/{dead}")
    assert os.path.exists(f"/dev/shm/{mine.prefix}-live")   # a live owner's arena stays
    mine.close()
