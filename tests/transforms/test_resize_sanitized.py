"""The CPU resize's SIMD paths under AddressSanitizer and UndefinedBehaviorSanitizer.

The vector kernels read and write in pieces (8 values, 16 pixels, 512-pixel
store pieces, tails through stack buffers). Here every level runs on the
module built with both sanitizers (tests/boundary/asan_core.py) over shapes
around those pieces, planes and interleaved pixels, flips, uint8 and the
three float outputs, at the image's own size and resized, and must give the
scalar loops' bits: a read or write past a buffer stops the process with a
report instead of passing unseen.
"""

from __future__ import annotations

import pytest

from boundary import asan_core

_SCRIPT = r"""
import numpy as np, torch, _core
rng = np.random.default_rng(0)
levels = [lv for lv in ("scalar", "avx2", "avx512") if _core.tf_set_cpu_simd(lv) == lv]
dtypes = (torch.uint8, torch.float32, torch.float16, torch.bfloat16)
n = 0
for h, w in ((31, 17), (7, 1100), (64, 200)):
    base = rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)
    for layout in ("interleaved", "planes"):
        img = base.transpose(2, 0, 1) if layout == "interleaved" else np.ascontiguousarray(base.transpose(2, 0, 1))
        for oh, ow in ((h, w), (5, 45), (6, 1030)):
            for flip in (False, True):
                for dt in dtypes:
                    kw = {} if dt == torch.uint8 else dict(scale=True, mean=[0.485, 0.456, 0.406],
                                                          std=[0.229, 0.224, 0.225])
                    outs = []
                    for lv in levels:
                        _core.tf_set_cpu_simd(lv)
                        out = torch.empty((1, 3, oh, ow), dtype=dt)
                        _core.tf_resize([img], out=out, filter="bilinear", antialias=True, flips=np.array([flip]), **kw)
                        outs.append(out)
                    bits = {torch.uint8: torch.uint8, torch.float32: torch.int32}.get(dt, torch.int16)
                    for lv, o in zip(levels, outs):
                        assert torch.equal(o.view(bits), outs[0].view(bits)), (lv, h, w, oh, ow, layout, flip, dt)
                    n += 1
print("levels", levels, "cases", n, flush=True)
print("done", flush=True)
"""


@pytest.mark.skipif(asan_core.unavailable() is not None, reason=f"no ASan build here: {asan_core.unavailable()}")
def test_every_level_is_clean_and_equal_under_asan():
    r = asan_core.run(_SCRIPT)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("done"), (
        f"the ASan run stopped (rc {r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-6000:]}")
    assert "cases 144" in r.stdout, r.stdout
