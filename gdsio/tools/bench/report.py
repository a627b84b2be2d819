"""Rendering a ``gdsio bench`` result (the JSON-ready dict of ``bench.run_bench``):
plain text, rich (when installed), markdown, and a PNG plot (matplotlib, the
``plot`` extra). Everything here reads the dict only, so a saved JSON file can
be rendered again:

>>> import json; from gdsio.tools import bench
>>> print(bench.render_markdown(json.load(open("bench.json"))))   # doctest: +SKIP
"""

from __future__ import annotations

import os
import sys
from typing import Any, TextIO

__all__ = ["CEILINGS", "PLOT_MISSING", "check_plot_available", "format_bytes", "format_row", "print_report",
           "render_markdown", "render_text", "write_plot", "write_whole"]

# The ceilings that run_bench measures, in the order the tables show them.
CEILINGS = ("h2d-pinned", "d2d-copy", "page-cache", "o-direct-disk")
_COLUMNS = ("size", "path", "GB/s", "ceiling (GB/s)", "of ceiling", "vs peer", "backend", "notes")
_RIGHT = {"GB/s", "of ceiling", "vs peer"}
_TABLES = (("gpu", "Into GPU memory", "naive"), ("host", "Into host memory", "numpy-fromfile"))


def write_whole(path: str, text: str) -> None:
    """Writes `text` to `path` so that a reader (or a run killed mid-way)
    only ever sees a whole file: beside the real file, then renamed over it.
    A link is followed (its target is written); something that is not a
    regular file (/dev/stdout, a FIFO) is written to directly."""
    real = os.path.realpath(path)
    if os.path.exists(real) and not os.path.isfile(real):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    tmp = real + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, real)


def format_bytes(n: int) -> str:
    """1048576 -> '1 MiB'; 1536 -> '1.5 KiB'."""
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{n} B"


def _num(v: float | None, digits: int = 2) -> str:
    if v is None:
        return "-"
    return f"{v:.{digits}f}" if v < 100 else f"{v:.0f}"


def _header_lines(doc: dict[str, Any]) -> list[str]:
    c, s = doc["config"], doc["config"]["settings"]
    mode = "cold cache (evicted before each repetition)" if c["mode"] == "cold" else "warm page cache"
    if c.get("source") == "url":
        mode = "remote objects"
    m = doc.get("machine") or {}
    cpu = m.get("cpu") or {}
    gpus = ", ".join(g.get("model") or g.get("bdf") or "?" for g in m.get("gpus") or []) or "no NVIDIA GPU seen"
    fs = ((m.get("storage") or {}).get("filesystem")) or {}
    where = f"{fs.get('mount_point')} on {fs.get('fs_type')} ({fs.get('source')})" if fs.get("fs_type") else "?"
    if c.get("source") == "url":
        where = ", ".join(sorted({f["path"].split("/")[2] for f in doc.get("files") or []})) or "?"
    commit = doc.get("git_commit") or "unknown commit"
    if doc.get("git_dirty"):
        commit += " + uncommitted changes"
    return [
        f"gdsio {doc['gdsio']} bench ({commit}), {doc['date']}: {mode}, median of {c['repeat']}",
        f"settings: {s['threads']} threads, {format_bytes(s['chunk_bytes'])} chunks, "
        f"{s['staging_buffers']} staging buffers, O_DIRECT {'on' if s['direct_io'] else 'off'}",
        f"machine: {cpu.get('model') or '?'}, {cpu.get('usable_cpus') or cpu.get('logical_cpus')} CPUs; "
        f"GPU: {gpus}; driver {m.get('driver_version') or 'none'}; files on {where}",
    ]


def _ceiling_table(doc: dict[str, Any]) -> tuple[list[str], list[list[str]], list[str]]:
    sizes = sorted({c["size"] for c in doc["ceilings"]})
    by = {(c["name"], c["size"]): c for c in doc["ceilings"]}
    rows = []
    for size in sizes:
        row = [format_bytes(size)]
        for name in CEILINGS:
            c = by.get((name, size))
            if c and c["status"] == "ok":
                row.append(_num(c["gbps"]))
            else:
                row.append("failed" if c and c["status"] == "failed" else "-")
        rows.append(row)
    why: dict[str, list[str]] = {}
    for name in CEILINGS:
        for c in doc["ceilings"]:
            if c["name"] == name and c["status"] != "ok" and c["reason"]:
                why.setdefault(f"{c['status']}: {c['reason']}", [])
                if name not in why[f"{c['status']}: {c['reason']}"]:
                    why[f"{c['status']}: {c['reason']}"].append(name)
    notes = [f"{', '.join(names)} {reason}" for reason, names in why.items()]
    for name in CEILINGS:
        done = [c for c in doc["ceilings"] if c["name"] == name and c["status"] == "ok"]
        if done:
            best = {c["best"] for c in done if c.get("best")}
            if len(best) > 1:
                won = ", ".join(f"{format_bytes(c['size'])}: {c['best']}" for c in done)
                notes.append(f"{name}: {done[0]['how']} (better: {won})")
            else:
                notes.append(f"{name}: {done[0]['how']}" + (f" (better: {best.pop()})" if best else ""))
    over = [r for r in doc["results"] if (r.get("fraction_of_ceiling") or 0) > 1.05]
    if over:
        notes.append("a fraction above 100% means that path beat the ceiling's readers here: "
                     "the storage ceilings are measured, not hard limits")
    return ["size", *CEILINGS], rows, notes


def _result_tables(doc: dict[str, Any]) -> tuple[list[tuple[str, list[str], list[list[str]]]], list[str]]:
    """[(title, columns, rows)] per destination, and the notes the rows point to."""
    notes: list[str] = []
    tables = []
    for dest, title, peer in _TABLES:
        rows = []
        mine = [r for r in doc["results"] if r["destination"] == dest]
        for r in sorted(mine, key=lambda r: (r["size"], -(r["gbps"] or 0))):
            refs = []
            if r["reason"]:
                if r["reason"] not in notes:
                    notes.append(r["reason"])
                refs.append(f"[{notes.index(r['reason']) + 1}]")
            c = r.get("ceiling")
            rows.append([
                format_bytes(r["size"]),
                r["path"],
                _num(r["gbps"]) if r["status"] == "ok" else r["status"],
                f"{c['name']} {_num(c['gbps'])}" if c else "-",
                f"{r['fraction_of_ceiling']:.0%}" if r.get("fraction_of_ceiling") is not None else "-",
                f"{r['ratio']:.2f}x" if r.get("ratio") is not None else "-",
                r["backend"] or "-",
                " ".join(refs),
            ])
        if rows:
            peer = mine[0].get("ratio_to") or peer  # a remote run's peers are its own
            head = [h if h != "vs peer" else f"vs {peer}" for h in _COLUMNS]
            tables.append((f"{title} (GB/s: median of {doc['config']['repeat']})", head, rows))
    return tables, notes


def format_row(row: dict[str, Any], done: int, total: int) -> str:
    """One measurement as a line, printed while the run goes on:

    >>> format_row(doc["results"][0], 7, 12)                        # doctest: +SKIP
    '[7/12] 64 MiB  gdsio-pinned (gpu)  3.21 GB/s, 62% of h2d-pinned, 1.90x naive, backend pinned'
    """
    head = f"[{done}/{total}] {format_bytes(row['size'])}  "
    if "path" in row:
        head += f"{row['path']} ({row['destination']})"
    else:
        head += f"ceiling {row['name']}"
    if row["status"] != "ok":
        return f"{head}  {row['status']}: {row['reason']}"
    parts = [f"{_num(row['gbps'])} GB/s"]
    c = row.get("ceiling")
    if c and row.get("fraction_of_ceiling") is not None:
        parts.append(f"{row['fraction_of_ceiling']:.0%} of {c['name']}")
    if row.get("ratio") is not None:
        parts.append(f"{row['ratio']:.2f}x {row['ratio_to']}")
    if row.get("backend"):
        parts.append(f"backend {row['backend']}")
    return f"{head}  " + ", ".join(parts)


def _right(h: str) -> bool:
    return h in _RIGHT or h.startswith("vs ") or h in CEILINGS


def _plain_table(head: list[str] | tuple[str, ...], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]

    def line(cells: list[str] | tuple[str, ...]) -> str:
        parts = [c.rjust(w) if _right(h) else c.ljust(w) for c, w, h in zip(cells, widths, head)]
        return "  " + "  ".join(parts).rstrip()

    return [line(head), "  " + "  ".join("-" * w for w in widths), *(line(r) for r in rows)]


def _skipped_groups(doc: dict[str, Any]) -> list[tuple[str, str]]:
    """(paths, reason) with the paths that share one reason named together."""
    groups: dict[str, list[str]] = {}
    for s in doc["skipped"]:
        groups.setdefault(s["reason"], []).append(s["path"])
    return [(", ".join(paths), reason) for reason, paths in groups.items()]


def _skipped_lines(doc: dict[str, Any]) -> list[str]:
    return [f"  {paths}: {reason}" for paths, reason in _skipped_groups(doc)]


def render_text(doc: dict[str, Any]) -> str:
    """The report as plain text (no colours, no box characters)."""
    out = _header_lines(doc) + ["", "Ceilings measured in this run (GB/s)"]
    head, rows, cnotes = _ceiling_table(doc)
    out += _plain_table(head, rows) + [f"  * {n}" for n in cnotes]
    tables, notes = _result_tables(doc)
    for title, rhead, rrows in tables:
        out += ["", title] + _plain_table(rhead, rrows)
    if not tables:
        out += ["", "  (no copy path ran)"]
    out += [""] * bool(notes) + [f"  [{i}] {n}" for i, n in enumerate(notes, 1)]
    skipped = _skipped_lines(doc)
    if skipped:
        out += ["", "Skipped here (and why)"] + skipped
    return "\n".join(out) + "\n"


def print_report(doc: dict[str, Any], file: TextIO | None = None) -> None:
    """Prints the report: rich's tables on a terminal when rich is installed, else plain text
    (logs and pipes get plain text, which no width limit folds)."""
    file = file or sys.stdout
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        Console = None
    if Console is None or not file.isatty():
        file.write(render_text(doc))
        return
    console = Console(file=file, highlight=False)
    for line in _header_lines(doc):
        console.print(line, markup=False)
    head, rows, cnotes = _ceiling_table(doc)
    t = Table(title="Ceilings measured in this run (GB/s)", title_justify="left")
    for h in head:
        t.add_column(h, justify="right" if _right(h) else "left")
    for r in rows:
        t.add_row(*r)
    console.print(t)
    for n in cnotes:
        console.print(f"  * {n}", markup=False)
    tables, notes = _result_tables(doc)
    for title, rhead, rrows in tables:
        t = Table(title=title, title_justify="left")
        for h in rhead:
            t.add_column(h, justify="right" if _right(h) else "left", no_wrap=h != "notes")
        for r in rrows:
            t.add_row(*r)
        console.print(t)
    for i, n in enumerate(notes, 1):
        console.print(f"  [{i}] {n}", markup=False)
    skipped = _skipped_lines(doc)
    if skipped:
        console.print("Skipped here (and why)")
        for line in skipped:
            console.print(line, markup=False)


def _md_table(head: list[str] | tuple[str, ...], rows: list[list[str]]) -> list[str]:
    def esc(x: str) -> str:
        return x.replace("|", "\\|")

    return ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|",
            *("| " + " | ".join(esc(c) for c in r) + " |" for r in rows)]


def render_markdown(doc: dict[str, Any]) -> str:
    """The report as markdown (for bench/results/)."""
    out = [f"- {line}" for line in _header_lines(doc)]
    if doc.get("command"):
        out.append(f"- command: `{doc['command']}`")
    head, rows, cnotes = _ceiling_table(doc)
    out += ["", "Ceilings measured in this run (GB/s):", ""] + _md_table(head, rows) + [""]
    out += [f"- {n}" for n in cnotes]
    tables, notes = _result_tables(doc)
    for title, rhead, rrows in tables:
        out += ["", f"{title}:", ""] + _md_table(rhead, rrows)
    out += [""] + [f"{i}. {n}" for i, n in enumerate(notes, 1)]
    if doc["skipped"]:
        out += ["", "Skipped here:", ""] + [f"- {paths}: {reason}" for paths, reason in _skipped_groups(doc)]
    return "\n".join(out) + "\n"


PLOT_MISSING = "--plot needs matplotlib, which is not installed: pip install 'gdsio[plot]' (or: pip install matplotlib)"


def check_plot_available() -> None:
    """Raises RuntimeError with the install command when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise RuntimeError(PLOT_MISSING) from None


def write_plot(doc: dict[str, Any], path: str) -> None:
    """GB/s against transfer size per path; ceilings (at the largest size) as horizontal lines."""
    check_plot_available()
    # Figure + Agg directly: no pyplot, so no global state or GUI backend is touched.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import FuncFormatter

    fig = Figure(figsize=(9, 5.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    series: dict[tuple[str, str], list[tuple[int, float]]] = {}
    for r in doc["results"]:
        if r["status"] == "ok":
            label = f"{r['path']} ({r['backend']})" if r["backend"] and r["backend"] != r["path"] else r["path"]
            series.setdefault((r["destination"], label), []).append((r["size"], r["gbps"]))
    for (dest, label), pts in sorted(series.items()):
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if dest == "gpu" else "s",
                linestyle="-" if dest == "gpu" else "--", label=f"{label}, to {dest}")
    ok = [c for c in doc["ceilings"] if c["status"] == "ok"]
    if ok:
        top = max(c["size"] for c in ok)
        styles = iter(["--", ":", "-.", (0, (5, 1))])
        for c in sorted((c for c in ok if c["size"] == top), key=lambda c: CEILINGS.index(c["name"])):
            ax.axhline(c["gbps"], color="gray", linestyle=next(styles, "--"), linewidth=1,
                       label=f"ceiling at {format_bytes(top)}: {c['name']} {_num(c['gbps'])} GB/s")
    sizes = sorted({r["size"] for r in doc["results"]} | {c["size"] for c in doc["ceilings"]})
    ax.set_xscale("log", base=2)
    if sizes:
        ax.set_xticks(sizes, [format_bytes(s) for s in sizes])
    ax.set_yscale("log")
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.set_xlabel("transfer size (one file)")
    ax.set_ylabel("GB/s (median)")
    gpus = ", ".join(g.get("model") or "?" for g in (doc.get("machine") or {}).get("gpus") or []) or "no GPU"
    ax.set_title(f"gdsio bench, {doc['config']['mode']} cache, {gpus}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.savefig(path, dpi=120)
