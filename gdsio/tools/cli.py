"""The ``gdsio`` command: ``bench``, ``doctor``, ``info``, ``demo`` and ``shards write``.

    gdsio demo                                  # the main job: the loader on generated JPEGs
    gdsio bench --sizes 1M,64M,1G --repeat 5 --json out.json --plot out.png
    gdsio bench /data/shards --cold --paths gdsio-pinned,naive
    gdsio bench s3://bucket/shards/             # or https://host/shard.bin: gdsio's remote reader
    gdsio demo s3://bucket/train/               # an ImageFolder of objects
    gdsio doctor /data --json
    gdsio info --json
    gdsio shards write imagenet/train shards/ --shard-bytes 256M   # WebDataset tar shards

Option names are the settings' names (``--threads``, ``--chunk-bytes``,
``--staging-buffers``, ``--direct-io``, ``--huge-pages``, ``--remote-concurrency``,
``--remote-chunk-bytes``, ``--remote-retries``, ``--remote-timeout``), as in ``gdsio.settings`` and the
``GDSIO_*`` environment variables.

Exit status (``EXIT_CODES``, shown by ``gdsio --help``): 0 success, 1 a check or a
measurement failed, 2 a user error (a bad argument, a missing or corrupt file, a
device that cannot run here), printed as one line ``gdsio COMMAND: error: ...``
on stderr, never as a traceback; 130 interrupted.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from typing import Any, Sequence

from tqdm import tqdm

import gdsio

from .. import __version__
from ..config import check_environment, parse_bytes
from ..device import parse_device, require_cuda
from ..errors import BackendUnavailable, SampleError
from ..io.s3 import require_botocore
from ..io.urls import display, is_url, scheme_of
from . import bench, demo, doctor
from .bench import PATHS, REMOTE_PATHS, BenchConfig
from .bench.report import check_plot_available, format_row, write_whole

DEFAULT_SIZES = "1M,64M,1G"
DEFAULT_REPEAT = 5
QUICK_SIZES, QUICK_REPEAT = "64M", 2


__all__ = ["EXIT_CODES", "EXIT_FAILED", "EXIT_INTERRUPTED", "EXIT_OK", "EXIT_USAGE", "main", "run_bench_command"]

EXIT_OK = 0  # the command did what was asked (doctor: true GDS is usable, every check passed)
EXIT_FAILED = 1  # it ran, and a check or a measurement failed: the report says which
EXIT_USAGE = 2  # a user error, as argparse's own: printed as one line, no traceback
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_CODES = f"""exit status:
  {EXIT_OK}    success (doctor: true GPUDirect Storage is usable and every check passed)
  {EXIT_FAILED}    a check or a measurement failed (doctor: a [FAIL] check, or GDS is not
       used here; bench: a path failed): the report says which and why
  {EXIT_USAGE}    a user error, one line on stderr ("gdsio COMMAND: error: ..."): a bad
       argument, a missing, unreadable or corrupt file, a device or backend that
       cannot run here
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C)"""


class _Error(Exception):
    """A mistake in the command line or its inputs: printed as one line, exit code 2."""


def _user_errors() -> tuple[type[BaseException], ...]:
    """What gdsio raises for a user's mistake or an input it cannot use (a
    missing, unreadable or corrupt file, a device that cannot run here, a bad
    value): one line, exit 2. Anything else is a bug and keeps its traceback."""
    return (_Error, OSError, ValueError, BackendUnavailable, SampleError)


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.strerror:  # "[Errno 2] ..." is noise; the path is what matters
        msg = e.strerror
        if e.filename is not None and os.fspath(e.filename) not in msg:
            msg = f"{os.fspath(e.filename)}: {msg}"
    else:
        msg = str(e) or type(e).__name__
    return " ".join(msg.split())


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an int: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {v}")
    return v


def _device_index(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a CUDA device index: {text!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"a CUDA device index is >= 0, got {v}")
    return v


def _add_settings(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("settings (default: GDSIO_* environment variables, then gdsio's defaults)")
    g.add_argument("--threads", type=int, help="reader threads per read")
    g.add_argument("--chunk-bytes", type=parse_bytes, metavar="BYTES",
                   help="bytes per task, e.g. 4M (multiple of 4 KiB)")
    g.add_argument("--staging-buffers", type=int, metavar="N", help="pinned staging buffers per reader thread")
    g.add_argument("--huge-pages", action=argparse.BooleanOptionalAction, default=None,
                   help="transparent huge pages for large host buffers gdsio allocates (default on)")
    g.add_argument("--direct-io", action=argparse.BooleanOptionalAction, default=None,
                   help="read with O_DIRECT on gdsio's posix and pinned paths")
    g.add_argument("--remote-concurrency", type=int, metavar="N", help="ranged GETs in flight per s3:// or http(s):// read")
    g.add_argument("--remote-chunk-bytes", type=parse_bytes, metavar="BYTES",
                   help="bytes per ranged GET, e.g. 8M (multiple of 4 KiB)")
    g.add_argument("--remote-retries", type=int, metavar="N", help="tries after the first on 5xx, drops, timeouts")
    g.add_argument("--remote-timeout", type=float, metavar="SECONDS", help="seconds a connect or socket read may take")


def _parser() -> argparse.ArgumentParser:
    exits: dict[str, Any] = {"epilog": EXIT_CODES, "formatter_class": argparse.RawDescriptionHelpFormatter}
    parser = argparse.ArgumentParser(prog="gdsio", description="Files straight into GPU memory: measure, diagnose.",
                                     **exits)
    parser.add_argument("--version", action="version", version=f"gdsio {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    b = sub.add_parser("bench", **exits, help="time every copy path side by side, with ceilings measured in the same run",
                       description="Times every way of getting a file into GPU or host memory, side by side, "
                                   "with ceilings measured in the same run.")
    b.add_argument("path", nargs="?", metavar="PATH",
                   help="a file, or a directory whose files are read; or an s3:// or http(s):// object, or an "
                        "s3:// prefix whose objects are read (default: generate files of --sizes)")
    b.add_argument("--sizes", help=f"sizes of the generated files (default {DEFAULT_SIZES}; K, M, G = KiB, MiB, GiB)")
    b.add_argument("--paths", help="comma list of paths to run (default: all): " + ",".join(PATHS)
                   + "; for a URL: " + ",".join(REMOTE_PATHS))
    mode = b.add_mutually_exclusive_group()
    mode.add_argument("--cold", dest="cold", action="store_true", default=False,
                      help="evict the file from the page cache before each repetition")
    mode.add_argument("--warm", dest="cold", action="store_false", help="read from the page cache (default)")
    b.add_argument("--repeat", type=int, help=f"repetitions; the median is reported (default {DEFAULT_REPEAT})")
    b.add_argument("--json", metavar="FILE", help="write the results, machine and command as JSON")
    b.add_argument("--plot", metavar="FILE.png", help="plot GB/s against size (needs matplotlib: gdsio[plot])")
    b.add_argument("--quick", action="store_true",
                   help=f"one {QUICK_SIZES}iB file, {QUICK_REPEAT} repetitions, warm (unless given otherwise)")
    b.add_argument("--device", default="cuda", help="CUDA device of the GPU paths (cuda, cuda:N)")
    b.add_argument("--tmpdir", metavar="DIR", help="where generated files go (default: the system's temp dir)")
    _add_settings(b)
    b.set_defaults(func=_cmd_bench)

    d = sub.add_parser("doctor", **exits, help="explain why GPUDirect Storage is or is not used for a path")
    d.add_argument("path", nargs="?", default=".", metavar="PATH", help="file or directory (default: .)")
    d.add_argument("--device", type=_device_index, default=0, help="CUDA device index (default 0)")
    d.add_argument("--json", action="store_true", help="print the report as JSON")
    d.set_defaults(func=_cmd_doctor)

    i = sub.add_parser("info", **exits, help="what gdsio knows about this machine: backends, settings, cuFile")
    i.add_argument("path", nargs="?", metavar="PATH", help="a file whose O_DIRECT support is checked too")
    i.add_argument("--device", type=_device_index, default=0, help="CUDA device index (default 0)")
    i.add_argument("--json", action="store_true", help="print as JSON")
    i.set_defaults(func=_cmd_info)

    m = sub.add_parser("demo", **exits, help="the main job: an epoch of the loader on a generated JPEG ImageFolder (runs anywhere)")
    m.add_argument("path", nargs="?", metavar="PATH",
                   help="an ImageFolder to load, local or an s3://bucket/prefix/ (default: generate one)")
    m.add_argument("--device", help="cuda, cuda:N or cpu (default: cuda when usable, else cpu)")
    m.add_argument("--epochs", type=_positive_int, default=1, help="passes over the data (default 1)")
    m.add_argument("--batch-size", type=_positive_int, default=32, help="images per batch (default 32)")
    m.add_argument("--no-train", action="store_true", help="time the loader alone, without the small CNN step")
    m.set_defaults(func=_cmd_demo)

    s = sub.add_parser("shards", **exits, help="WebDataset tar shards: write them from an ImageFolder")
    ssub = s.add_subparsers(dest="shards_command", metavar="ACTION", required=True)
    w = ssub.add_parser("write", **exits, help="write an ImageFolder's images (bytes as they are) into tar shards",
                        description="Writes SRC (an ImageFolder) into DST/shard-000000.tar, ... in the WebDataset "
                                    "layout (<key>.<ext> and <key>.cls members), each with its index beside it; "
                                    "gdsio.Loader and the webdataset library read them.")
    w.add_argument("src", metavar="SRC", help="an ImageFolder (class sub-folders of images)")
    w.add_argument("dst", metavar="DST", help="the folder for the shards (made if missing)")
    w.add_argument("--shard-bytes", type=parse_bytes, default=256 << 20, metavar="BYTES",
                   help="bytes per shard, e.g. 256M (default 256M)")
    w.set_defaults(func=_cmd_shards_write)

    o = sub.add_parser("offload-plan", **exits, help="how many CPU-only nodes keep a GPU node fed, and the cost per step",
                       description="From the GPU node's CPU cost to make an image and to receive one made on a CPU "
                                   "node, a CPU node's cost to make one (given, or measured with --measure on a "
                                   "sample of the dataset), the GPU's step rate and batch size, and the instances' "
                                   "prices: how many CPU nodes to add (gdsio.data.ray), the local_share to start "
                                   "from, and the cost per step. Costs are CPU time per image, not wall time.")
    o.add_argument("--measure", metavar="DATASET",
                   help="measure the three costs on a sample of DATASET (any source gdsio.Loader takes): a local "
                        "pass, and a pass received from a CPU node of a Ray cluster on 127.0.0.1 (needs gdsio[ray])")
    o.add_argument("--sample", type=_positive_int, default=512, help="--measure: images sampled (default 512)")
    o.add_argument("--repeats", type=_positive_int, default=3, help="--measure: passes, medians taken (default 3)")
    o.add_argument("--ms-per-image", type=float,
                   help="the GPU node's CPU-ms to read + decode + transform one image (required without --measure)")
    o.add_argument("--receive-ms-per-image", type=float,
                   help="the GPU node's CPU-ms to receive one image made on a CPU node (default: --measure's, else "
                        "an assumption the plan states)")
    o.add_argument("--remote-ms-per-image", type=float,
                   help="a CPU node's CPU-ms to make one image (default: --measure's, else --ms-per-image, stated)")
    o.add_argument("--steps-per-s", type=float, required=True, help="the GPU's step rate when it never waits")
    o.add_argument("--batch-size", type=_positive_int, required=True, help="images per step")
    o.add_argument("--local-cores", type=float, required=True, help="the GPU node's cores free for preprocessing")
    o.add_argument("--node-cores", type=_positive_int, required=True, help="cores of one CPU node")
    o.add_argument("--cpu-nodes", type=int, help="plan for this many CPU nodes (default: as many as the need takes)")
    o.add_argument("--gpu-node-price", type=float, required=True, help="the GPU node's price per hour")
    o.add_argument("--cpu-node-price", type=float, required=True, help="one CPU node's price per hour")
    o.add_argument("--headroom", type=float, default=1.2, help="capacity above the need (default 1.2)")
    o.add_argument("--json", action="store_true", help="print the plan (and what was measured) as JSON")
    o.set_defaults(func=_cmd_offload_plan)
    return parser


# ----------------------------------------------------------------------------- bench

def _bench_config(args: argparse.Namespace) -> Any:
    paths = tuple(p.strip() for p in args.paths.split(",") if p.strip()) if args.paths else ()
    if not (args.device == "cuda" or (args.device.startswith("cuda:") and args.device[5:].isdigit())):
        raise _Error(f"--device names the CUDA device of the GPU paths (cuda or cuda:N); got {args.device!r}")
    overrides = {k: getattr(args, k) for k in ("threads", "chunk_bytes", "staging_buffers", "direct_io", "huge_pages",
                                            "remote_concurrency", "remote_chunk_bytes", "remote_retries",
                                            "remote_timeout")
                 if getattr(args, k) is not None}
    try:
        with gdsio.settings(**overrides):  # validates the values, env included, before any work
            pass
        return BenchConfig(repeat=args.repeat, cold=args.cold, paths=paths, device=args.device, **overrides)
    except (TypeError, ValueError) as e:
        raise _Error(str(e)) from None


def _write_json(doc: Any, path: str) -> None:
    """Whole files only (a run killed mid-way keeps the last one); see write_whole."""
    write_whole(path, json.dumps(doc, indent=2) + "\n")


def _print_row(row: dict[str, Any], done: int, total: int) -> None:
    print("  " + format_row(row, done, total), flush=True)  # flushed: a pipe or a log shows it now, not at the end


def run_bench_command(args: argparse.Namespace, argv: Sequence[str]) -> int:
    sizes_given = args.sizes is not None  # --quick fills it in below; only the user's own is "ignored"
    if args.quick:
        args.sizes = QUICK_SIZES if args.sizes is None else args.sizes
        args.repeat = QUICK_REPEAT if args.repeat is None else args.repeat
    args.repeat = DEFAULT_REPEAT if args.repeat is None else args.repeat
    cfg = _bench_config(args)
    if args.plot:
        try:
            check_plot_available()
        except RuntimeError as e:
            raise _Error(str(e)) from None
    remote = args.path is not None and is_url(args.path)
    bench.select_paths(cfg.paths, remote, cfg.cold)  # a path of the other kind: said before any file or request
    gen = None
    try:
        if args.path:
            if sizes_given:
                print("gdsio bench: --sizes is ignored: PATH is given", file=sys.stderr)
            if remote:
                _remote_ready(args.path)
            files = bench.files_from_path(args.path)
            where = bench.shown(args.path)
        else:
            sizes = bench.parse_sizes(DEFAULT_SIZES if args.sizes is None else args.sizes)
            if args.tmpdir and not os.path.isdir(args.tmpdir):
                raise _Error(f"--tmpdir: no such directory: '{args.tmpdir}'")
            gen = bench.generate_files(sizes, args.tmpdir)
            files, where = gen.files, gen.tmpdir.name
        print(f"gdsio bench: {len(files)} file(s) in {where}, median of {args.repeat}; each row as it is measured:",
              flush=True)
        doc = bench.run_bench(files, cfg, command=["gdsio", *argv], machine_path=where, on_row=_print_row,
                              on_progress=(lambda d: _write_json(d, args.json)) if args.json else None)
        print(flush=True)
    finally:
        if gen is not None:
            gen.tmpdir.cleanup()
    bench.print_report(doc)
    if args.json:
        _write_json(doc, args.json)
        print(f"wrote {args.json}")
    if args.plot:
        bench.write_plot(doc, args.plot)
        print(f"wrote {args.plot}")
    failed = [r for r in doc["results"] + doc["ceilings"] if r["status"] == "failed"]
    if failed:
        names = ", ".join(sorted({r.get("path") or r.get("name") for r in failed}))
        print(f"gdsio bench: {len(failed)} measurement(s) failed ({names}): see the notes above", file=sys.stderr)
        return 1
    return 0


def _cmd_bench(args: argparse.Namespace, argv: Sequence[str]) -> int:
    return run_bench_command(args, argv)


def _demo_device(text: str | None) -> str | None:
    """Checks --device before any work, with the hint in the command line's words."""
    if text is None:
        return None
    try:
        d = parse_device(text, arg="--device")
    except ValueError:
        raise _Error(f"--device must be cpu, cuda or cuda:N; got {text!r}") from None
    if d.type == "cuda":
        require_cuda(f"--device {text}", d.index, arg="--device")
    return text


def _remote_ready(url: str) -> None:
    """An s3:// URL needs botocore: said as a one-line error, before any work."""
    if scheme_of(url) == "s3":
        try:
            require_botocore(f"'{url}'")
        except ImportError as e:
            raise _Error(str(e)) from None


def _check_path(path: str | None) -> None:
    """A local path must exist; a URL goes to the library, whose errors say
    what failed (a 404, a missing bucket, a refused connection)."""
    if path is None:
        return
    if is_url(path):
        _remote_ready(path)
    elif not os.path.exists(path):
        raise _Error(f"no such file or directory: '{path}'")


def _cmd_demo(args: argparse.Namespace, argv: Sequence[str]) -> int:
    _check_path(args.path)
    demo.run_demo(args.path, device=_demo_device(args.device), epochs=args.epochs, batch_size=args.batch_size,
             train=not args.no_train, out=sys.stdout)
    print("\nthe copy paths side by side: gdsio bench --quick; why GDS is or is not used: gdsio doctor")
    return 0


def _cmd_offload_plan(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from ..data.offload_plan import offload_plan  # loads gdsio.data: only for this command

    costs = None
    given = {"ms_per_image": args.ms_per_image, "receive_ms_per_image": args.receive_ms_per_image,
             "remote_ms_per_image": args.remote_ms_per_image}
    if args.measure is not None:
        from ..data.offload_measure import measure_offload_costs

        if not any(c in args.measure for c in "*?["):  # a glob is matched by the loader
            _check_path(args.measure)
        if not args.steps_per_s > 0:
            raise _Error(f"--steps-per-s must be a positive number, got {args.steps_per_s!r}")
        costs = measure_offload_costs(args.measure, batch_size=args.batch_size, steps_per_s=args.steps_per_s,
                                      images=args.sample, repeats=args.repeats)
        measured = {"ms_per_image": costs.ms_per_image, "receive_ms_per_image": costs.receive_ms_per_image,
                    "remote_ms_per_image": costs.remote_ms_per_image}
        given = {k: v if v is not None else measured[k] for k, v in given.items()}  # a value given wins
    elif args.ms_per_image is None:
        raise _Error("give --ms-per-image, or --measure DATASET to measure it")
    plan = offload_plan(**given, steps_per_s=args.steps_per_s, batch_size=args.batch_size,
                        local_cores=args.local_cores, node_cores=args.node_cores, gpu_node_price=args.gpu_node_price,
                        cpu_node_price=args.cpu_node_price, headroom=args.headroom, cpu_nodes=args.cpu_nodes)
    if args.json:
        doc = dataclasses.asdict(plan)
        if costs is not None:
            doc["measured"] = dataclasses.asdict(costs)
        print(json.dumps(doc, indent=2, default=str))
    else:
        print(f"{costs}\n\n{plan}" if costs is not None else str(plan))
    return 0


def _cmd_shards_write(args: argparse.Namespace, argv: Sequence[str]) -> int:
    from ..data.shard_write import write_shards  # loads gdsio.data: only for this command

    if not os.path.isdir(args.src):
        raise _Error(f"no such folder: '{args.src}' (SRC is an ImageFolder: class sub-folders of images)")
    if args.shard_bytes <= 0:
        raise _Error(f"--shard-bytes must be positive; got {args.shard_bytes}")
    bar = tqdm(desc="shards write", unit="img", file=sys.stderr) if demo._isatty(sys.stderr) else None
    last = [0]

    def progress(done: int) -> None:
        if bar is not None:
            bar.update(done - last[0])
        last[0] = done

    try:
        paths = write_shards(args.src, args.dst, shard_bytes=args.shard_bytes, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    pattern = os.path.join(args.dst, f"shard-{{000000..{len(paths) - 1:06d}}}.tar")
    print(f"{last[0]} images in {len(paths)} shards: {pattern}")
    return 0


# ----------------------------------------------------------------------------- doctor, info

def _cmd_doctor(args: argparse.Namespace, argv: Sequence[str]) -> int:
    # A user error is reported once, alone: no report of a path that is not there.
    if is_url(args.path):
        raise _Error(f"'{display(args.path)}' is a remote object: doctor checks GPUDirect Storage, which reads "
                     "local files; remote reads go through the s3 and http backends (gdsio info lists them)")
    if not os.path.exists(args.path):
        raise _Error(f"no such file or directory: '{args.path}'")
    report = doctor.doctor(args.path, device=args.device)
    gpu = next((c for c in report["checks"] if c["id"] == "gpu"), None)
    count = gpu["details"].get("cuda_status", {}).get("device_count", 0) if gpu else 0
    if count and args.device >= count:
        raise _Error(f"--device {args.device}: no such CUDA device ({count} visible)")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(doctor.render_doctor(report), end="")
    return int(report["exit_code"])


def _render_tree(value: Any, indent: int = 0) -> list[str]:
    pad = "  " * indent
    out: list[str] = []
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, (dict, list)) and v:
                out.append(f"{pad}{k}:")
                out += _render_tree(v, indent + 1)
            else:
                out.append(f"{pad}{k}: {v}")
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                out.append(f"{pad}- " + ", ".join(f"{k}={x}" for k, x in v.items()))
            else:
                out.append(f"{pad}- {v}")
    else:
        out.append(f"{pad}{value}")
    return out


def _cmd_info(args: argparse.Namespace, argv: Sequence[str]) -> int:
    _check_path(args.path)
    data = gdsio.info(args.path, device=args.device)
    print(json.dumps(data, indent=2) if args.json else "\n".join(_render_tree(data)))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gdsio`` command; returns the exit code.

    >>> from gdsio.tools.cli import main
    >>> main(["doctor", "/data", "--json"])     # doctest: +SKIP
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse exits on --help and on mistakes; a caller gets the code
        return e.code if isinstance(e.code, int) else (EXIT_OK if e.code is None else EXIT_USAGE)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        # Every GDSIO_* variable, checked before any work: a typo is not found after minutes of it.
        check_environment()
        return int(args.func(args, argv))
    except BrokenPipeError:  # `gdsio info | head`: the reader left; say nothing more (before OSError)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except _user_errors() as e:
        try:
            sys.stdout.flush()  # what the command printed so far comes before its error
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print(f"gdsio {args.command}: error: {_one_line(e)}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
