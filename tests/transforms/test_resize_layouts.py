"""The CPU resize on every layout it reads without a copy (planes, a (C,H,W)
view of interleaved (H,W,C) memory as decoders return, channels_last batches,
crops of those) and at every SIMD level this CPU has: the bytes equal
Pillow's, and every level gives the scalar loops' bytes."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import gdsio
from gdsio import _core
from gdsio import transforms as T

FILTERS = {
    "nearest": Image.Resampling.NEAREST,
    "bilinear": Image.Resampling.BILINEAR,
    "bicubic": Image.Resampling.BICUBIC,
    "box": Image.Resampling.BOX,
}


ALL_LEVELS = ("scalar", "avx2", "avx512")


def _levels() -> list[str]:
    now = _core.tf_cpu_simd()
    best = _core.tf_set_cpu_simd("avx512")  # clamped to what this CPU has
    _core.tf_set_cpu_simd(now)
    return list(ALL_LEVELS[:ALL_LEVELS.index(best) + 1])


LEVELS = _levels()


def _at_level(lv: str, fn):
    best = _core.tf_cpu_simd()
    assert _core.tf_set_cpu_simd(lv) == lv
    try:
        return fn()
    finally:
        _core.tf_set_cpu_simd(best)


@pytest.fixture(params=LEVELS)
def level(request):
    best = _core.tf_cpu_simd()
    assert _core.tf_set_cpu_simd(request.param) == request.param
    yield request.param
    _core.tf_set_cpu_simd(best)


def _image(h: int, w: int, c: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    planes = [np.where(((yy // 7) + (xx // 5)) % 2 == 0, 255, 0), (xx * 255 // max(w - 1, 1) + yy * 3) % 256,
              rng.integers(0, 256, size=(h, w)), 255 - (xx * 7) % 256]
    return np.stack(planes[:c], axis=-1).astype(np.uint8)


def _pillow(a: np.ndarray, size: tuple[int, int], filt: str) -> np.ndarray:
    mode = {1: "L", 3: "RGB", 4: "CMYK"}[a.shape[2]]
    im = Image.frombytes(mode, (a.shape[1], a.shape[0]), np.ascontiguousarray(a).tobytes())
    out = np.asarray(im.resize((size[1], size[0]), FILTERS[filt], reducing_gap=None))
    return out.reshape(size[0], size[1], -1).transpose(2, 0, 1)


def _layouts(a: np.ndarray) -> dict[str, torch.Tensor]:
    hwc = torch.from_numpy(a.copy())
    # RGB in 4-byte pixels (RGBX memory): a pixel stride of 4 for 3 channels.
    x = torch.zeros(a.shape[0], a.shape[1], 4, dtype=torch.uint8)
    x[..., : a.shape[2]] = hwc
    return {
        "planes": hwc.permute(2, 0, 1).contiguous(),
        "interleaved": hwc.permute(2, 0, 1),
        "channels_last": hwc.permute(2, 0, 1).contiguous()[None].contiguous(memory_format=torch.channels_last),
        "rgbx": x.permute(2, 0, 1)[: a.shape[2]],
    }


@pytest.mark.parametrize("filt", list(FILTERS))
@pytest.mark.parametrize(
    "shape,size",
    [((700, 1000, 3), (224, 224)), ((375, 500, 3), (224, 224)), ((97, 89, 3), (45, 44)), ((31, 29, 3), (64, 77)),
     ((5, 3, 3), (17, 9)), ((1, 1, 3), (3, 5)), ((300, 2000, 3), (300, 7)), ((64, 48, 4), (33, 25)),
     ((97, 89, 1), (45, 44)), ((100, 1300, 3), (50, 90)), ((60, 2000, 3), (20, 100)),
     ((256, 340, 3), (128, 340)), ((64, 48, 3), (64, 48)), ((64, 48, 4), (20, 48)), ((30, 40, 1), (30, 40))],
    ids=str,
)
def test_every_layout_and_level_equals_pillow(level, filt, shape, size):
    a = _image(*shape)
    ref = _pillow(a, size, filt)
    with gdsio.settings(threads=1):
        for name, x in _layouts(a).items():
            if name == "rgbx" and shape[2] == 4:
                continue
            out = T.resize(x, list(size), interpolation=filt)
            out = out[0] if out.ndim == 4 else out
            assert out.is_contiguous()
            np.testing.assert_array_equal(out.numpy(), ref, err_msg=f"{name} at {level}")


def test_interleaved_views_are_not_copied(level):
    """A crop of an interleaved view is read in place: the result is the crop's."""
    a = _image(200, 300, 3, seed=3)
    view = torch.from_numpy(a.copy()).permute(2, 0, 1)
    assert view.stride() == (1, 900, 3)
    out = T.resized_crop(view, 10, 20, 150, 250, [64, 80])
    ref = _pillow(a[10:160, 20:270], (64, 80), "bilinear")
    np.testing.assert_array_equal(out.numpy(), ref)


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_fused_step_on_interleaved_batches_equals_planes(level, threads):
    """The fused crop-flip-resize-normalize reads interleaved images (a list of
    different sizes) as it reads planes, at every thread count."""
    imgs = [_image(h, w, 3, seed=h) for h, w in ((375, 500), (500, 333), (240, 320), (64, 1000))]
    views = [torch.from_numpy(a.copy()).permute(2, 0, 1) for a in imgs]
    planes = [v.contiguous() for v in views]
    boxes = T.random_resized_crop_params([a.shape[0] for a in imgs], [a.shape[1] for a in imgs], generator=1)
    flips = [True, False, True, False]
    kw = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225])
    with gdsio.settings(threads=threads):
        a = T.resized_crop_flip_normalize(views, boxes, flips, 224, **kw)
        b = T.resized_crop_flip_normalize(planes, boxes, flips, 224, **kw)
        u8 = T.resized_crop_flip_normalize(views, boxes, flips, 224, None, None, dtype=torch.uint8)
        u8_planes = T.resized_crop_flip_normalize(planes, boxes, flips, 224, None, None, dtype=torch.uint8)
    assert torch.equal(a, b) and torch.equal(u8, u8_planes)


def test_cuda_resize_refuses_interleaved_rows():
    t = torch.zeros(4, 5, 3, dtype=torch.uint8).permute(2, 0, 1)  # (C, H, W) of (H, W, C) memory: pixel stride 3
    with pytest.raises(ValueError, match=r"images\[0\]: the CUDA resize reads channel planes \(pixel stride 1\)"):
        _core.tf_resize_workspace_bytes([t], out_h=2, out_w=2, filter="bilinear", antialias=True)


def test_simd_level_names():
    assert _core.tf_cpu_simd() in ALL_LEVELS
    with pytest.raises(ValueError, match="level: 'avx512', 'avx2' or 'scalar', got 'sse9'"):
        _core.tf_set_cpu_simd("sse9")


@pytest.mark.parametrize("cap", ALL_LEVELS)
def test_the_environment_caps_the_level(cap):
    """GDSIO_CPU_SIMD=scalar or avx2 caps the level a process starts at (the
    CPU's best when that is lower); an unknown name leaves the CPU's best."""
    import subprocess
    import sys
    import os
    code = "from gdsio import _core; print(_core.tf_cpu_simd())"
    env = dict(os.environ, GDSIO_CPU_SIMD=cap)
    got = subprocess.run([sys.executable, "-P", "-c", code], env=env, capture_output=True, text=True, check=True)
    best = LEVELS[-1]
    want = ALL_LEVELS[min(ALL_LEVELS.index(cap), ALL_LEVELS.index(best))]
    assert got.stdout.strip() == want


@pytest.mark.parametrize("mode,antialias", [("bilinear", True), ("bilinear", False), ("nearest", False),
                                            ("nearest-exact", True), ("bicubic", True), ("box", True)])
def test_single_image_shortcut_equals_the_general_path(mode, antialias):
    """resize() of one uint8 (C,H,W) CPU tensor with [h, w] and a mode name takes
    a short path; its bytes are those of the general path (reached here through
    a list of one image and an upper-case name) on every layout."""
    a = _image(97, 89, 3, seed=5)
    for name, x in _layouts(a).items():
        x = x[0] if x.ndim == 4 else x
        fast = T.resize(x, [45, 61], interpolation=mode, antialias=antialias)
        general = T.resize([x], (45, 61), interpolation=mode.upper(), antialias=antialias)[0]
        assert fast.shape == (3, 45, 61) and fast.is_contiguous()
        assert torch.equal(fast, general), name


@pytest.mark.parametrize("mode,antialias", [("bilinear", True), ("nearest", False), ("bicubic", True)])
def test_batch_shortcut_equals_the_general_path(mode, antialias):
    """An (N, C, H, W) CPU batch takes the same short path, one row of the core's
    table per image at the batch stride; each image's bytes are those of the
    general path, for a channels_last batch, planes, every other image of a
    batch (a batch stride of two images) and one image expanded to three
    (batch stride 0)."""
    imgs = [torch.from_numpy(_image(53, 71, 3, seed=s)).permute(2, 0, 1).contiguous() for s in range(6)]
    planes = torch.stack(imgs)
    batches = {
        "channels_last": planes.contiguous(memory_format=torch.channels_last),
        "planes": planes,
        "every_other": planes[::2],
        "expanded": planes[:1].expand(3, -1, -1, -1),
        "one": planes[:1].contiguous(memory_format=torch.channels_last),
    }
    for name, x in batches.items():
        fast = T.resize(x, [29, 40], interpolation=mode, antialias=antialias)
        general = T.resize(list(x.unbind(0)), (29, 40), interpolation=mode.upper(), antialias=antialias)
        assert fast.shape == (x.shape[0], 3, 29, 40) and fast.is_contiguous(), name
        assert torch.equal(fast, general), name


def test_single_image_shortcut_leaves_other_calls_to_the_general_path():
    x = torch.from_numpy(_image(40, 30, 3)).permute(2, 0, 1)
    # bicubic without antialias is torch's interpolate (its uint8 CPU kernel), as torchvision runs it
    ref = torch.nn.functional.interpolate(x[None], size=[20, 15], mode="bicubic", align_corners=False,
                                          antialias=False)[0]
    assert torch.equal(T.resize(x, [20, 15], interpolation="bicubic", antialias=False), ref)
    with pytest.raises(ValueError, match=r"size must be positive, got \[0, 15\]"):
        T.resize(x, [0, 15])
    with pytest.raises(ValueError, match="interpolation 'box' with antialias=False"):
        T.resize(x, [20, 15], interpolation="box", antialias=False)
    expanded = torch.arange(30, dtype=torch.uint8).expand(3, 40, 30)  # row stride 0: copied first
    assert torch.equal(T.resize(expanded, [20, 15]), T.resize(expanded.contiguous(), [20, 15]))


def test_expanded_images_are_copied_before_the_kernel():
    """Zero strides (an expanded tensor) are copied first, in every entry point."""
    row = torch.arange(30, dtype=torch.uint8)
    expanded = row.expand(3, 40, 30)
    ref = T.resize(expanded.contiguous(), [20, 15])
    assert torch.equal(T.resize([expanded], [20, 15])[0], ref)
    assert torch.equal(T.resize(expanded[None].expand(2, 3, 40, 30), [20, 15])[1], ref)
    assert torch.equal(T.resized_crop(expanded, 0, 0, 40, 30, [20, 15]), ref)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("norm,scale", [(True, True), (False, True), (False, False), (True, False)])
@pytest.mark.parametrize("layout", ["interleaved", "planes"])
@pytest.mark.parametrize("size", [48, 45, [6, 1030], None])
def test_fused_float_outputs_equal_the_scalar_arithmetic(dtype, norm, scale, layout, size):
    """The SIMD schedule writes a float or 16-bit output from a table of the
    epilogue's 256 results per channel (or a vector kernel, checked against
    that table); the scalar loops compute each value: the same bits
    for every dtype, scale and normalisation, on interleaved pixels and
    planes, flipped or not, at widths on and off the vectors' 8 values and
    rows longer than the vector store's pieces, and at the image's own size
    (a cast: both passes copies)."""
    imgs = [torch.from_numpy(_image(h, w, 3, seed=h)).permute(2, 0, 1) for h, w in ((120, 90), (64, 200))]
    if layout == "planes":
        imgs = [im.contiguous() for im in imgs]
    boxes = [[3, 5, 100, 80], [0, 0, 64, 200]]
    if size is None:  # the second image at its own size, the first's crop as large as it is
        size, boxes = [64, 200], [[3, 5, 64, 80], [0, 0, 64, 200]]
    kw = dict(mean=[0.485, 0.456, 0.406], std=[0.229, 0.224, 0.225]) if norm else dict(mean=None, std=None)
    outs = {lv: _at_level(lv, lambda: T.resized_crop_flip_normalize(imgs, boxes, [False, True], size, dtype=dtype,
                                                                    scale=scale, **kw))
            for lv in LEVELS}
    for lv in LEVELS:
        assert torch.equal(outs[lv].view(torch.int16 if dtype != torch.float32 else torch.int32),
                           outs["scalar"].view(torch.int16 if dtype != torch.float32 else torch.int32)), lv
    if dtype == torch.float32 and size == [64, 200]:  # at its own size the chain is the cast alone: torchvision's
        x = imgs[1].flip(-1).to(torch.float32)
        x = x.mul(1 / 255) if scale else x
        if norm:
            x = (x - torch.tensor(kw["mean"]).view(3, 1, 1)) / torch.tensor(kw["std"]).view(3, 1, 1)
        assert torch.equal(outs[LEVELS[-1]][1], x)


@pytest.mark.parametrize("scale,mean,std", [(True, [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]), (True, None, None),
                                            (False, None, None), (False, [127.5, 1.0, -3.0], [64.0, 0.5, 7.0]),
                                            # u = 2 lands halfway between two bfloat16s (channels 0, 2: the
                                            # lower one odd, even) and two float16s (channel 1, the lower odd):
                                            # round half to even, as torch does
                                            (False, [0.98828125, 0.99853515625, 0.99609375], [1.0, 1.0, 1.0])])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_every_level_above_scalar_writes_floats_with_its_vector_kernel(scale, mean, std, dtype):
    # The bits are the table's either way (the test above); this says the vector kernel gave them back, so
    # a float output is not left to one lookup a value (float16: on a CPU with F16C, as every AVX2 CPU has,
    # unless a hypervisor hides it).
    vector = dtype != "float16" or _cpu_flag("f16c")
    for lv in LEVELS:
        got = _at_level(lv, lambda: _core.tf_vector_epilogue(3, dtype, scale=scale, mean=mean, std=std))
        assert got == (lv != "scalar" and vector), lv


def _cpu_flag(name: str) -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and name in line.split() for line in f)
    except OSError:
        return True  # not Linux: AVX2 without F16C is not known


@pytest.mark.parametrize("seed", range(6))
def test_every_level_equals_the_scalar_loops_on_odd_shapes(seed):
    """Random sizes around the kernels' edges (output widths off every vector
    width, windows of 1 to hundreds of taps, vertical windows past 256 rows,
    which the AVX-512 vertical kernel hands to AVX2) on planes, interleaved
    views and RGBX memory whose fourth bytes are noise: every level gives the
    scalar loops' bytes."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(6):
        h, w = (int(v) for v in rng.integers(1, 700, size=2))
        if seed == 0:
            h = int(rng.integers(1200, 2400))  # a tall image squeezed: long vertical windows
        oh, ow = int(rng.integers(1, 90)), int(rng.integers(1, 90))
        filt = ["bilinear", "bicubic", "box"][int(rng.integers(0, 3))]
        base = rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8)
        rgbx = torch.from_numpy(base).permute(2, 0, 1)[:3]  # pixel stride 4, the 4th byte noise
        inputs = {"interleaved": torch.from_numpy(base[..., :3].copy()).permute(2, 0, 1), "rgbx": rgbx,
                  "planes": rgbx.contiguous(), "gray": torch.from_numpy(base[..., 0].copy())[None],
                  "rgba": torch.from_numpy(base).permute(2, 0, 1)}
        for name, x in inputs.items():
            outs = {lv: _at_level(lv, lambda: T.resize(x, [oh, ow], interpolation=filt)) for lv in LEVELS}
            for lv in LEVELS:
                assert torch.equal(outs[lv], outs["scalar"]), (name, lv, (h, w), (oh, ow), filt)


def test_images_of_one_size_share_windows_but_not_layouts(level):
    """Images of one size share their windows within a call and across calls
    (a cache keyed by the geometry, the layout and the level): a list mixing
    layouts of one size, a second call with other pixels, and each image alone
    all give Pillow's bytes."""
    a, b = _image(123, 171, 3, seed=8), _image(123, 171, 3, seed=9)
    for img in (a, b):  # the second pass hits the cache with other pixels
        ref = _pillow(img, (40, 56), "bicubic")
        xs = list(_layouts(img).values())
        xs = [x[0] if x.ndim == 4 else x for x in xs]
        outs = T.resize(xs, [40, 56], interpolation="bicubic")
        for x, out in zip(xs, outs):
            np.testing.assert_array_equal(out.numpy(), ref)
            np.testing.assert_array_equal(T.resize(x, [40, 56], interpolation="bicubic").numpy(), ref)


_GUARDED = r"""
import ctypes, mmap, sys
import numpy as np, torch
from gdsio import _core
from gdsio import transforms as T

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PAGE = mmap.PAGESIZE


def guarded(nbytes):
    # nbytes ending exactly at a PROT_NONE page: a read one byte past them faults.
    pages = (nbytes + PAGE - 1) // PAGE + 1
    base = libc.mmap(None, pages * PAGE, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
    assert base not in (None, ctypes.c_void_p(-1).value)
    assert libc.mprotect(base + (pages - 1) * PAGE, PAGE, 0) == 0  # PROT_NONE
    start = base + (pages - 1) * PAGE - nbytes
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(start))


rng = np.random.default_rng(0)
cases = [((700, 1000), (224, 224)), ((37, 53), (11, 9)), ((5, 300), (3, 7)), ((64, 2000), (20, 100)),
         ((120, 17), (60, 16)), ((9, 9), (4, 4)), ((300, 64), (29, 31))]
for level in sys.argv[1:]:
    assert _core.tf_set_cpu_simd(level) == level
    for (h, w), size in cases:
        for c, ps in ((3, 3), (3, 4), (4, 4), (1, 1)):
            mem = guarded(h * w * ps)
            mem[:] = rng.integers(0, 256, mem.size, dtype=np.uint8)
            hwc = torch.from_numpy(mem).view(h, w, ps)
            x = hwc.permute(2, 0, 1)[:c]
            for filt in ("bilinear", "bicubic", "box"):
                got = T.resize(x, list(size), interpolation=filt)
                planes = T.resize(x.contiguous(), list(size), interpolation=filt)
                assert torch.equal(got, planes), (level, (h, w), size, c, ps, filt)
            plane_mem = guarded(h * w)  # one plane ending at the guard page
            plane_mem[:] = rng.integers(0, 256, plane_mem.size, dtype=np.uint8)
            T.resize(torch.from_numpy(plane_mem).view(1, h, w), list(size))
print("ok")
"""


def test_no_level_reads_past_the_image():
    """Every SIMD level's reads stay inside the image: images (interleaved
    RGB, RGBX, RGBA, planes) end exactly at a page the process may not read,
    so a read past their last byte kills the child with SIGSEGV; the results
    equal those of a contiguous copy."""
    import subprocess
    import sys

    got = subprocess.run([sys.executable, "-P", "-c", _GUARDED, *LEVELS], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0 and got.stdout.strip() == "ok", (got.returncode, got.stderr[-2000:])
