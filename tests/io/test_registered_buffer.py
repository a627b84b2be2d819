"""RegisteredBuffer gives its cuFile registration back however it ends: close(),
a with block, or dropped without either (finding 1 of issue 12), and always
while the memory it registered is still alive. On the CPU, cuFile's two calls
and the driver state are stand-ins that record what they are asked; the GPU
run (test_gpu_io.py) registers real memory."""

from __future__ import annotations

import gc

import pytest

import gdsio
import gdsio.io.registered as gio
from gdsio.io.buffers import Destination
from gdsio.platform import gds


class Memory:
    """Stands for a CUDA tensor: the registration must end before it is freed."""

    def __init__(self, log: list) -> None:
        self.log = log

    def __del__(self) -> None:
        self.log.append("freed")


@pytest.fixture
def cufile(monkeypatch):
    log = []
    count = [0]

    def resolve(out):
        # The array the core is handed: its address stands in for it, and it holds the memory.
        array = (0x7F0000 + 0x1000 * count[0], out)
        count[0] += 1
        return Destination(array=array, nbytes=4096, kind="cuda", device=0, stream=0, owner=out)

    monkeypatch.setattr(gio, "resolve", resolve)
    monkeypatch.setattr(gds, "cufile_state", lambda device: {"driver_open": True, "reason": ""})
    monkeypatch.setattr(gio._core, "cufile_register_buffer", lambda a: (log.append(("register", a[0])), (True, ""))[1])
    monkeypatch.setattr(gio._core, "cufile_deregister_buffer", lambda a: log.append(("deregister", a[0])))
    return log


def test_dropped_without_close_deregisters_while_the_memory_lives(cufile):
    mem = Memory(cufile)
    reg = gdsio.register_buffer(mem)
    del mem
    assert cufile == [("register", 0x7F0000)]  # the registration keeps the memory alive
    del reg
    assert cufile == [("register", 0x7F0000), ("deregister", 0x7F0000), "freed"]


def test_dropped_in_a_reference_cycle_deregisters_once(cufile):
    reg = gdsio.register_buffer(Memory(cufile))
    reg.myself = reg
    del reg
    gc.collect()
    assert cufile == [("register", 0x7F0000), ("deregister", 0x7F0000), "freed"]


def test_close_and_with_deregister_once(cufile):
    reg = gdsio.register_buffer(Memory(cufile))
    reg.close()
    reg.close()
    with gdsio.register_buffer(Memory(cufile)) as r2:
        assert r2.registered
    assert not r2.registered
    del reg, r2
    gc.collect()
    assert cufile == [("register", 0x7F0000), ("deregister", 0x7F0000),
                      ("register", 0x7F1000), ("deregister", 0x7F1000), "freed", "freed"]


def test_a_refused_registration_has_nothing_to_give_back(cufile, monkeypatch):
    monkeypatch.setattr(gio._core, "cufile_register_buffer", lambda a: (False, "cuFileBufRegister refused"))
    reg = gdsio.register_buffer(Memory(cufile))
    assert not reg.registered and reg.reason == "cuFileBufRegister refused"
    del reg
    gc.collect()
    assert cufile == ["freed"]
