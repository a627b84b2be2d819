"""Progress people can see: ``gdsio demo`` draws a tqdm bar (rate, time
left) on a terminal and plain lines on a pipe, with a summary per epoch;
``gdsio bench`` prints each row as it is measured. The commands run as
subprocesses, their output read as it arrives (a pty for the terminal)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time

import pytest

from gdsio.tools import bench
from gdsio.tools import demo

GDSIO = [sys.executable, "-P", "-m", "gdsio"]


@pytest.fixture
def small_folder(tmp_path):
    demo.write_jpeg_folder(str(tmp_path), classes=2, per_class=6, size=(64, 48))
    return str(tmp_path)


def run_on_a_terminal(argv, timeout=120.0):
    """Runs argv with stdout on a pty of 100 columns; returns what it wrote and its exit code."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
    proc = subprocess.Popen(argv, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
        err = proc.stderr.read().decode()
        proc.stderr.close()
    return b"".join(chunks).decode(errors="replace"), code, err


def test_demo_draws_a_bar_on_a_terminal(small_folder):
    out, code, err = run_on_a_terminal([*GDSIO, "demo", small_folder, "--device", "cpu", "--batch-size", "4",
                                        "--no-train", "--epochs", "2"])
    assert code == 0, err
    assert "\r" in out  # redrawn in place
    # tqdm's bar: percentage, bar, count of images, elapsed<left, rate, and the batch.
    bars = re.findall(r"epoch (\d): +(\d+)%\|[^|]*\| (\d+)/12 img \[\d\d:\d\d<\d\d:\d\d, +[\d.]+img/s, batch (\d)/3\]", out)
    assert {(e, p, n, b) for e, p, n, b in bars} >= {("0", "100", "12", "3"), ("1", "100", "12", "3")}
    for epoch in (0, 1):
        assert re.search(rf"epoch {epoch} done: 12 images in [\d.]+ s, [\d.]+ images/s; the loop \(no consumer work\) "
                         r"waited for data [\d.]+% of the time; I/O: posix \(12 reads\); decode: (?:libjpeg-turbo-box|libjpeg-turbo|simplejpeg) \(12 images\)", out)
    assert "batches, " not in out  # no plain lines on a terminal


def test_demo_prints_plain_lines_on_a_pipe(small_folder):
    r = subprocess.run([*GDSIO, "demo", small_folder, "--device", "cpu", "--batch-size", "2", "--no-train"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "\r" not in r.stdout and "\x1b" not in r.stdout and "%|" not in r.stdout
    lines = [line for line in r.stdout.splitlines() if line.startswith("epoch 0: ")]
    # A line at each quarter of the epoch (6 batches: every batch), the last one complete.
    assert len(lines) == 6 and lines[-1].startswith("epoch 0: 6/6 batches, 12/12 images, ")
    assert re.fullmatch(r"epoch 0: 6/6 batches, 12/12 images, \d+ images/s, \d+ s left", lines[-1])
    assert re.search(r"^epoch 0 done: 12 images in .* I/O: posix \(12 reads\); decode: (?:libjpeg-turbo-box|libjpeg-turbo|simplejpeg) \(12 images\)$", r.stdout, re.M)
    assert r.stderr == ""


# ----------------------------------------------------------------------------- bench


def test_bench_rows_reach_the_callback_as_they_are_measured(tmp_path):
    gen = bench.generate_files([4096, 8192], str(tmp_path))
    seen = []

    def on_row(row, done, total):
        seen.append((row.get("path") or row.get("name"), done, total, time.perf_counter()))

    cfg = bench.BenchConfig(repeat=1, paths=("numpy-fromfile", "gdsio-posix"))
    try:
        doc = bench.run_bench(gen.files, cfg, on_row=on_row)
    finally:
        gen.tmpdir.cleanup()
    ended = time.perf_counter()
    total = 2 * len(bench.CEILINGS) + 2 * 2
    assert [d for _, d, _, _ in seen] == list(range(1, total + 1)) and {t for _, _, t, _ in seen} == {total}
    assert [n for n, _, _, _ in seen[: 2 * len(bench.CEILINGS)]] == list(bench.CEILINGS) * 2
    assert [n for n, _, _, _ in seen[2 * len(bench.CEILINGS):]] == ["numpy-fromfile", "gdsio-posix"] * 2
    assert all(t < ended for *_, t in seen) and len(doc["results"]) == 4
    line = bench.format_row(doc["results"][-1], total, total)
    assert line.startswith(f"[{total}/{total}] 8 KiB  gdsio-posix (host)") and "GB/s" in line


def parse_documents(text: str) -> list[dict]:
    """The JSON documents in text, in order (one read can hold several)."""
    docs, at, decoder = [], 0, json.JSONDecoder()
    while at < len(text):
        while at < len(text) and text[at].isspace():
            at += 1
        if at < len(text):
            doc, at = decoder.raw_decode(text, at)
            docs.append(doc)
    return docs


def rows_in(doc: dict) -> int:
    return len(doc["ceilings"]) + len(doc["results"])


def read_documents(fifo, proc, timeout=60.0) -> list[dict]:
    """Opens the FIFO to read (which lets the command's open() to write return),
    reads until the command has written and closed it, closes it; returns the
    documents read. Never blocks: the open is non-blocking, and a command that
    exits without writing again gives []."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            exited = proc.poll() is not None  # checked before the read, so nothing written before the exit is missed
            select.select([fd], [], [], 0.05)
            data = os.read(fd, 1 << 16)
            if data:
                chunks.append(data)
            elif chunks or exited:  # the end after data: every writer has closed it
                return parse_documents(b"".join(chunks).decode())
            else:
                time.sleep(0.01)  # no writer yet: the end is reported at once
        raise AssertionError(f"nothing written to {fifo} in {timeout} s and the command still runs")
    finally:
        os.close(fd)


class _FifoRace(Exception):
    """The command wrote into the FIFO just as this reader closed it, and ended
    with the broken pipe (exit 141): the FIFO's race, not the command's."""


def test_bench_prints_each_row_before_measuring_the_next(tmp_path):
    """--json to a FIFO: after each row the command writes the document so far
    there, which blocks in open() until this test opens the FIFO to read. So
    each row line must have reached the pipe (flushed) while the command waits,
    before the next row.

    Two races are the FIFO's, not the command's: between this reader's end of
    file and its close, the command may open the FIFO again (a reader is still
    there) and write the next document. That document goes when the pipe
    closes; the documents are cumulative, so a read that finds a later row's
    document where row k's was due is that race, and the later rows' lines must
    be there. Or its write comes after the close and fails with a broken pipe,
    which ends the command (exit 141): that attempt is run again, a few times."""
    for attempt in range(5):
        try:
            return _bench_rows_through_a_fifo(tmp_path / f"attempt{attempt}")
        except _FifoRace:
            continue
    raise AssertionError("the command lost the FIFO race (exit 141) in 5 attempts out of 5")


def _bench_rows_through_a_fifo(tmp_path):
    tmp_path.mkdir()
    fifo = tmp_path / "doc.json"
    os.mkfifo(fifo)
    paths = "numpy-fromfile,gdsio-posix"
    proc = subprocess.Popen([*GDSIO, "bench", "--sizes", "4K", "--repeat", "1", "--paths", paths, "--json", str(fifo),
                             "--tmpdir", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killer = threading.Timer(120, proc.kill)
    killer.start()
    try:
        total = len(bench.CEILINGS) + 2
        newest = 0  # rows in the newest document read
        counts: list[int] = []
        for k in range(1, total + 1):
            line = proc.stdout.readline()
            while line and not line.startswith("  ["):
                line = proc.stdout.readline()  # the header line
            assert line.startswith(f"  [{k}/{total}] 4 KiB "), line
            if newest >= k:
                continue  # row k's document came with an earlier read (the race above)
            assert proc.poll() is None  # still running: blocked on the FIFO until read below
            got = [rows_in(d) for d in read_documents(str(fifo), proc)]
            if not got and proc.poll() == 141:
                raise _FifoRace()
            assert got and got[0] >= k, (k, got)  # row k's document, or a later one if row k's went in the race
            counts += got
            newest = got[-1]
        if counts.count(total) < 2:  # the final document has not come yet (or went in the race)
            counts += [rows_in(d) for d in read_documents(str(fifo), proc)]
        if proc.poll() == 141:
            raise _FifoRace()
        assert counts == sorted(counts) and counts[-1] == total and set(counts) <= set(range(1, total + 1)), counts
        assert len(set(counts)) > total // 2  # the race costs a document now and then; most blocked until read
        rest = proc.stdout.read()
        assert proc.wait() == 0, proc.stderr.read()
        assert "Ceilings measured in this run" in rest and "Into host memory" in rest  # the final table
    finally:
        killer.cancel()
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
