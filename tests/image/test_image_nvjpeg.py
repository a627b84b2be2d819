"""The nvJPEG ladder (image/nvjpeg.py) without a GPU: routing rules, and
the orchestration on a stand-in core (nvJPEG and the kernels replaced by
Pillow and the CPU twin writing into the same output tensors)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from image_helpers import as_tensor, cpu_jpeg, photos, pil_bytes, pil_chw
from PIL import Image

import gdsio.image as gi
from gdsio import _core
from gdsio.errors import BackendUnavailable
from gdsio.image import batch, transfer
from gdsio.image import nvjpeg as J
from gdsio.image.formats.jpeg import decode_on_host, parse_jpeg


def test_jpeg_routing_rules():
    photo = photos()[0][1]
    usable = {"backends": {b: {"usable": True, "reason": ""} for b in (J.HARDWARE, J.HYBRID, J.HOST)}}
    base = pil_bytes(Image.fromarray(photo), quality=90)
    assert J.route(parse_jpeg(base, len(base), base[-32:]), usable) == (J.HARDWARE, "")
    prog = pil_bytes(Image.fromarray(photo), quality=90, progressive=True)
    assert J.route(parse_jpeg(prog, len(prog), prog[-32:]), usable) == (J.PILLOW, "progressive JPEG")
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"))
    assert J.route(parse_jpeg(cmyk, len(cmyk), cmyk[-32:]), usable)[1].endswith("-coded JPEG")
    cut = base[:-10]
    assert "no EOI marker" in J.route(parse_jpeg(cut, len(cut), cut[-32:]), usable)[1]
    no_hw = {"backends": dict(usable["backends"], **{J.HARDWARE: {"usable": False, "reason": "no engines"}})}
    assert J.route(parse_jpeg(base, len(base), base[-32:]), no_hw) == (J.HYBRID, f"{J.HARDWARE}: no engines")
    none = {"backends": {b: {"usable": False, "reason": "not loaded"} for b in (J.HARDWARE, J.HYBRID, J.HOST)}}
    assert J.route(parse_jpeg(base, len(base), base[-32:]), none)[0] == J.PILLOW


def test_nvjpeg_status_says_why():
    st = gi.nvjpeg_status()
    assert set(st) == {"loaded", "library", "version", "cudart_version", "reason"}
    if not st["loaded"]:
        assert st["reason"]
        b = gi.nvjpeg_backends(0)
        assert not any(v["usable"] or v["fancy_upsampling"] or v["fancy_upsampling_flag"] for v in b["backends"].values())


# --------------------------------------------------------------------------- the GPU orchestration, on a stand-in core
#
# No GPU here: the nvJPEG and kernel entry points are replaced by Pillow and
# the CPU twin writing into the same output tensors, so that routing,
# grouping by backend and output, batch-then-single retries, the Pillow
# fallback, the luma pass and the staging of host bitstreams all run.


@pytest.fixture
def stand_in_gpu(monkeypatch):
    state = {"calls": [], "reject": b"\x00no-such-bytes\x00", "hw_ok": 1, "usable": {J.HARDWARE, J.HYBRID, J.HOST}, "syncs": 0,
             "reject_on": {J.HARDWARE, J.HYBRID, J.HOST}, "reject_with": ValueError}

    def decode_batch(device, backend, output, jobs, stream):
        state["calls"].append((backend, output, len(jobs)))
        blobs = [data.numpy().tobytes() for data, _ in jobs]
        if any(state["reject"] in b for b in blobs) and backend in state["reject_on"]:
            if state["reject_with"] is _core.NvjpegError:  # what the shim raises for EXECUTION_FAILED and the like
                raise _core.NvjpegError(f"nvJPEG failed: nvjpegDecodeBatched ({backend}): fake execution failure")
            raise ValueError(f"nvJPEG rejected the batch: nvjpegDecodeBatched ({backend}): fake status")
        for b, (_, dst) in zip(blobs, jobs):
            planar = np.ascontiguousarray(pil_chw(Image.open(io.BytesIO(b)).convert("RGB" if output == "rgb" else "L")))
            assert planar.shape == tuple(dst.shape)
            dst.copy_(torch.from_numpy(planar))

    def backends(dev):
        return {"backends": {b: {"usable": b in state["usable"], "reason": "" if b in state["usable"] else "off"}
                             for b in (J.HARDWARE, J.HYBRID, J.HOST)}}

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", decode_batch)
    monkeypatch.setattr(_core, "img_decode_pixels_cuda", lambda jobs, device, stream: _core.img_decode_pixels_cpu(jobs, threads=2))
    monkeypatch.setattr(J, "nvjpeg_status", lambda: {"loaded": True, "library": "fake", "version": (13, 0, 0), "reason": ""})
    monkeypatch.setattr(J, "nvjpeg_backends", backends)
    monkeypatch.setattr(J, "hardware_check", lambda dev, prefixes: [state["hw_ok"]] * len(prefixes))
    monkeypatch.setattr(transfer, "current_stream", lambda d: 0)
    monkeypatch.setattr(transfer, "synchronize", lambda d: state.__setitem__("syncs", state["syncs"] + 1))
    monkeypatch.setattr(transfer, "stage", lambda tensors, d: [t.clone() for t in tensors])

    def run(datas, mode="UNCHANGED"):
        opts = batch.options(mode=mode, on_error="raise")
        items = [batch.Item(i, f"data[{i}]", as_tensor(d), len(d)) for i, d in enumerate(datas)]
        batch.read_headers(items, opts)
        for it in items:
            batch.check(it, opts)
        # What formats/jpeg.py's decode does for a GPU target, on the CPU here.
        decode_on_host(J.decode(items, torch.device("cpu"), opts), torch.device("cpu"), opts)
        return items

    state["run"] = run
    return state


def _jpegs() -> dict[str, bytes]:
    photo = photos()[0][1][:96, :128]
    im = Image.fromarray(photo)
    return {
        "420": pil_bytes(im, quality=90, subsampling=2),
        "444": pil_bytes(im, quality=90, subsampling=0),
        "gray": pil_bytes(im.convert("L"), quality=90),
        "progressive": pil_bytes(im, quality=90, progressive=True),
        "cmyk": pil_bytes(im.convert("CMYK"), quality=90),
        "rejected": pil_bytes(im, quality=90, comment=b"REJECT-ME"),
    }


@pytest.mark.parametrize("mode", ["UNCHANGED", "RGB", "GRAY"])
def test_gpu_orchestration_on_a_stand_in(stand_in_gpu, mode):
    jp = _jpegs()
    stand_in_gpu["reject"] = b"REJECT-ME"
    items = stand_in_gpu["run"](list(jp.values()), mode)
    by = dict(zip(jp, items))
    pil_mode = {"UNCHANGED": None, "RGB": "RGB", "GRAY": "L"}[mode]
    for name, it in by.items():
        assert it.error is None, it.error
        ref = Image.open(io.BytesIO(jp[name]))
        ref = ref.convert(pil_mode) if pil_mode else ref
        np.testing.assert_array_equal(it.result.numpy(), pil_chw(ref), err_msg=name)
    assert by["420"].backend == by["444"].backend == by["gray"].backend == J.HARDWARE
    assert "bitstream copied to the GPU" in by["420"].reason
    # What no nvJPEG backend takes goes to the CPU decoders: libjpeg-turbo, then Pillow.
    assert by["progressive"].backend == cpu_jpeg() and by["progressive"].reason == "progressive JPEG"
    assert by["cmyk"].backend == J.PILLOW and f"{cpu_jpeg()}: CMYK-coded JPEG" in by["cmyk"].reason
    assert by["rejected"].backend == cpu_jpeg() and "fake status" in by["rejected"].reason
    # One batch for the colour images (it fails on the rejected one), then one call per image.
    rgb_calls = [c for c in stand_in_gpu["calls"] if c[1] == "rgb"]
    # (In RGB mode the gray JPEG joins the RGB batch; otherwise it is decoded as Y.)
    assert rgb_calls[0] == (J.HARDWARE, "rgb", 4 if mode == "RGB" else 3)
    assert all(c[2] == 1 for c in rgb_calls[1:])
    assert ((J.HARDWARE, "y", 1) in stand_in_gpu["calls"]) == (mode != "RGB")


def test_gpu_orchestration_falls_down_the_backends(stand_in_gpu):
    jp = _jpegs()
    stand_in_gpu["hw_ok"] = 0  # nvJPEG's own check refuses the hardware decoder
    items = stand_in_gpu["run"]([jp["420"], jp["gray"]])
    assert [it.backend for it in items] == [J.HYBRID, J.HYBRID]
    assert all("nvjpegDecodeBatchedSupported refuses it" in it.reason for it in items)
    stand_in_gpu["usable"] = {J.HOST}
    stand_in_gpu["hw_ok"] = 1
    items = stand_in_gpu["run"]([jp["420"], jp["444"]])
    assert [it.backend for it in items] == [J.HOST, J.HOST]
    assert "nvjpeg-hardware-device: off" in items[0].reason and stand_in_gpu["syncs"] >= 1
    for it, name in zip(items, ["420", "444"]):
        np.testing.assert_array_equal(it.result.numpy(), pil_chw(Image.open(io.BytesIO(jp[name]))))
    stand_in_gpu["usable"] = set()
    items = stand_in_gpu["run"]([jp["420"]])
    assert items[0].backend == cpu_jpeg() and "nvjpeg-host: off" in items[0].reason


@pytest.mark.parametrize("error", [ValueError, _core.NvjpegError])
def test_an_image_a_backend_fails_goes_down_the_ladder_not_straight_to_pillow(stand_in_gpu, error):
    jp = _jpegs()
    stand_in_gpu.update(reject=b"REJECT-ME", reject_on={J.HARDWARE}, reject_with=error)
    items = stand_in_gpu["run"]([jp["rejected"], jp["420"]])
    assert [it.backend for it in items] == [J.HYBRID, J.HARDWARE], [it.reason for it in items]
    assert "fake" in items[0].reason and J.HARDWARE in items[0].reason
    np.testing.assert_array_equal(items[0].result.numpy(), pil_chw(Image.open(io.BytesIO(jp["rejected"]))))
    # Hybrid off too: the host backend takes it; everything off: the CPU decoders.
    stand_in_gpu.update(reject_on={J.HARDWARE, J.HYBRID})
    assert stand_in_gpu["run"]([jp["rejected"]])[0].backend == J.HOST
    stand_in_gpu.update(reject_on={J.HARDWARE, J.HYBRID, J.HOST})
    it = stand_in_gpu["run"]([jp["rejected"]])[0]
    assert it.backend == cpu_jpeg() and it.error is None and it.reason.count("fake") == 3


def test_next_backend_skips_what_cannot_take_the_image():
    photo = photos()[0][1]
    base = pil_bytes(Image.fromarray(photo), quality=90)
    h = parse_jpeg(base, len(base), base[-32:])
    usable = {"backends": {b: {"usable": True, "reason": ""} for b in (J.HARDWARE, J.HYBRID, J.HOST)}}
    assert J.next_backend(J.HARDWARE, h, usable) == (J.HYBRID, "")
    assert J.next_backend(J.HYBRID, h, usable) == (J.HOST, "")
    assert J.next_backend(J.HOST, h, usable) == (J.PILLOW, "")
    no_hybrid = {"backends": dict(usable["backends"], **{J.HYBRID: {"usable": False, "reason": "off"}})}
    assert J.next_backend(J.HARDWARE, h, no_hybrid) == (J.HOST, f"{J.HYBRID}: off")
    try:
        rst = pil_bytes(Image.fromarray(photo), quality=90, restart_marker_blocks=4)
    except TypeError:
        return
    hr = parse_jpeg(rst, len(rst), rst[-32:])
    assert J.next_backend(J.HARDWARE, hr, usable) == (J.HOST, f"{J.HYBRID}: restart intervals")


def test_nvjpeg_run_fails_a_whole_chunk_when_the_backend_cannot_start(monkeypatch):
    calls, failed = [], []

    def fake_batch(device, backend, output, jobs, stream):
        calls.append(len(jobs))
        raise BackendUnavailable("nvjpegCreateEx failed: fake")

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", fake_batch)
    J.nvjpeg_run(0, J.HOST, "rgb", [(k, 1, 0, 1, 1) for k in range(5)], 0, lambda k, why: failed.append((k, why)))
    assert calls == [5] and [k for k, _ in failed] == list(range(5)) and "fake" in failed[0][1]


def test_nvjpeg_run_lets_cuda_errors_through(monkeypatch):
    """A failed stream sync around the decode (a sticky CUDA error) is not about
    the images: no image-by-image retries, the error reaches the caller."""
    calls = []

    def fake_batch(device, backend, output, jobs, stream):
        calls.append(len(jobs))
        raise RuntimeError("cudaStreamSynchronize (before the nvJPEG hardware decode): cudaErrorIllegalAddress")

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", fake_batch)
    with pytest.raises(RuntimeError, match="cudaErrorIllegalAddress"):
        J.nvjpeg_run(0, J.HARDWARE, "rgb", [(k, 1, 0, 1, 1) for k in range(5)], 0, lambda k, why: None)
    assert calls == [5]


def test_nvjpeg_run_retries_one_by_one(monkeypatch):
    calls, failed = [], []

    def fake_batch(device, backend, output, jobs, stream):
        calls.append([j[0] for j in jobs])
        if any(j[0] in (3, 7) for j in jobs):
            raise ValueError("nvJPEG rejected the batch: fake")

    monkeypatch.setattr(_core, "nvjpeg_decode_batch", fake_batch)
    monkeypatch.setattr(J, "BATCH", 4)
    J.nvjpeg_run(0, J.HARDWARE, "rgb", [(k, 1, 0, 1, 1) for k in range(10)], 0, lambda k, why: failed.append(k))
    assert failed == [3, 7]
    assert calls[0] == [0, 1, 2, 3] and calls[5] == [4, 5, 6, 7] and calls[10] == [8, 9]
