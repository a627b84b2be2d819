#!/usr/bin/env bash
# The Quickstart's first line on a fresh machine, timed: a fresh clone of HEAD, a
# fresh venv with the CPU torch (the Quickstart's step before it), then
# `pip install .` and `gdsio demo`; then a second venv installing from the same
# clone (the build folder reused). Wall time and the CPU time of each command
# (user + sys of it and its children, from /usr/bin/time), the load average
# around it, and how many compile steps each install ran (ninja's log).
# Usage: bash bench/install_time.sh [REPORT.md]   (default: print the report)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-/dev/stdout}
work=$(mktemp -d /tmp/gdsio-install-XXXXXX)
trap 'rm -rf "$work"' EXIT
git clone -q --no-local "$repo" "$work/clone"
commit=$(git -C "$work/clone" rev-parse --short HEAD)
rows=()

timed() {  # timed LABEL CMD...: runs CMD, appends a row with wall and CPU seconds
  local label=$1; shift
  local load0; load0=$(cut -d' ' -f1 /proc/loadavg)
  /usr/bin/time -f "%e %U %S" -o "$work/t" "$@" > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  read -r wall user sys < "$work/t"
  rows+=("| $label | ${wall} s | $(python3 -c "print(round($user + $sys, 1))") s | $load0 -> $(cut -d' ' -f1 /proc/loadavg) |")
}

compiles() {  # compile steps ninja has logged so far in the clone's build folders
  cat "$work"/clone/build/*/.ninja_log 2>/dev/null | grep -vc '^#' || true
}

venv() {
  python3 -m venv "$work/$1"
  "$work/$1/bin/python" -m pip install -q --upgrade pip
  "$work/$1/bin/python" -m pip install -q "torch==2.13.0"
}

venv a
cd "$work/clone"
n0=$(compiles)
timed "\`pip install --no-cache-dir .\` (fresh clone, fresh venv)" "$work/a/bin/python" -m pip install -q --no-cache-dir .
n1=$(compiles)
mkdir -p "$work/demo" && cd "$work/demo"
timed "\`gdsio demo\`" "$work/a/bin/gdsio" demo
demo_tail=$(tail -3 "$work/log")
cd "$work/clone"
venv b
timed "\`pip install --no-cache-dir .\` again, second venv, same clone" "$work/b/bin/python" -m pip install -q --no-cache-dir .
n2=$(compiles)
archs=$("$work/b/bin/python" -P -c "import gdsio._core as c; print(c.cuda_architectures or '(built without CUDA)')")

{
  echo "# Install time: the Quickstart's first line"
  echo
  echo "- Machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) vCPUs, $(command -v nvcc >/dev/null && nvcc --version | grep -o 'release [0-9.]*' || echo 'no nvcc'), $(python3 --version)"
  echo "- Commit: $commit (a fresh \`git clone\`: no build folder of an earlier install); $(date -u +%Y-%m-%d)"
  echo "- Command: \`bash bench/install_time.sh\`; each venv fresh, with \`pip install torch==2.13.0\` first (the Quickstart's CPU torch), no pip cache"
  echo "- CUDA architectures built: $archs"
  echo
  echo "| step | wall | CPU (user+sys) | load average before -> after |"
  echo "| --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Compile steps (ninja): first install $((n1 - n0)), second install $((n2 - n1))."
  echo
  echo "\`gdsio demo\`'s last lines:"
  echo
  echo '```text'
  echo "$demo_tail"
  echo '```'
} > "$out"
