"""File systems: which mount holds a path, and whether O_DIRECT works there.

>>> from gdsio.platform import filesystems
>>> filesystems.filesystem_of("/")["fs_type"]      # doctest: +SKIP
'ext4'
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import mmap
import os
import re
import tempfile
from typing import Any

from .probe import errno_text, read_text

__all__ = ["MountEntry", "filesystem_of", "o_direct_probe", "parse_mountinfo"]


@dataclasses.dataclass(frozen=True)
class MountEntry:
    """One line of /proc/self/mountinfo, unescaped."""

    mount_point: str
    root: str
    fs_type: str
    source: str
    options: str  # per-mount options (rw, noatime, ...)
    super_options: str  # filesystem-wide options (e.g. dax, errors=...)
    major_minor: str  # st_dev as "major:minor": /sys/dev/block/<it> names the disk


_OCTAL_ESCAPE = re.compile(r"\\([0-7]{3})")


def _unescape_mountinfo(field: str) -> str:
    # The kernel writes space, tab, newline and backslash as \040 \011 \012 \134.
    return _OCTAL_ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """Parse the text of /proc/<pid>/mountinfo; malformed lines are skipped.

    >>> parse_mountinfo("27 1 254:0 / / rw - ext4 /dev/vda rw")[0].fs_type
    'ext4'
    """
    entries = []
    # Only "\n" ends a line: the kernel escapes it, but not \r or \x1c, which
    # str.splitlines() would also split on.
    for line in text.split("\n"):
        fields = line.split(" ")
        try:
            # A variable number of optional fields sits before the "-" separator.
            sep = fields.index("-", 6)
        except ValueError:
            continue
        if len(fields) < sep + 3:
            continue
        entries.append(MountEntry(
            mount_point=_unescape_mountinfo(fields[4]),
            root=_unescape_mountinfo(fields[3]),
            fs_type=_unescape_mountinfo(fields[sep + 1]),
            source=_unescape_mountinfo(fields[sep + 2]),
            options=fields[5],
            super_options=fields[sep + 3] if len(fields) > sep + 3 else "",
            major_minor=fields[2],
        ))
    return entries


def _mount_containing(path: str, entries: list[MountEntry]) -> MountEntry | None:
    best = None
    for entry in entries:
        inside = path == entry.mount_point or path.startswith(entry.mount_point.rstrip("/") + "/")
        # ">=": of mounts stacked on one point, the later line is the visible one.
        if inside and (best is None or len(entry.mount_point) >= len(best.mount_point)):
            best = entry
    return best


def filesystem_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> dict[str, Any]:
    """Mount point, filesystem type, source and options of the mount holding ``path``.

    >>> filesystem_of("/dev/shm")["fs_type"]     # doctest: +SKIP
    'tmpfs'
    """
    real = os.path.realpath(path)
    out: dict[str, Any] = {"path": real, "mount_point": None, "fs_type": None, "source": None,
                           "options": None, "super_options": None, "major_minor": None,
                           "reason": None}
    text = read_text(mountinfo)
    if text is None:
        out["reason"] = f"{mountinfo} is not readable (not Linux?)"
        return out
    entry = _mount_containing(real, parse_mountinfo(text))
    if entry is None:
        out["reason"] = f"no mount in {mountinfo} contains {real}"
        return out
    out.update(mount_point=entry.mount_point, fs_type=entry.fs_type, source=entry.source,
               options=entry.options, super_options=entry.super_options,
               major_minor=entry.major_minor)
    return out


def _o_direct_read(file_path: str, fs_type: str | None) -> str | None:
    """None when O_DIRECT open and an aligned 4 KiB read work, else why not."""
    flag = getattr(os, "O_DIRECT", None)
    if flag is None:
        return "O_DIRECT is not available on this platform"
    try:
        buf = mmap.mmap(-1, 4096)  # anonymous mappings are page aligned, as O_DIRECT needs
    except OSError as exc:
        return f"cannot map an aligned 4096-byte buffer: {errno_text(exc)}"
    try:
        try:
            fd = os.open(file_path, os.O_RDONLY | flag | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno == errno.EINVAL:  # the filesystem has no direct I/O
                return f"O_DIRECT refused by this filesystem ({fs_type}): {errno_text(exc)}"
            return f"cannot open {file_path} with O_DIRECT: {errno_text(exc)}"
        try:
            os.preadv(fd, [buf], 0)
        except OSError as exc:
            return (f"O_DIRECT open works but an aligned 4096-byte read fails on this "
                    f"filesystem ({fs_type}): {errno_text(exc)}")
        finally:
            os.close(fd)
    finally:
        buf.close()
    return None


def o_direct_probe(path: str) -> dict[str, Any]:
    """Whether O_DIRECT open and an aligned 4 KiB read work at ``path``.

    ``path`` is a file, or a directory in which a 4 KiB probe file is made and
    removed again. Note that tmpfs accepts O_DIRECT since Linux 6.6.

    >>> o_direct_probe("/data")                  # doctest: +SKIP
    {'ok': True, 'reason': None, 'fs_type': 'xfs', 'path': '/data'}
    """
    fs_type = filesystem_of(path)["fs_type"]
    out: dict[str, Any] = {"ok": False, "reason": None, "fs_type": fs_type, "path": path}
    if not os.path.exists(path):
        out["reason"] = f"{path} does not exist"
        return out
    if not os.path.isdir(path):
        out["reason"] = _o_direct_read(path, fs_type)
        out["ok"] = out["reason"] is None
        return out
    try:
        fd, probe = tempfile.mkstemp(prefix=".gdsio-odirect-", dir=path)
    except OSError as exc:
        out["reason"] = f"cannot create a probe file in {path} (not writable?): {errno_text(exc)}"
        return out
    try:
        try:
            # A full block, so the probe read really moves data through O_DIRECT.
            os.write(fd, b"\0" * 4096)
        finally:
            os.close(fd)
        out["reason"] = _o_direct_read(probe, fs_type)
    except OSError as exc:
        out["reason"] = f"cannot write a probe file in {path}: {errno_text(exc)}"
    finally:
        with contextlib.suppress(OSError):
            os.unlink(probe)
    out["ok"] = out["reason"] is None
    return out
