"""The batch steps (image/batch.py) through decode and read: skip, info,
lists of mixed formats, threads, files, headers longer than the first look."""

from __future__ import annotations

import io

import numpy as np
import pytest
from conftest import in_threads
from image_helpers import CORPUS, as_tensor, chw, npy_bytes, photos, pil_bytes, pil_chw, pnm_bytes, rand
from PIL import Image

import gdsio.image as gi
from gdsio.errors import NeedMoreData
from gdsio.image.formats.jpeg import parse_jpeg


def test_on_error_skip_returns_good_images_and_failed_indices():
    a, b = rand((3, 4)), rand((5, 6, 3))
    bad = (CORPUS / "npy_object.npy").read_bytes()
    imgs, failed = gi.decode([pnm_bytes(a), bad, npy_bytes(b), b""], on_error="skip")
    assert failed == [1, 3]
    np.testing.assert_array_equal(imgs[0].numpy(), chw(a))
    np.testing.assert_array_equal(imgs[1].numpy(), chw(b))
    imgs, failed, infos = gi.decode([pnm_bytes(a), bad, npy_bytes(b)], on_error="skip", return_info=True)
    assert [i.index for i in infos] == [0, 2] and [i.format for i in infos] == ["pnm", "npy"]
    assert gi.decode([], on_error="skip") == ([], [])
    assert gi.decode([]) == []


def test_lists_of_different_sizes_and_formats():
    arrays = [rand((1 + k, 2 + 3 * k) + ((3,) if k % 2 else ())) for k in range(300)]
    data = [pnm_bytes(x) if k % 3 else npy_bytes(x) for k, x in enumerate(arrays)]
    imgs, infos = gi.decode([as_tensor(d) for d in data], return_info=True)
    for x, img in zip(arrays, imgs):
        np.testing.assert_array_equal(img.numpy(), chw(x))
    assert {i.backend for i in infos} == {"gdsio-cpu"}


def test_decode_is_thread_safe():
    arrays = [rand((40, 50, 3)) for _ in range(8)]
    data = [pnm_bytes(x) for x in arrays] + [pil_bytes(Image.fromarray(x)) for x in arrays]
    expect = [img.numpy() for img in gi.decode(data)]

    def work():
        for _ in range(5):
            for got, e in zip(gi.decode(data, mode="UNCHANGED"), expect):
                np.testing.assert_array_equal(got.numpy(), e)

    in_threads(work)


def test_read_files_on_the_cpu(tmp_path):
    a, b, c = rand((6, 7, 3)), rand((5, 4), np.uint16), rand((8, 9, 3))
    files = {
        "a.ppm": (pnm_bytes(a), chw(a)),
        "b.npy": (npy_bytes(b), chw(b)),
        "c.jpg": (pil_bytes(Image.fromarray(c), quality=90), None),
    }
    paths = []
    for name, (data, _) in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    imgs, infos = gi.read(paths, device="cpu", return_info=True)
    for (data, expect), img, info, p in zip(files.values(), imgs, infos, paths):
        if expect is None:
            expect = pil_chw(Image.open(io.BytesIO(data)))
        np.testing.assert_array_equal(img.numpy(), expect)
        assert info.source == str(p) and info.io is not None and info.io.backend == "posix"
        assert info.io.nbytes == len(data)
    one = gi.read(str(paths[0]), device="cpu")
    np.testing.assert_array_equal(one.numpy(), chw(a))


def test_read_errors_and_skip(tmp_path):
    good = tmp_path / "good.pgm"
    good.write_bytes(pnm_bytes(rand((3, 3))))
    missing = tmp_path / "missing.pgm"
    bad = tmp_path / "bad.pgm"
    bad.write_bytes(b"P5\n3 3\n255\n\x00")
    with pytest.raises(FileNotFoundError):
        gi.read([good, missing], device="cpu")
    with pytest.raises(ValueError, match=f"^{bad}: PNM header declares 3x3x1"):
        gi.read([good, bad], device="cpu")
    imgs, failed = gi.read([good, missing, bad, good], device="cpu", on_error="skip")
    assert failed == [1, 2] and len(imgs) == 2
    raw = gi.RawFormat(height=3, width=3)
    with pytest.raises(ValueError, match="holds 9 bytes, but the data holds 12"):
        gi.read(bad, device="cpu", raw=raw)
    (tmp_path / "rec.bin").write_bytes(bytes(range(9)))
    np.testing.assert_array_equal(gi.read(tmp_path / "rec.bin", device="cpu", raw=raw).numpy().ravel(), np.arange(9))


def test_long_jpeg_headers_take_several_rounds(tmp_path):
    # An ICC profile of 200 kB (four APP2 segments) before the frame header:
    # longer than both first looks (4 KiB of device data, 64 KiB of a file).
    photo = photos()[0][1]
    data = pil_bytes(Image.fromarray(photo), quality=90, icc_profile=bytes(range(256)) * 800)
    h = parse_jpeg(data, len(data), data[-32:])
    assert h.header_bytes > 200_000
    ref = pil_chw(Image.open(io.BytesIO(data)))
    np.testing.assert_array_equal(gi.decode(as_tensor(data)).numpy(), ref)
    (tmp_path / "icc.jpg").write_bytes(data)
    np.testing.assert_array_equal(gi.read(tmp_path / "icc.jpg", device="cpu").numpy(), ref)
    with pytest.raises(NeedMoreData) as e:
        parse_jpeg(data[:4096], len(data))
    assert e.value.nbytes > 4096
