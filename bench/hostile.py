"""Hostile files: a bounded stress run of gdsio's readers over mutated and
special inputs, with the counts that must stay zero.

Each input is read by the gdsio entry point of its kind (load_npy,
load_safetensors, image.read) in a worker thread with a time limit; where a
reference reader exists (numpy.load, safetensors.torch.load_file, Pillow) its
verdict is compared. Then a rename-swap race (two images renamed over one path
while it is read). Printed: inputs tried per kind, accepted, refused by
reason, and hangs, errors of another type than ValueError/OSError, reference
disagreements, mixed reads, leaked fds and threads: all must be 0 (the exit
status is 1 otherwise). A crash ends the process: that is a count too.

    python bench/hostile.py --cases 2000 --seed 0 [--json]

tests/tools/test_hostile_stress.py runs a short version.
"""

from __future__ import annotations

import argparse
import collections
import io
import json
import os
import random
import re
import socket
import struct
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Callable

import numpy as np

import gdsio
import gdsio.image as gi

KINDS = ("npy", "jpeg", "pnm", "safetensors", "raw")


# --------------------------------------------------------------------------- inputs


def _npy_seeds() -> list[bytes]:
    out = []
    for a in (np.arange(12, dtype="<f4").reshape(3, 4), np.asfortranarray(np.arange(24, dtype=">u2").reshape(2, 3, 4)),
              np.zeros((4, 5, 3), np.uint8), np.array(7, "<i8")):
        for v in ((1, 0), (2, 0), (3, 0)):
            b = io.BytesIO()
            np.lib.format.write_array(b, a, version=v)
            out.append(b.getvalue())
    return out


def _jpeg_seeds() -> list[bytes]:
    from PIL import Image

    rng = np.random.default_rng(1)
    out = []
    for mode, kw in (("RGB", {}), ("L", {}), ("RGB", {"progressive": True}), ("RGB", {"restart_marker_blocks": 1})):
        a = rng.integers(0, 256, (16, 24, 3), dtype=np.uint8)
        im = Image.fromarray(a).convert(mode)
        b = io.BytesIO()
        im.save(b, "JPEG", **kw)
        out.append(b.getvalue())
    return out


def _pnm_seeds() -> list[bytes]:
    return [b"P5\n6 4\n255\n" + bytes(range(24)), b"P6\n3 2\n255\n" + bytes(range(18)),
            b"P5\n3 2\n65535\n" + bytes(12), b"P5 # c\n2 2 255 " + bytes(4)]


def _safetensors_seeds() -> list[bytes]:
    out = []
    for header, data in (({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}}, bytes(16)),
                         ({"a": {"dtype": "U8", "shape": [3], "data_offsets": [0, 3]},
                           "b": {"dtype": "I64", "shape": [1], "data_offsets": [3, 11]}, "__metadata__": {"k": "v"}}, bytes(11))):
        h = json.dumps(header).encode()
        out.append(struct.pack("<Q", len(h)) + h + data)
    return out


def _mutate(rng: random.Random, data: bytes, kind: str) -> bytes:
    b = bytearray(data)
    head = min(len(b), 200 if kind != "jpeg" else 120)
    for _ in range(rng.randint(1, 3)):
        op = rng.random()
        at = rng.randrange(0, max(1, head))
        if op < 0.3 and b:
            b[min(at, len(b) - 1)] = rng.choice([rng.randrange(256), *b"()[]{},:'\"#\\ \nLTF019-+_<>|=.\xff\x00"])
        elif op < 0.5:
            b[at:at] = rng.choice([b" ", b",", b"(", b"#x\n", b"\\\n", b"\xff\x00", b"\xff\xff", b"\x00\x01", b"0", b"'"])
        elif op < 0.65 and b:
            del b[at : at + rng.randint(1, 4)]
        elif op < 0.8:
            del b[rng.randrange(0, len(b) + 1) :]
        else:
            b += bytes(rng.randrange(256) for _ in range(rng.randint(1, 32)))
    return bytes(b)


# --------------------------------------------------------------------------- references


def _numpy_ok(data: bytes) -> bool | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            a = np.load(io.BytesIO(data), allow_pickle=False)
        except Exception:  # noqa: BLE001
            return False
    if not isinstance(a, np.ndarray):
        return None
    import torch

    try:
        torch.from_numpy(np.empty(0, a.dtype.newbyteorder("=")))
    except TypeError:
        return None  # a dtype torch lacks: gdsio refuses it on purpose
    return a.dtype.names is None


def _safetensors_ok(path: str) -> bool | None:
    try:
        from safetensors.torch import load_file
    except ImportError:
        return None
    try:
        load_file(path)
        return True
    except Exception:  # noqa: BLE001
        return False


def _pillow_ok(data: bytes) -> bool:
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with Image.open(io.BytesIO(data), formats=["JPEG"]) as im:
                im.load()
            return True
        except Exception:  # noqa: BLE001
            return False


# --------------------------------------------------------------------------- one case


def _reason(e: BaseException, path: str) -> str:
    """A short, number-free reason: the message without the file's name, first words."""
    msg = str(e).replace(f"'{path}'", "").replace(path, "").lstrip(":, ")
    msg = re.sub(r"'[^']*'", "'…'", msg)
    msg = re.sub(r"\d+", "N", msg)
    return f"{type(e).__name__}: {' '.join(msg.split()[:7])}"


def _in_time(fn: Callable[[], Any], seconds: float) -> tuple[str, Any]:
    """('ok', value) | ('error', exception) | ('hang', None)."""
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["v"] = fn()
        except BaseException as e:  # noqa: BLE001 - classified by the caller
            out["e"] = e

    t = threading.Thread(target=run, daemon=True, name="gdsio-hostile-case")
    t.start()
    t.join(seconds)
    if t.is_alive():
        return "hang", None
    return ("error", out["e"]) if "e" in out else ("ok", out.get("v"))


READERS: dict[str, Callable[[str], Any]] = {
    "npy": lambda p: gdsio.load_npy(p, device="cpu"),
    "safetensors": lambda p: gdsio.load_safetensors(p, device="cpu"),
    "jpeg": lambda p: gi.read(p, device="cpu"),
    "pnm": lambda p: gi.read(p, device="cpu"),
    "raw": lambda p: gi.read(p, device="cpu", raw=gi.RawFormat(height=4, width=6)),
}


def _special_paths(root: str) -> list[tuple[str, str]]:
    fifo = os.path.join(root, "fifo.npy")
    os.mkfifo(fifo)
    sock = os.path.join(root, "sock.jpg")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sock)
    _special_paths.sock = s  # type: ignore[attr-defined]  # kept bound for the run
    d = os.path.join(root, "dir.npy")
    os.mkdir(d)
    paths = [("npy", fifo), ("jpeg", sock), ("npy", "/dev/zero"), ("jpeg", "/dev/zero"), ("npy", d),
             ("jpeg", os.path.join(root, "missing.jpg")), ("npy", os.path.join(root, "a.npy") + "\0.npy")]
    if os.path.exists("/proc/self/status"):
        paths.append(("npy", "/proc/self/status"))
    return paths


# --------------------------------------------------------------------------- the race


def _race(root: str, seconds: float) -> tuple[int, int]:
    """(reads, mixed): two images renamed over one path while it is read."""
    path = os.path.join(root, "race.pgm")
    a, b = b"P5\n24 16\n255\n" + b"\x01" * 384, b"P5\n8 40\n255\n" + b"\x02" * 320
    with open(path, "wb") as f:
        f.write(a)
    stop = threading.Event()

    def swapper() -> None:
        k = 0
        while not stop.is_set():
            tmp = os.path.join(root, f"race{k % 2}")
            with open(tmp, "wb") as f:
                f.write(a if k % 2 == 0 else b)
            os.replace(tmp, path)
            k += 1

    t = threading.Thread(target=swapper, daemon=True)
    t.start()
    reads = mixed = 0
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                imgs = gi.read([path] * 4, device="cpu")
            except FileNotFoundError:
                continue
            for img in imgs:
                reads += 1
                ok_a = tuple(img.shape) == (1, 16, 24) and bool((img == 1).all())
                ok_b = tuple(img.shape) == (1, 40, 8) and bool((img == 2).all())
                mixed += not (ok_a or ok_b)
    finally:
        stop.set()
        t.join()
    return reads, mixed


# --------------------------------------------------------------------------- the run


def run(cases: int, seed: int, timeout: float = 10.0, race_seconds: float = 2.0) -> dict[str, Any]:
    rng = random.Random(seed)
    seeds = {"npy": _npy_seeds(), "jpeg": _jpeg_seeds(), "pnm": _pnm_seeds(), "safetensors": _safetensors_seeds(),
             "raw": [bytes(range(24))]}
    tried: collections.Counter[str] = collections.Counter()
    refused: collections.Counter[str] = collections.Counter()
    bad: dict[str, list[str]] = {"hangs": [], "unexpected": [], "disagreements": []}
    accepted = 0
    fds0, threads0 = len(os.listdir("/proc/self/fd")), threading.active_count()
    with tempfile.TemporaryDirectory(prefix="gdsio-hostile-") as root, warnings.catch_warnings():
        warnings.simplefilter("ignore", gdsio.DecompressionBombWarning)
        inputs: list[tuple[str, str, bytes | None]] = []
        for i in range(cases):
            kind = KINDS[i % len(KINDS)]
            data = _mutate(rng, rng.choice(seeds[kind]), kind) if rng.random() < 0.9 else rng.choice(seeds[kind])
            inputs.append((kind, os.path.join(root, f"case.{ 'jpg' if kind == 'jpeg' else kind}"), data))
        inputs += [(k, p, None) for k, p in _special_paths(root)]
        for kind, path, data in inputs:
            tried[kind if data is not None else "special paths"] += 1
            if data is not None:
                with open(path, "wb") as f:
                    f.write(data)
            status, v = _in_time(lambda: READERS[kind](path), timeout)
            what = f"{kind} {data[:60]!r}" if data is not None else f"{kind} {path!r}"
            if status == "hang":
                bad["hangs"].append(what)
                continue
            if status == "error":
                if not isinstance(v, (ValueError, OSError)):
                    bad["unexpected"].append(f"{what}: {type(v).__name__}: {v}")
                    continue
                refused[_reason(v, path)] += 1
            else:
                accepted += 1
            if data is None:
                continue
            ref = (_numpy_ok(data) if kind == "npy" else _safetensors_ok(path) if kind == "safetensors"
                   else _pillow_ok(data) if kind == "jpeg" else None)
            if ref is not None and ref != (status == "ok"):
                bad["disagreements"].append(f"{what}: the reference {'loads' if ref else 'refuses'} it, gdsio "
                                            f"{'loads' if status == 'ok' else 'refuses'} it" + (f" ({v})" if status == "error" else ""))
        reads, mixed = _race(root, race_seconds) if race_seconds > 0 else (0, 0)
        sock = getattr(_special_paths, "sock", None)
        if sock is not None:
            sock.close()
    time.sleep(0.05)  # reader pools wind down
    return {
        "inputs": dict(tried), "total": sum(tried.values()), "accepted": accepted, "refused": sum(refused.values()),
        "refused_by_reason": dict(refused.most_common()), "hangs": len(bad["hangs"]),
        "unexpected_types": len(bad["unexpected"]), "disagreements": len(bad["disagreements"]),
        "race_reads": reads, "mixed_reads": mixed,
        "leaked_fds": max(0, len(os.listdir("/proc/self/fd")) - fds0),
        "leaked_threads": max(0, threading.active_count() - threads0 - len(bad["hangs"])),
        "examples": {k: v[:5] for k, v in bad.items() if v},
    }


BAD_COUNTS = ("hangs", "unexpected_types", "disagreements", "mixed_reads", "leaked_fds", "leaked_threads")


def render(r: dict[str, Any]) -> str:
    lines = [f"inputs {r['total']} ({', '.join(f'{k} {v}' for k, v in r['inputs'].items())}): "
             f"accepted {r['accepted']}, refused {r['refused']}", "refused by reason:"]
    lines += [f"  {n:6d}  {why}" for why, n in list(r["refused_by_reason"].items())[:25]]
    if len(r["refused_by_reason"]) > 25:
        lines.append(f"  ... {len(r['refused_by_reason']) - 25} more reasons")
    lines.append(f"race: {r['race_reads']} reads while renamed over, {r['mixed_reads']} mixed")
    lines.append("  ".join(f"{k}={r[k]}" for k in BAD_COUNTS))
    for k, v in r["examples"].items():
        lines += [f"{k}:"] + [f"  {x}" for x in v]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=2000, help="mutated inputs (the special paths come on top)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds a case may take before it counts as a hang")
    ap.add_argument("--race-seconds", type=float, default=5.0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    r = run(a.cases, a.seed, a.timeout, a.race_seconds)
    print(json.dumps(r, indent=1) if a.json else render(r))
    return 1 if any(r[k] for k in BAD_COUNTS) else 0


if __name__ == "__main__":
    sys.exit(main())
