#!/usr/bin/env bash
# The one script run on a lent GPU machine (see ../shared/device/README.md); the
# steps, their budget and the report are in bench/device_check.py (its docstring
# lists the knobs). It fits one 15-minute lease with room for a rerun: the whole
# check keeps to GDSIO_CHECK_BUDGET seconds of wall time (420), the carried wheels'
# install and the build included, so two calls and a machine start fit 900 s.
#
# On the GPU machine, from the repository root, one `run` call with carry [".whl"]
# (../shared/device/fetch-wheels.sh fills it) and timeout_s 450:
#
#   GDSIO_COMMIT=<sha> PYTHONUNBUFFERED=1 bash bench/device_check.sh
#
# It installs .whl/*.whl into /tmp/site (pip --no-index --no-deps --target, put on
# PYTHONPATH), builds gdsio for sm_90 alone without build isolation into
# /tmp/gdsio-site, then runs in priority order: import, doctor, the GPU kernel
# tests, one read per backend and destination, nvJPEG, the loader, the figures;
# then, if time is left, the other GPU tests and the copy benchmarks. A step
# starts only if its estimate fits in what is left (else it is cut, and the
# report says so) and runs under min(its cap, what is left). Report under $OUT:
# report.md, report.json, steps.log, doctor.json, figures.json, loader-profile.json,
# bench-*.json. A test process that dies of a signal is followed by that test again
# under gdb (its backtrace in the report); cuFile's ERROR log lines go in the report.
#
# On a machine without a GPU, a dry run stubs the GPU steps and times the rest
# (the build included), and its report projects the budget on the H200 machine:
#
#   bash bench/device_check.sh --dry-run      # or GDSIO_CHECK_DRY_RUN=1
#
# Without $OUT the report goes to ./device-check-out (git-ignored).
set -u
REPO=$(cd "$(dirname "$0")/.." && pwd)
exec "${GDSIO_CHECK_PYTHON:-python3}" "$REPO/bench/device_check.py" "$@"
