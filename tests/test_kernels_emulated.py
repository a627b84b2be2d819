"""The CUDA kernels (csrc/image/*.cu) run on the CPU: compiled as host C++
against an emulation of the CUDA subset they use (tests/kernels), fed the GPU
tests' own cases (recorded through gdsio's CPU path by tests/kernels/cases.py)
and compared with the CPU twin byte for byte, under AddressSanitizer and
UndefinedBehaviorSanitizer, and under ThreadSanitizer for the kernels that use
shared memory. Deliberate bugs (a __syncthreads() removed, bounds off by one)
must be caught. Skipped only where no C++ compiler with these sanitizers is
installed. Builds are cached in build/kernels-emu by the sources' digest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from kernels import cases as C
from kernels import emulate as E


def _unavailable() -> str | None:
    for flavour in E.FLAVOURS:
        why = E.sanitizer_unavailable(flavour)
        if why:
            return why
    return None


_WHY = _unavailable()
pytestmark = pytest.mark.skipif(_WHY is not None, reason=f"the kernel emulation cannot be built here: {_WHY}")


@pytest.fixture(scope="module")
def case_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    cases = tmp_path_factory.mktemp("kernels-emu") / "cases.bin"
    return cases, C.write_cases(cases)


@pytest.fixture(scope="module")
def report(case_file: tuple[Path, int]) -> tuple[E.Report, int]:
    cases, n = case_file
    rep = E.check_all(cases, work=cases.parent)
    # The figures of the last run, for whoever reads the build folder.
    out = E.ROOT / "build" / "kernels-emu" / "last-report.txt"
    out.write_text(f"{n} records\n" + "\n".join(rep.lines) + "\n")
    return rep, n


def _summary(run: E.Run) -> dict[str, int]:
    m = re.search(r"replay: (\d+) cases .*?(\d+) mismatched .*?(\d+) failed", run.output)
    assert m, run.output[-4000:]
    return {"cases": int(m[1]), "mismatched": int(m[2]), "failed": int(m[3])}


def test_every_case_equals_the_cpu_twin_under_asan_and_ubsan(report):
    rep, n = report
    assert rep.asan.returncode == 0, "\n".join(rep.lines)
    assert "self-test: 20 checks, 0 failed" in rep.asan.output
    assert _summary(rep.asan) == {"cases": n, "mismatched": 0, "failed": 0}
    # The GPU tests' cases: 89 resize, 254 decode, 189 colour and 257 pad calls, among others;
    # every launcher of csrc/image/*.cu among them.
    assert n > 750
    ops = set(re.search(r"replay: \d+ cases \(([^)]*)\)", rep.asan.output)[1].replace(",", "").split()[::2])
    assert ops == {"resize", "pad", "color", "decode"}


def test_shared_memory_kernels_are_race_free_under_tsan(report):
    rep, _ = report
    assert rep.tsan is not None, "\n".join(rep.lines)
    assert rep.tsan.returncode == 0, "\n".join(rep.lines)
    s = _summary(rep.tsan)
    assert s["cases"] == len(rep.tsan_cases) >= 20 and s["mismatched"] == s["failed"] == 0
    # Both arithmetics and every filter of resample_kernel, multi-chunk blocks among them.
    for filt in ("bilinear-aa", "bicubic-aa", "box-aa", "bilinear-noaa"):
        assert any(f"[{filt}-(2, 89, 1)" in c for c in rep.tsan_cases), filt
    # The colour ops' contrast sum (band_kernel's tree), gray and RGB, one band and several.
    for shape in ("(1, 29, 31)", "(3, 37, 53)", "(3, 2, 40000)"):
        assert any(c.startswith(f"test_colour_op_equals_cpu[{shape}-adjust_contrast-") for c in rep.tsan_cases), shape
    assert "test_color_jitter_class_on_a_cuda_batch_equals_cpu#1" in rep.tsan_cases


def test_deliberate_kernel_bugs_are_caught(report):
    rep, _ = report
    assert [m.name for m, *_ in rep.mutants] == [m.name for m in E.MUTATIONS]
    missed = [f"{m.name}: {why}" for m, caught, why, _ in rep.mutants if not caught]
    assert not missed, "\n".join(rep.lines)


def test_the_case_file_holds_every_gpu_test_case(case_file):
    """Every parametrization of the GPU tests is recorded, under its test's name."""
    import test_image_gpu as D  # on sys.path once the case file is written (cases.write_cases)
    import test_transforms_gpu as G
    import test_transforms_v2_gpu as V

    path, n = case_file
    text = path.read_bytes()
    labels = re.findall(rb"^case (.+)#\d+$", text, re.MULTILINE)
    assert len(labels) == n
    by_test = {}
    for lab in labels:
        by_test.setdefault(lab.split(b"[")[0].decode(), set()).add(lab)
    assert len(by_test["test_resize_equals_cpu"]) == len(G.FILTERS) * len(G.RESIZE_SHAPES)
    assert len(by_test["test_fused_equals_cpu"]) == len(G.FILTERS) * len(G.FUSED_DTYPES)
    assert len(by_test["test_device_windows_equal_host_windows"]) == len(G.FILTERS)
    decodable = len(by_test["test_kernels_equal_the_cpu_twin"])
    assert 0.8 * len(D.MODES) * len(D.pixel_cases()) <= decodable <= len(D.MODES) * len(D.pixel_cases())
    for t in ("test_list_of_different_sizes_is_one_launch_per_stage", "test_batch_larger_than_one_launch",
              "test_batch_tensor_and_crop_views", "test_one_launch_per_128_images", "test_big_image_and_side_stream"):
        assert t in by_test, t
    # The v2 GPU tests (colour ops, color_jitter, pad): every case but those of a gray
    # image that saturation and hue leave as it is (torchvision's rule: no kernel runs).
    recorded = {lab.decode() for lab in labels}
    idle = [name for name, _ in V.emulated_cases() if "[(1, " in name and ("saturation" in name or "hue" in name)]
    expected = [name for name, _ in V.emulated_cases() if name not in idle]
    assert len(idle) == 2 * len(V.DTYPES)
    assert not [name for name in expected if name not in recorded]
    assert not [name for name in idle if name in recorded]
    assert len(by_test["test_pad_equals_cpu"]) == len(V.PADDINGS) * len(V.PAD_MODES) * len(V.PAD_DTYPES)


# ---- the rewrite of the kernel sources ---------------------------------------------------------

SAMPLE = """// a comment with k<<<1, 1>>>() and __shared__ int no;
template <int N>
__global__ void k(const __grid_constant__ Table<N, 2> t, int* out) {
  __shared__ float tile[32][33];
  extern __shared__ unsigned char dyn[];
  out[0] = t.v + (int)tile[0][0] + dyn[0];
}
void launch(int* o, cudaStream_t s) {
  k<4><<<dim3(2, 3),
         256, 0, s>>>(make_table(f(1, 2)),
                      o);
  ns::other<<<1, 1>>>();
  const char* text = "x<<<y>>>(z)";
}
"""


def test_rewrite_keeps_every_line_and_changes_only_cuda_syntax():
    out = E.rewrite(SAMPLE, "/src/k.cu")
    head, body = out.split("\n", 1)
    assert head == '#line 1 "/src/k.cu"'
    assert body.count("\n") == SAMPLE.count("\n")
    lines = body.splitlines()
    assert lines[0] == SAMPLE.splitlines()[0]  # comments untouched
    assert "const Table<N, 2>& t, int* out" in lines[2]
    assert lines[3].endswith("__shared__ float tile[32][33]; ::gdsio_emu::shared_array(&tile, sizeof(tile), __LINE__);")
    assert "unsigned char* const dyn = ::gdsio_emu::dynamic_shared<unsigned char>();" in lines[4]
    assert lines[8].startswith('  ::gdsio_emu::Launch({"k<4>", __FILE__, __LINE__}, dim3(2, 3),')
    assert lines[9].strip() == "256, 0, s).run([&](auto&... gdsio_emu_p) { k<4>(gdsio_emu_p...); }, make_table(f(1, 2)),"
    assert lines[10].strip() == "o);"
    assert '::gdsio_emu::Launch({"ns::other", __FILE__, __LINE__}, 1, 1).run(' in lines[11]
    assert lines[11].endswith("{ ns::other(gdsio_emu_p...); });")
    assert lines[12] == '  const char* text = "x<<<y>>>(z)";'  # strings untouched


@pytest.mark.parametrize(
    "text,error",
    [
        ("__global__ void k() { __shared__ int a[2], b[2]; }", "one variable per __shared__ declaration"),
        ("__global__ void k(__grid_constant__ S s) {}", "must be 'const __grid_constant__ T name'"),
        ("void f() { k<<<1, 1>>>; }", "no argument list after >>>"),
        ("void f() { k<<<1, 1(); }", "<<< without >>>"),
    ],
)
def test_rewrite_refuses_what_it_cannot_emulate(text, error):
    with pytest.raises(E.RewriteError, match=re.escape(error)):
        E.rewrite(text, "k.cu")


def test_mutations_change_only_their_kernel():
    for m in E.MUTATIONS:
        before = m.source.read_text()
        after = m.apply(before)
        assert after != before and after.count("\n") == before.count("\n")
        diff = [(a, b) for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
        assert len(diff) == 1 and m.new in diff[0][1], m.name
        assert Path(m.source).is_relative_to(E.CSRC)
