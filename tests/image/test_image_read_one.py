"""gdsio.image.read's one-call case (one local JPEG for the CPU, default
options): the same image as the batch steps give, and the same errors."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
from PIL import Image

import gdsio.image
from gdsio.image import api, batch


def _jpeg(path, size=(37, 23), mode="RGB", **kw):
    rng = np.random.default_rng(7)
    arr = rng.integers(0, 256, (size[1], size[0], 3 if mode != "L" else 1), dtype=np.uint8)
    img = Image.fromarray(arr.squeeze(-1) if mode == "L" else arr).convert(mode)
    img.save(path, format="JPEG", quality=90, **kw)
    return str(path)


@pytest.mark.parametrize("kind", ["rgb", "gray", "cmyk", "progressive"])
@pytest.mark.parametrize("mode", ["UNCHANGED", "RGB", "GRAY", "rgb"])
def test_one_call_equals_batch_steps(tmp_path, kind, mode):
    p = _jpeg(tmp_path / "a.jpg", mode={"rgb": "RGB", "gray": "L", "cmyk": "CMYK", "progressive": "RGB"}[kind],
              **({"progressive": True} if kind == "progressive" else {}))
    one = gdsio.image.read(p, device="cpu", mode=mode)
    listed = gdsio.image.read([p], device="cpu", mode=mode)[0]
    assert torch.equal(one, listed)


def test_one_call_takes_one_read_no_batch_steps(tmp_path, monkeypatch):
    p = _jpeg(tmp_path / "a.jpg")
    want = gdsio.image.read([p], device="cpu")[0]

    def refused(*a, **k):
        raise AssertionError("the batch steps ran")

    monkeypatch.setattr(batch, "read_files", refused)
    assert torch.equal(gdsio.image.read(p, device="cpu"), want)
    assert torch.equal(gdsio.image.read(tmp_path / "a.jpg", device="cpu"), want)


def test_other_cases_take_the_batch_steps(tmp_path, monkeypatch):
    p = _jpeg(tmp_path / "a.jpg")
    png = tmp_path / "b.png"
    Image.new("RGB", (5, 4), (1, 2, 3)).save(png)
    calls = []
    real = batch.read_files
    monkeypatch.setattr(batch, "read_files", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    monkeypatch.setattr(api, "_FAST_READ_MAX", 16)  # a file over the bound is probed first
    gdsio.image.read(p, device="cpu")
    gdsio.image.read(str(png), device="cpu")
    gdsio.image.read(p, device="cpu", return_info=True)
    assert len(calls) == 3


def test_errors_unchanged(tmp_path):
    p = _jpeg(tmp_path / "a.jpg")
    data = (tmp_path / "a.jpg").read_bytes()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.jpg"):
        gdsio.image.read(str(cut), device="cpu")
    with pytest.raises(FileNotFoundError):
        gdsio.image.read(str(tmp_path / "missing.jpg"), device="cpu")
    with pytest.raises(IsADirectoryError):
        gdsio.image.read(str(tmp_path), device="cpu")
    empty = tmp_path / "empty.jpg"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        gdsio.image.read(str(empty), device="cpu")
    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="fifo.jpg"):
        gdsio.image.read(str(fifo), device="cpu")
