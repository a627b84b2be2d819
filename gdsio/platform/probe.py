"""Small readers shared by the platform probes: a file's text or None, an
errno in a sentence. Probes never raise because what they look for is missing."""

from __future__ import annotations

__all__ = ["errno_text", "read_text"]


def read_text(path: str) -> str | None:
    """The file's text, or None when it is missing or unreadable."""
    try:
        # surrogateescape decodes odd bytes as os.fsdecode does, so paths compare equal.
        with open(path, encoding="utf-8", errors="surrogateescape", newline="") as f:
            return f.read()
    except OSError:
        return None


def errno_text(exc: OSError) -> str:
    # str(OSError) appends the file name; the short form reads better in a sentence.
    return f"[Errno {exc.errno}] {exc.strerror}" if exc.errno else str(exc)
