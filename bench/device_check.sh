#!/usr/bin/env bash
# The one script run on a lent GPU machine (see ../shared/device/README.md).
# From the repository root, after the carried wheels are installed into /tmp/site:
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl \
#     && export PYTHONPATH=/tmp/site; GDSIO_COMMIT=<sha> PYTHONUNBUFFERED=1 bash bench/device_check.sh
#
# The machine's image has torch, torchvision, cupy, nvidia-cufile, safetensors,
# hypothesis, matplotlib and scikit-image (/work/.library/device/KINDS.md);
# kvikio and nvJPEG travel as wheels: `../shared/device/fetch-wheels.sh` (no
# extra names; carrying a package the image has would shadow its copy).
# Call `run` with carry [".whl"] and timeout_s about 60 s above GDSIO_CHECK_BUDGET.
# (A test module whose imports fail is reported, and the other GPU tests still run.)
#
# Builds gdsio for sm_90 only into /tmp/gdsio-site (GDSIO_CHECK_SITE), runs the GPU tests, the
# issues' headline figures (bench/figures.py), doctor and the copy-path
# benchmarks (warm and cold), and writes under $OUT (8 files):
#   report.md  steps.log  figures.json  doctor.json  bench-warm.json  bench-warm.png  bench-cold.json  bench-cold.png
# (figures.md, doctor and bench renders stay in a scratch folder: report.md holds them)
# Every step runs under its own time limit and a failure never stops the next
# step: report.md lists each step's exit code. The whole script keeps to a
# budget (GDSIO_CHECK_BUDGET seconds, default 500): a step is cut to what is
# left and skipped when too little is, so the device call ends in time and
# the report still comes back. Give `run` a timeout_s about 60 s above the
# budget (the wheel install before the script, the kill grace of a step, the
# last report). .git does not travel: pass GDSIO_COMMIT=<sha>. Knobs: GDSIO_CHECK_SIZES (64M,512M),
# GDSIO_CHECK_REPEAT (3), GDSIO_CHECK_IMAGES (JPEGs for the loader figures,
# 4096), GDSIO_BENCH_DIR (where the benchmark files go), GDSIO_CHECK_TEST_TIMEOUT
# (seconds a GPU test may take, 60; needs pytest-timeout, which the image has).
# The GPU tests run in two steps, the kernel tests first (every CUDA kernel and
# nvJPEG against the CPU twin and Pillow), then the rest; report.md lists what
# was skipped (steps, tests) and why.
# Without $OUT (a dry run on a CPU machine) it writes to ./device-check-out.

set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/device-check-out}
mkdir -p "$OUT"
SITE=${GDSIO_CHECK_SITE:-/tmp/gdsio-site}  # where the build is installed (a dry run may keep its own)
RUN=$(mktemp -d /tmp/gdsio-run.XXXXXX)  # not the repo root: `import gdsio` finds the installed build
LOG=$OUT/steps.log
REPORT=$OUT/report.md
SIZES=${GDSIO_CHECK_SIZES:-64M,512M}
REPEAT=${GDSIO_CHECK_REPEAT:-3}
IMAGES=${GDSIO_CHECK_IMAGES:-4096}
BUDGET=${GDSIO_CHECK_BUDGET:-500}
TEST_TIMEOUT=${GDSIO_CHECK_TEST_TIMEOUT:-60}
COMMIT=${GDSIO_COMMIT:-$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)}
export GDSIO_COMMIT=$COMMIT
export PYTHONPATH=$SITE${PYTHONPATH:+:$PYTHONPATH}
# No network there: pip must not look for itself or for packages online.
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_NO_INPUT=1
# A GPU test that skips there is a failure of the check, not a pass (conftest).
export GDSIO_REQUIRE_GPU=1
START=$(date +%s)
: >"$LOG"

# Python from $RUN, never from the repo root, whose gdsio/ has no compiled core.
py() { (cd "$RUN" && python3 "$@"); }

# step NAME SECONDS CMD...: runs CMD from $RUN under a time limit, logs it, records the exit code.
STEPS=()
step() {
  local name=$1 limit=$2 t0 rc left
  shift 2
  left=$(( BUDGET - ($(date +%s) - START) ))
  local cmd="$*"
  if [ "$left" -lt 15 ]; then
    STEPS+=("| $name | SKIPPED: the ${BUDGET}s budget is spent | 0s | \`${cmd//|/\\|}\` |")
    echo "[$(date +%T)] $name: skipped, budget spent"
    write_report
    return 0
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s)
  printf '\n===== %s (limit %ss): %s\n' "$name" "$limit" "$*" >>"$LOG"
  (cd "$RUN" && timeout -k 10 "$limit" "$@") >>"$LOG" 2>&1
  rc=$?
  local took=$(( $(date +%s) - t0 ))
  local what="ok"
  [ "$rc" -ne 0 ] && what="FAILED (exit $rc)"
  [ "$rc" -eq 124 ] && what="TIMED OUT after ${limit}s"
  STEPS+=("| $name | $what | ${took}s | \`${cmd//|/\\|}\` |")
  echo "[$(date +%T)] $name: $what in ${took}s"
  write_report
  return 0
}

write_report() {
  # Results are written in $RUN and copied here whole: a step killed mid-write
  # leaves no stray temporary file in $OUT (8 files at most come back).
  local f
  for f in figures.json bench-warm.json bench-warm.png bench-cold.json bench-cold.png; do
    [ -s "$RUN/$f" ] && [ "$RUN/$f" -nt "$OUT/$f" ] && cp "$RUN/$f" "$OUT/$f"
  done
  {
    echo "# gdsio device check"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ) (started $(date -u -d @"$START" +%H:%M:%S) UTC)"
    echo "- commit: $COMMIT (as given by GDSIO_COMMIT; the working tree sent may hold uncommitted changes)"
    local gpu
    gpu=$(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
    echo "- machine: ${gpu:-no GPU (nvidia-smi gave nothing)}; $(nproc) CPUs; kernel $(uname -r)"
    echo "- python: $(python3 --version 2>&1); benchmark files in: ${BENCH_DIR:-?}"
    echo "- script: bench/device_check.sh (sizes $SIZES, repeat $REPEAT); full logs: steps.log"
    echo "- per-test time limit: ${TIMEOUT_NOTE:-not decided yet}"
    [ -s "$RUN/nvjpeg.txt" ] && echo "- nvJPEG loaded: $(cat "$RUN/nvjpeg.txt")"
    echo
    echo "| step | result | time | command |"
    echo "| --- | --- | --- | --- |"
    printf '%s\n' "${STEPS[@]}"
    if [ -s "$RUN/figures.md" ]; then
      echo
      echo "## The issues' figures (bench/figures.py, same run)"
      echo
      cat "$RUN/figures.md"
    fi
    for mode in warm cold; do
      if [ -s "$RUN/bench-$mode.json" ]; then
        echo
        echo "## gdsio bench, $mode"
        echo
        # Rendered once per new JSON (python and gdsio take seconds to start).
        [ "$RUN/bench-$mode.json" -nt "$RUN/bench-$mode.md" ] && \
          py -c 'import json, sys; from gdsio.tools.bench import render_markdown; print(render_markdown(json.load(open(sys.argv[1]))))' \
          "$RUN/bench-$mode.json" >"$RUN/bench-$mode.md" 2>&1
        cat "$RUN/bench-$mode.md"
        [ -s "$OUT/bench-$mode.png" ] && echo "![bench $mode](bench-$mode.png)"
      fi
    done
    if [ -s "$OUT/doctor.json" ]; then
      echo
      echo "## gdsio doctor"
      echo
      echo '```'
      [ "$OUT/doctor.json" -nt "$RUN/doctor.md" ] && \
        py -c 'import json, sys; from gdsio.tools.doctor import render_doctor; print(render_doctor(json.load(open(sys.argv[1])), columns=110))' \
        "$OUT/doctor.json" >"$RUN/doctor.md" 2>&1
      cat "$RUN/doctor.md"
      echo '```'
    fi
    local part
    for part in "kernels" "the rest"; do
      grep -q "^===== pytest -m gpu, $part" "$LOG" || continue
      echo
      echo "## pytest -m gpu, $part (summary)"
      echo
      echo '```'
      sed -n "/^===== pytest -m gpu, $part/,/^===== /p" "$LOG" \
        | grep -E '^(FAILED|ERROR)|[0-9]+ (passed|failed|skipped|deselected|error)|^E  |Timeout' | tail -60
      echo '```'
    done
    # What did not run, and why: steps cut by the budget, tests pytest skipped
    # (its -rs summary: one line per reason), a per-test limit that is missing.
    echo
    echo "## Skipped, and why"
    echo
    local skipped
    skipped=$( { printf '%s\n' "${STEPS[@]}" | grep -F '| SKIPPED' \
                   | awk -F'|' '{gsub(/^ +| +$/, "", $2); gsub(/^ +| +$/, "", $3); print "- step " $2 ": " $3}'
                 sed -n '/^===== pytest -m gpu/,/^===== [^p]/p' "$LOG" | grep -E '^SKIPPED \[' | sed 's/^/- test: /'
                 case "${TIMEOUT_NOTE:-}" in none*) echo "- per-test limit: $TIMEOUT_NOTE" ;; esac; } 2>/dev/null)
    echo "${skipped:-nothing was skipped}"
    if grep -q '^===== pytest-benchmark' "$LOG"; then
      echo
      echo "## pytest-benchmark, bench/ (times, not GB/s)"
      echo
      echo '```'
      sed -n '/^===== pytest-benchmark/,$p' "$LOG" | grep -E '^(test_|Name|-+ benchmark|FAILED|ERROR)|[0-9]+ (passed|failed|skipped|error)' | tail -40
      echo '```'
    fi
  } >"$RUN/report.md.tmp" 2>&1  # not in $OUT: a file left there by a kill would cost one that comes back
  mv "$RUN/report.md.tmp" "$REPORT"
}

# A directory for the benchmark files: a real disk (ext4/xfs) where O_DIRECT works beats tmpfs.
pick_bench_dir() {
  py - "$@" <<'EOF'
import os, sys
from gdsio.platform import filesystems
best = None
for d in sys.argv[1:]:
    if not os.path.isdir(d) or not os.access(d, os.W_OK):
        continue
    fs = filesystems.filesystem_of(d)["fs_type"]
    rank = (fs in ("ext4", "xfs")) * 2 + filesystems.o_direct_probe(d)["ok"]
    if best is None or rank > best[0]:
        best = (rank, d)
print(best[1] if best else "/tmp")
EOF
}

echo "gdsio device check: commit $COMMIT, output in $OUT"
step "machine" 20 bash -c 'nvidia-smi; echo; df -hT /tmp /dev/shm "$0"; free -g; echo; nvcc --version | tail -2; cmake --version | head -1; \
  python3 -m pip list 2>/dev/null | grep -i -E "^(torch|torchvision|numpy|pillow|cupy[-a-z0-9]*|kvikio[-a-z0-9]*|libkvikio[-a-z0-9]*|nvidia-cufile[-a-z0-9]*|nvidia-nvjpeg[-a-z0-9]*|cuda-pathfinder|matplotlib|rich|pytest|pytest-benchmark|hypothesis|safetensors|scikit-image|opencv[-a-z]*|pybind11|scikit-build-core|ninja|cmake) "' "$REPO"
# CUDA required (a build that found no nvcc would pass every GPU test by skipping it); all cores.
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
step "build (sm_90, pip --target)" 240 env GDSIO_WITH_CUDA=ON GDSIO_CUDA_ARCHITECTURES=90-real ${NVCC:+CUDACXX=$NVCC} \
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
  python3 -m pip install --no-build-isolation --no-deps --no-compile --upgrade -q --target "$SITE" "$REPO"
step "import" 30 python3 -c 'import gdsio, gdsio._core as c, gdsio.image as gi; print(gdsio.__file__, c.cuda_architectures, c.cuda_status(), c.kernel_probe(0) or "kernel probe ok"); print("cufile:", gdsio.backends()); print("nvjpeg:", gi.nvjpeg_status(), gi.nvjpeg_backends(0))'
# The nvJPEG that loaded (the wheels must match the driver: 13.0.x for 580), for the report's head.
py - >"$RUN/nvjpeg.txt" 2>>"$LOG" <<'EOF'
import gdsio.image as gi
s = gi.nvjpeg_status()
built = s.get("cudart_version")
if s["loaded"]:
    print(f"{s['library']}: nvJPEG {'.'.join(map(str, s['version']))}"
          + (f", built for CUDA {'.'.join(map(str, built))}" if built else ""))
else:
    print("none: " + s["reason"])
EOF
BENCH_DIR=${GDSIO_BENCH_DIR:-$(pick_bench_dir /tmp /var/tmp "$REPO" 2>>"$LOG")}
BENCH_DIR=${BENCH_DIR:-/tmp}
# doctor exits 1 where true GDS is not used (a finding, in doctor.json), not a failed step: 2+ is.
step "doctor" 30 bash -c 'python3 -m gdsio.tools.cli doctor "$0" --json >"$1"; rc=$?; python3 -m gdsio.tools.cli doctor "$0"; [ $rc -le 1 ]' \
  "$BENCH_DIR" "$OUT/doctor.json"
# A per-test limit (pytest-timeout): a hung test costs its limit, not the whole step.
TIMEOUT_ARGS=()
if py -c 'import pytest_timeout' 2>/dev/null; then
  TIMEOUT_ARGS=(--timeout "$TEST_TIMEOUT")
  TIMEOUT_NOTE="${TEST_TIMEOUT}s a test (pytest-timeout)"
else
  TIMEOUT_NOTE="none: pytest-timeout is not installed (faulthandler dumps a hung test's stacks after 60s)"
fi
echo "per-test time limit: $TIMEOUT_NOTE" >>"$LOG"
# -v: a line per test in steps.log even if the step is cut; faulthandler dumps a hung test's stacks.
GPU_PYTEST=(python3 -m pytest -c "$REPO/pyproject.toml" --rootdir "$REPO" -p no:cacheprovider -m gpu -v -rfEs
  --durations=15 -o faulthandler_timeout=60 ${TIMEOUT_ARGS[@]+"${TIMEOUT_ARGS[@]}"} --continue-on-collection-errors)
# The kernel tests first: every CUDA kernel against the CPU twin, nvJPEG against Pillow.
KERNEL_TESTS=("$REPO/tests/transforms/test_transforms_gpu.py" "$REPO/tests/transforms/test_transforms_v2_gpu.py"
  "$REPO/tests/image/test_image_gpu.py")
IGNORE_KERNEL_TESTS=()
for t in "${KERNEL_TESTS[@]}"; do IGNORE_KERNEL_TESTS+=(--ignore "$t"); done
step "pytest -m gpu, kernels" 90 "${GPU_PYTEST[@]}" --basetemp "$BENCH_DIR/gdsio-pytest-kernels" "${KERNEL_TESTS[@]}"
step "pytest -m gpu, the rest" 120 "${GPU_PYTEST[@]}" --basetemp "$BENCH_DIR/gdsio-pytest-gpu" \
  "${IGNORE_KERNEL_TESTS[@]}" "$REPO/tests"
step "figures" 200 python3 "$REPO/bench/figures.py" --images "$IMAGES" --tmpdir "$BENCH_DIR" --json "$RUN/figures.json" \
  --md "$RUN/figures.md"
PLOT=1
python3 -c 'import matplotlib' 2>/dev/null || { PLOT=0; echo "matplotlib missing: no plots" >>"$LOG"; }
for mode in warm cold; do
  args=(bench --sizes "$SIZES" --repeat "$REPEAT" "--$mode" --tmpdir "$BENCH_DIR" --json "$RUN/bench-$mode.json")
  [ "$PLOT" = 1 ] && args+=(--plot "$RUN/bench-$mode.png")
  step "bench $mode" 90 python3 -m gdsio.tools.cli "${args[@]}"
done
# Last: the pytest-benchmark suites repeat what the steps above measure; they show the harness works.
step "pytest-benchmark bench/ (64M)" 45 env GDSIO_BENCH_SIZES=64M python3 -m pytest \
  -c "$REPO/pyproject.toml" --rootdir "$REPO" -p no:cacheprovider -q "$REPO/bench" --benchmark-max-time=0.5 \
  --benchmark-columns=median,rounds --basetemp "$BENCH_DIR/gdsio-pytest-bench"

write_report
rm -rf "$RUN"
echo "done in $(( $(date +%s) - START ))s; report: $REPORT"
cat "$REPORT"
