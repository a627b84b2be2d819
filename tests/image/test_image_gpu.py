"""gdsio.image on the GPU: every kernel against the CPU twin (exactly),
nvJPEG against Pillow (within the tolerance below), device-bitstream decode of
files read by gdsio.read(device="cuda"), batches of mixed sizes, and the
fallbacks that must say so. Skipped centrally without a GPU (conftest.py).
Our kernels' cases (pixel_cases, MODES, many_images, BIG_SHAPE) are also
replayed on the kernels emulated on the host in CI (test_kernels_emulated.py).

Tolerance of nvJPEG against Pillow (libjpeg-turbo, islow IDCT, fancy
upsampling), per image, on photographs saved by Pillow at quality 90:
neither the IDCT nor the YCbCr->RGB rounding of nvJPEG is libjpeg's, so
exact equality is not expected. A +-1 difference in Cb or Cr becomes +-2 in
B or R (the 1.772 and 1.402 factors), and chroma interpolation adds its own
rounding where chroma is subsampled. Hence the bounds in TOLERANCE: the mean
absolute difference (torchvision's own test bounds it by 2 with nearest
chroma upsampling), the 99.9th percentile, and a loose maximum for the rare
sharp edge. With an nvJPEG older than 12.1 (no interpolated upsampling) only
torchvision's bound applies.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from conftest import in_threads
from PIL import Image
from image_helpers import CORPUS, as_tensor, chw, cpu_jpeg, npy_bytes, photos, pil_bytes, pil_chw, pnm_bytes, rand

import gdsio
import gdsio.image as gi
from gdsio import _core
from gdsio.image import nvjpeg as J

pytestmark = pytest.mark.gpu

# subsampling -> (mean abs diff, 99.9th percentile, max) bounds
TOLERANCE = {
    "gray": (0.6, 4, 16),
    "444": (0.6, 4, 16),
    "422": (1.0, 6, 32),
    "420": (1.0, 6, 32),
}
TOLERANCE_NEAREST = (2.0, 24, 255)  # nvJPEG < 12.1: nearest-neighbour chroma (torchvision's bound)
DEVICE_BACKENDS = (J.HARDWARE, J.HYBRID)


def on_gpu(b: bytes) -> torch.Tensor:
    return as_tensor(b).cuda()


def diff_stats(got: torch.Tensor, ref: np.ndarray) -> tuple[float, float, int]:
    d = np.abs(got.cpu().numpy().astype(np.int16) - ref.astype(np.int16))
    return float(d.mean()), float(np.percentile(d, 99.9)), int(d.max())


def compare_to_pillow(img: torch.Tensor, data: bytes, sub: str, label: str, mode: str | None = None,
                      backend: str = J.HARDWARE) -> tuple[str, bool]:
    """(a line of figures, within the tolerance?) for one decoded image against Pillow."""
    ref = Image.open(io.BytesIO(data))
    ref = pil_chw(ref.convert(mode) if mode else ref)
    if tuple(img.shape) != ref.shape:
        return f"{label}: shape {tuple(img.shape)} != Pillow's {ref.shape}", False
    mean, p999, mx = diff_stats(img, ref)
    backends = gi.nvjpeg_backends(torch.cuda.current_device())["backends"]
    fancy = backend == J.PILLOW or backends[backend]["fancy_upsampling"]
    tol = TOLERANCE[sub] if fancy else TOLERANCE_NEAREST
    ok = mean <= tol[0] and p999 <= tol[1] and mx <= tol[2]
    return (f"{label}: nvJPEG vs Pillow mean {mean:.3f} p99.9 {p999:.1f} max {mx}, bound {tol} "
            f"(fancy upsampling: {fancy}){'' if ok else '  <-- EXCEEDS'}"), ok


def assert_close_to_pillow(img: torch.Tensor, data: bytes, sub: str, label: str, mode: str | None = None,
                           backend: str = J.HARDWARE) -> None:
    line, ok = compare_to_pillow(img, data, sub, label, mode, backend)
    assert ok, line


@pytest.mark.parametrize("backend", (J.HARDWARE, J.HYBRID, J.HOST))
def test_measured_upsampling_is_what_the_backend_does(backend):
    """nvjpeg_backends()'s fancy_upsampling is measured on a probe image (not
    read off the flag nvjpegCreateEx took), and the probe decoded by the
    backend is within the Pillow bound that value implies."""
    from gdsio.image import upsampling as U

    dev = torch.cuda.current_device()
    b = gi.nvjpeg_backends(dev)["backends"][backend]
    assert b["usable"], b["reason"]
    assert b["fancy_upsampling"] is not None, "the probe image did not decode"
    img = U.decode_probe(dev, backend)
    assert (U.upsampling_of(img) == "interpolated") == b["fancy_upsampling"]
    line, ok = compare_to_pillow(img, U.probe_jpeg(), "420", f"probe, {backend} (flag taken: {b['fancy_upsampling_flag']})",
                                 backend=backend)
    print(line)
    assert ok, line


# --------------------------------------------------------------------------- our kernels


def pixel_cases() -> list[tuple[str, bytes, dict]]:
    cases = []
    for shape in ((1, 1), (1, 33), (29, 1), (17, 23)):
        cases.append((f"p5-{shape}", pnm_bytes(rand(shape)), {}))
        cases.append((f"p6-{shape}", pnm_bytes(rand(shape + (3,))), {}))
    cases.append(("p5-16", pnm_bytes(rand((9, 11), np.uint16)), {}))
    cases.append(("p6-16", pnm_bytes(rand((9, 11, 3), np.uint16)), {}))
    for maxval in (1, 7, 200, 1000, 65534):
        # Some samples above maxval (clamped by the decoder); int64 first: 65534 + 20 does not fit uint16.
        a = np.minimum(rand((6, 40, 3), np.uint16).astype(np.int64) % (maxval + 20), 65535)
        cases.append((f"maxval-{maxval}", pnm_bytes(a.astype(np.uint8 if maxval < 256 else np.uint16), maxval=maxval), {}))
    for dtype in ("u1", "<u2", ">u2", "<f4", ">f4"):
        for shape in ((6, 9), (6, 9, 1), (6, 9, 3), (6, 9, 4), (3, 6, 9), (2, 6, 7)):
            a = rand(shape, np.dtype(dtype).newbyteorder("=")).astype(dtype)
            cases.append((f"npy-{dtype}-{shape}", npy_bytes(a), {}))
            cases.append((f"npy-F-{dtype}-{shape}", npy_bytes(np.asfortranarray(a)), {}))
    for layout in ("HWC", "CHW", "HW"):
        for dtype in ("uint8", "uint16", "float32"):
            c = 1 if layout == "HW" else 3
            fmt = gi.RawFormat(height=5, width=8, channels=c, layout=layout, dtype=dtype, byteorder="big", offset=3)
            cases.append((f"raw-{layout}-{dtype}", bytes(3) + rand((5 * 8 * c * fmt.itemsize,)).tobytes(), {"raw": fmt}))
    return cases


MODES = ["UNCHANGED", "RGB", "GRAY"]
BIG_SHAPE = (1999, 3001, 3)


def many_images() -> list[np.ndarray]:
    """300 small RGB images: three launches of 128 jobs."""
    return [rand((3 + k % 7, 5 + k % 11, 3)) for k in range(300)]


@pytest.mark.parametrize("mode", MODES)
def test_kernels_equal_the_cpu_twin(mode):
    cases = pixel_cases()
    for name, data, kw in cases:
        try:
            cpu = gi.decode(data, device="cpu", mode=mode, **kw)
        except ValueError:
            with pytest.raises(ValueError):
                gi.decode(on_gpu(data), mode=mode, **kw)
            continue
        for src in (on_gpu(data), as_tensor(data)):
            gpu, info = gi.decode(src, device="cuda", mode=mode, return_info=True, **kw)
            assert gpu.is_cuda and info.backend == "gdsio-cuda" and gpu.dtype == cpu.dtype, name
            if gpu.dtype == torch.float32 and mode == "GRAY":
                torch.testing.assert_close(gpu.cpu(), cpu, rtol=1e-6, atol=0, equal_nan=True, msg=name)
            elif gpu.dtype == torch.float32:
                # Copied samples, bit for bit: random raw bytes hold NaNs (and
                # torch.equal calls no NaN equal) and denormals.
                assert torch.equal(gpu.cpu().view(torch.int32), cpu.view(torch.int32)), name
            else:
                assert torch.equal(gpu.cpu(), cpu), name


def test_one_launch_per_128_images():
    arrays = many_images()
    data = [on_gpu(pnm_bytes(a)) for a in arrays]
    imgs = gi.decode(data, mode="GRAY")
    for a, img in zip(arrays, imgs):
        assert torch.equal(img.cpu(), gi.decode(pnm_bytes(a), device="cpu", mode="GRAY"))
    # The core itself: 300 jobs, 3 launches.
    outs = [torch.empty((3, a.shape[0], a.shape[1]), dtype=torch.uint8, device="cuda") for a in arrays]
    jobs = []
    for a, d, o in zip(arrays, data, outs):
        off = len(pnm_bytes(a)) - a.size
        w, h = a.shape[1], a.shape[0]
        jobs.append(_core.PixelJob(src=d, dst=o, offset=off, stride_c=1, stride_y=w * 3, stride_x=3, src_channels=3,
                                   sample=_core.Sample.u8, convert=_core.Convert.copy))
    stream = torch.cuda.current_stream().cuda_stream
    assert _core.img_decode_pixels_cuda(jobs, device=torch.cuda.current_device(), stream=stream) == 3
    for a, o in zip(arrays, outs):
        np.testing.assert_array_equal(o.cpu().numpy(), chw(a))


def test_big_image_and_side_stream():
    a = rand(BIG_SHAPE)
    data = on_gpu(pnm_bytes(a))
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        img = gi.decode(data, mode="RGB")
    s.synchronize()
    np.testing.assert_array_equal(img.cpu().numpy(), chw(a))


def test_read_uncompressed_files_into_gpu(tmp_path):
    a, b = rand((40, 30, 3)), rand((20, 10), np.uint16)
    (tmp_path / "a.ppm").write_bytes(pnm_bytes(a))
    (tmp_path / "b.npy").write_bytes(npy_bytes(b))
    imgs, infos = gi.read([tmp_path / "a.ppm", tmp_path / "b.npy"], device="cuda", return_info=True)
    np.testing.assert_array_equal(imgs[0].cpu().numpy(), chw(a))
    np.testing.assert_array_equal(imgs[1].cpu().numpy(), chw(b))
    assert all(i.backend == "gdsio-cuda" and i.io.device.startswith("cuda") for i in infos)


def test_decode_leaves_the_current_device_alone():
    dev = torch.cuda.current_device()
    gi.decode(on_gpu(pnm_bytes(rand((4, 4)))))
    gi.decode(on_gpu(pil_bytes(Image.fromarray(rand((16, 16, 3))))))
    assert torch.cuda.current_device() == dev


# --------------------------------------------------------------------------- nvJPEG


def test_nvjpeg_loads_and_reports_backends():
    st = gi.nvjpeg_status()
    assert st["loaded"], f"nvJPEG must load on the GPU machine (pip install nvidia-nvjpeg): {st['reason']}"
    b = gi.nvjpeg_backends(torch.cuda.current_device())
    assert b["backends"][J.HOST]["usable"], b
    assert b["backends"][J.HARDWARE]["usable"] or b["backends"][J.HARDWARE]["reason"]
    print(f"nvJPEG {st['version']} at {st['library']}: {b}")


def jpeg_of(photo: np.ndarray, sub: str, **kw) -> bytes:
    im = Image.fromarray(photo)
    if sub == "gray":
        return pil_bytes(im.convert("L"), quality=90, **kw)
    return pil_bytes(im, quality=90, subsampling={"444": 0, "422": 1, "420": 2}[sub], **kw)


@pytest.mark.parametrize("sub", sorted(TOLERANCE))
def test_nvjpeg_matches_pillow_within_tolerance(sub):
    # Every photo and mode measured before anything is asserted: one GPU run gives the whole table.
    lines, ok, backends = [], True, set()
    for name, photo in photos():
        data = jpeg_of(photo, sub)
        img, info = gi.decode(on_gpu(data), return_info=True)
        backends.add(info.backend)
        for got, mode, label in ((img, None, "UNCHANGED"), (gi.decode(on_gpu(data), mode="RGB"), "RGB", "RGB")):
            line, good = compare_to_pillow(got, data, sub, f"{name} {sub} {label} [{info.backend}]", mode, info.backend)
            lines.append(line)
            ok &= good
    print("\n".join(lines))
    assert backends <= set(DEVICE_BACKENDS), backends
    assert ok, "\n".join(lines)


def test_hardware_decode_waits_for_work_queued_on_the_stream():
    """The JPEG engines write when nvjpegDecodeBatched is called, not in stream
    order (torchcodec PR 1634): a freed block that queued kernels still read
    must not be overwritten by the decoder the allocator hands it to."""
    photo = photos()[0][1]
    data = on_gpu(jpeg_of(photo, "420"))
    h, w = photo.shape[:2]
    info = gi.decode(data, return_info=True)[1]
    wrong = 0
    for _ in range(10):
        t = torch.full((3, h, w), 7, dtype=torch.uint8, device="cuda")  # the output's size: its block is reused
        torch.cuda._sleep(20_000_000)
        total = t.sum(dtype=torch.int64)
        del t
        gi.decode(data)
        wrong += int(total.item() != 7 * 3 * h * w)
    assert wrong == 0, f"{wrong} of 10 reductions read the decoder's output [{info.backend}]"


def test_device_bitstream_from_gdsio_read(tmp_path):
    b = gi.nvjpeg_backends(torch.cuda.current_device())
    paths = []
    for name, photo in photos():
        p = tmp_path / f"{name}.jpg"
        p.write_bytes(jpeg_of(photo, "420"))
        paths.append(p)
    for p in paths:
        t = gdsio.read(p, device="cuda")
        img, info = gi.decode(t, return_info=True)
        assert info.backend in DEVICE_BACKENDS and "copied" not in info.reason, info
        if b["backends"][J.HARDWARE]["usable"]:
            assert info.backend == J.HARDWARE, info
        assert_close_to_pillow(img, p.read_bytes(), "420", str(p), backend=info.backend)
    imgs, infos = gi.read(paths, device="cuda", return_info=True)
    for p, img, info in zip(paths, imgs, infos):
        assert info.backend in DEVICE_BACKENDS and info.io is not None and info.io.nbytes == p.stat().st_size
        assert_close_to_pillow(img, p.read_bytes(), "420", str(p), backend=info.backend)


@pytest.mark.parametrize("n", [1, 3, 64, 300])
def test_batches_of_different_sizes(n):
    photo = photos()[0][1]
    datas = []
    for k in range(n):
        h, w = 16 + (k * 37) % 300, 16 + (k * 53) % 400
        y, x = (k * 7) % (photo.shape[0] - h), (k * 11) % (photo.shape[1] - w)
        datas.append(jpeg_of(np.ascontiguousarray(photo[y : y + h, x : x + w]), ("444", "422", "420", "gray")[k % 4]))
    imgs, infos = gi.decode([on_gpu(d) for d in datas], return_info=True)
    for k, (d, img, info) in enumerate(zip(datas, imgs, infos)):
        assert info.backend in DEVICE_BACKENDS, info
        assert_close_to_pillow(img, d, ("444", "422", "420", "gray")[k % 4], f"image {k} of {n}", backend=info.backend)


def test_cmyk_and_progressive_fall_back_to_the_cpu_decoders_and_say_so():
    photo = photos()[0][1]
    prog = jpeg_of(photo, "420", progressive=True)
    cmyk = pil_bytes(Image.fromarray(photo).convert("CMYK"), quality=90)
    imgs, infos = gi.decode([on_gpu(prog), on_gpu(cmyk)], return_info=True)
    assert infos[0].backend == cpu_jpeg() and "progressive" in infos[0].reason
    assert infos[1].backend == J.PILLOW and "CMYK" in infos[1].reason
    assert torch.equal(imgs[0].cpu(), torch.from_numpy(pil_chw(Image.open(io.BytesIO(prog)))))
    assert imgs[1].shape[0] == 4 and imgs[1].is_cuda


def test_restart_intervals():
    photo = photos()[0][1]
    data = jpeg_of(photo, "420", restart_marker_blocks=4)
    img, info = gi.decode(on_gpu(data), return_info=True)
    assert info.backend in (J.HARDWARE, J.HOST), info  # the hybrid device backend takes no restart intervals
    assert_close_to_pillow(img, data, "420", f"restart intervals, {info.backend}", backend=info.backend)


def test_gray_mode_is_the_luma_of_the_gpu_rgb():
    data = jpeg_of(photos()[0][1], "420")
    rgb = gi.decode(on_gpu(data), mode="RGB").cpu().numpy().astype(np.uint32)
    gray = gi.decode(on_gpu(data), mode="GRAY").cpu().numpy()
    expect = (rgb[0] * 19595 + rgb[1] * 38470 + rgb[2] * 7471 + 0x8000) >> 16
    np.testing.assert_array_equal(gray[0], expect.astype(np.uint8))
    backend = gi.decode(on_gpu(data), return_info=True)[1].backend
    assert_close_to_pillow(torch.from_numpy(gray), data, "420", "GRAY", "L", backend=backend)


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_on_gpu(orientation):
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = pil_bytes(Image.fromarray(photos()[0][1][:100, :160]), quality=90, exif=exif.tobytes())
    plain = gi.decode(on_gpu(data))
    turned, info = gi.decode(on_gpu(data), apply_exif_orientation=True, return_info=True)
    assert info.orientation == orientation and turned.is_cuda and turned.is_contiguous()
    assert torch.equal(turned, gi.apply_orientation(plain, orientation))


def test_host_bitstreams_go_to_the_gpu_in_one_copy():
    datas = [jpeg_of(p, "420") for _, p in photos()]
    imgs, infos = gi.decode([as_tensor(d) for d in datas], device="cuda", return_info=True)
    for d, img, info in zip(datas, imgs, infos):
        assert img.is_cuda and info.backend in DEVICE_BACKENDS and "bitstream copied to the GPU" in info.reason
        assert_close_to_pillow(img, d, "420", "host bitstream", backend=info.backend)


def test_corrupt_jpeg_on_gpu():
    good = on_gpu(jpeg_of(photos()[0][1], "420"))
    bad = on_gpu((CORPUS / "jpeg_truncated_scan.jpg").read_bytes())
    with pytest.raises(ValueError, match=r"^data\[1\]: Pillow cannot decode it"):
        gi.decode([good, bad])
    imgs, failed = gi.decode([good, bad, good], on_error="skip")
    assert failed == [1] and len(imgs) == 2


def test_concurrent_decodes_have_their_own_states():
    datas = [on_gpu(jpeg_of(p, s)) for _, p in photos() for s in ("420", "444")]
    expect = [img.cpu() for img in gi.decode(datas)]

    def work():
        for _ in range(3):
            for got, e in zip(gi.decode(datas), expect):
                assert torch.equal(got.cpu(), e)

    in_threads(work)


def test_release_and_reuse():
    data = on_gpu(jpeg_of(photos()[0][1], "420"))
    first = gi.decode(data)
    torch.cuda.synchronize()
    assert _core.nvjpeg_release() is True
    assert torch.equal(gi.decode(data), first)
