"""One open per file: gdsio.image.read, gdsio.load_npy and the Loader read a
file's header and its body through one descriptor, so a path renamed over
between the two can never mix one file's header with another's data. And
what is not a regular file (a FIFO, a socket, /dev/zero, a directory) is
refused at once, naming the file and what it is."""

from __future__ import annotations

import os
import socket
import threading
import time

import numpy as np
import pytest
import torch

import gdsio
from conftest import in_time
from gdsio import image as gi
from gdsio import tensors
from gdsio.data import decode
from gdsio.image import batch


def _pgm(h, w, fill):
    return b"P5\n%d %d\n255\n" % (w, h) + bytes([fill]) * (h * w)


def _swap_after(monkeypatch, module, name, path, other):
    """After module.name runs (the probe, the header read), `other` is renamed over `path`."""
    real = getattr(module, name)
    swapped = []

    def hooked(*a, **k):
        out = real(*a, **k)
        if not swapped:
            os.replace(other, path)
            swapped.append(True)
        return out

    monkeypatch.setattr(module, name, hooked)
    return swapped


@pytest.mark.parametrize("single", [True, False])
def test_image_read_takes_header_and_body_from_the_file_it_opened(tmp_path, monkeypatch, single):
    path, other = tmp_path / "a.pgm", tmp_path / "b.pgm"
    path.write_bytes(_pgm(4, 6, 10))
    other.write_bytes(_pgm(8, 3, 200))  # another size: mixing would misread or raise "truncated?"
    swapped = _swap_after(monkeypatch, batch, "probe_file", str(path), str(other))
    img = gi.read(str(path) if single else [str(path)], device="cpu")
    img = img if single else img[0]
    assert swapped and path.read_bytes() == _pgm(8, 3, 200)  # the path names the other file now
    assert img.shape == (1, 4, 6) and bool((img == 10).all())  # the file opened, whole


def test_load_npy_takes_header_and_body_from_the_file_it_opened(tmp_path, monkeypatch):
    path, other = tmp_path / "a.npy", tmp_path / "b.npy"
    np.save(path, np.arange(6, dtype=np.int32).reshape(2, 3))
    np.save(other, np.full((3, 2), -1, np.float64))
    swapped = _swap_after(monkeypatch, tensors, "_npy_header", str(path), str(other))
    t = gdsio.load_npy(path, device="cpu")
    assert swapped and np.load(path).dtype == np.float64
    assert t.dtype == torch.int32 and t.tolist() == [[0, 1, 2], [3, 4, 5]]


def test_the_loaders_image_reader_reads_the_file_it_probed(tmp_path, monkeypatch):
    """decode.read_image: what a GPU Loader's reader threads run (probe on the
    host, body into the target's memory); here with the CPU as the target."""
    path, other = tmp_path / "a.pgm", tmp_path / "b.pgm"
    path.write_bytes(_pgm(5, 5, 7))
    other.write_bytes(_pgm(2, 9, 99))
    swapped = _swap_after(monkeypatch, batch, "probe_file", str(path), str(other))
    setup = decode.image_setup("cpu", "UNCHANGED")
    it = decode.read_image(str(path), setup)
    assert swapped and it.file is None  # closed once read
    images, errors, _ = decode.decode_items([it], setup)
    assert not errors and images[0].shape == (1, 5, 5) and bool((images[0] == 7).all())


def test_a_npy_loader_reads_each_sample_from_one_file(tmp_path, monkeypatch):
    d = tmp_path / "ds" / "c0"
    d.mkdir(parents=True)
    for i in range(4):
        np.save(d / f"{i}.npy", np.full((2, 2), i, np.int32))
    np.save(tmp_path / "other.npy", np.full((2, 2), 77, np.int32))
    real, swapped = tensors._npy_header, []

    def hooked(f):  # the header of 2.npy read, then another file renamed over its path
        out = real(f)
        if f.path.endswith("2.npy") and not swapped:
            os.replace(tmp_path / "other.npy", d / "2.npy")
            swapped.append(True)
        return out

    monkeypatch.setattr(tensors, "_npy_header", hooked)
    (x, y), = list(gdsio.Loader(tmp_path / "ds", 4, device="cpu"))
    assert swapped and np.load(d / "2.npy")[0, 0] == 77
    assert sorted(int(s[0, 0]) for s in x) == [0, 1, 2, 3]  # 2.npy as it was opened
    assert all(bool((s == s[0, 0]).all()) for s in x)


def test_a_rename_swap_race_never_mixes_two_images(tmp_path):
    """Two images of different sizes renamed over one path in a loop while it
    is read: every read gives one of them whole, or a missing-file error in
    the instant between renames; never a mix, never "truncated?"."""
    path = tmp_path / "x.pgm"
    a, b = _pgm(16, 24, 1), _pgm(40, 8, 2)
    (tmp_path / "a").write_bytes(a)
    (tmp_path / "b").write_bytes(b)
    path.write_bytes(a)
    stop = threading.Event()

    def swapper():
        k = 0
        while not stop.is_set():
            src = tmp_path / f"t{k % 2}"
            src.write_bytes(a if k % 2 == 0 else b)
            os.replace(src, path)
            k += 1

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    seen, deadline = {"a": 0, "b": 0}, time.monotonic() + 2.0
    try:
        while time.monotonic() < deadline:
            for img in gi.read([str(path)] * 4, device="cpu"):
                if img.shape == (1, 16, 24) and bool((img == 1).all()):
                    seen["a"] += 1
                elif img.shape == (1, 40, 8) and bool((img == 2).all()):
                    seen["b"] += 1
                else:
                    raise AssertionError(f"a mixed read: shape {tuple(img.shape)}, values {img.unique().tolist()}")
    finally:
        stop.set()
        t.join()
    assert seen["a"] + seen["b"] > 0


# --------------------------------------------------------------------------- not regular files



@pytest.fixture
def specials(tmp_path):
    fifo = tmp_path / "pipe.pgm"
    os.mkfifo(fifo)
    sock_path = tmp_path / "sock.npy"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(sock_path))
    (tmp_path / "dir.npy").mkdir()
    yield {
        "fifo": (str(fifo), OSError, r"is a FIFO \(named pipe\), not a regular file"),
        "socket": (str(sock_path), OSError, "is a socket, not a regular file"),
        "/dev/zero": ("/dev/zero", OSError, "is a character device, not a regular file"),
        "directory": (str(tmp_path / "dir.npy"), IsADirectoryError, "is a directory"),
    }
    sock.close()


READERS = {
    "image.read": lambda p: gi.read(p, device="cpu"),
    "image.read list": lambda p: gi.read([p], device="cpu"),
    "load_npy": lambda p: gdsio.load_npy(p, device="cpu"),
    "read_npy_header": lambda p: tensors.read_npy_header(p),
}


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("kind", ["fifo", "socket", "/dev/zero", "directory"])
def test_what_is_not_a_regular_file_is_refused_at_once(specials, reader, kind):
    path, exc, what = specials[kind]
    with pytest.raises(exc, match=what) as e:
        in_time(lambda: READERS[reader](path))
    assert path in str(e.value)


def test_skip_leaves_out_what_is_not_a_regular_file(specials, tmp_path):
    good = tmp_path / "good.pgm"
    good.write_bytes(_pgm(2, 2, 5))
    paths = [str(good)] + [specials[k][0] for k in ("fifo", "socket", "/dev/zero", "directory")] + [str(good)]
    images, failed = in_time(lambda: gi.read(paths, device="cpu", on_error="skip"))
    assert failed == [1, 2, 3, 4] and len(images) == 2


def test_no_file_is_left_open(tmp_path):
    good, bad = tmp_path / "g.pgm", tmp_path / "b.pgm"
    good.write_bytes(_pgm(3, 3, 1))
    bad.write_bytes(b"P5\n3 3\n255\n" + bytes(4))  # truncated
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        gi.read([str(good), str(bad), str(tmp_path / "missing.pgm")], device="cpu", on_error="skip")
        with pytest.raises(ValueError, match="b.pgm"):
            gi.read([str(good), str(bad), str(good)], device="cpu")
    assert len(os.listdir("/proc/self/fd")) <= before


def test_the_o_direct_descriptor_reads_the_file_opened_not_the_path(tmp_path):
    """direct_io opens a second descriptor on first use: it is the file already
    open, reopened, never the path (which may name another file by then)."""
    path, other = tmp_path / "a.bin", tmp_path / "b.bin"
    path.write_bytes(bytes(range(256)) * 64)
    other.write_bytes(b"\xee" * (256 * 64))
    with gdsio.File(path) as f:
        os.replace(other, path)
        with gdsio.settings(direct_io=True):
            t, st = f.read(device="cpu", backend="posix", return_stats=True)
    assert t.numpy().tobytes() == bytes(range(256)) * 64, st


def test_a_warning_made_an_error_leaves_no_file_open(tmp_path):
    p = tmp_path / "w.pgm"
    p.write_bytes(_pgm(10, 20, 3))
    before = len(os.listdir("/proc/self/fd"))
    with gdsio.settings(max_image_pixels=100), pytest.raises(gdsio.DecompressionBombWarning):
        gi.read(str(p), device="cpu")  # pytest makes warnings errors
    assert len(os.listdir("/proc/self/fd")) <= before
