"""URLs of remote objects: which paths are URLs, how messages show them.

Messages, reprs, ReadStats and logs name a remote object by its *display*
form: ``s3://bucket/key`` as given, an http(s) URL without its user
information and without its query string (a presigned URL carries its
credential and signature there).

>>> is_url("s3://bucket/train/cat.jpg"), is_url("train/cat.jpg")
(True, False)
>>> display("https://user:pw@host/a.bin?X-Amz-Signature=abc")
'https://host/a.bin?…'
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any

__all__ = ["SCHEMES", "display", "fspath_or_url", "is_url", "redact", "request_url", "scheme_of", "split_s3"]

#: URL schemes gdsio reads, and the reader kind (a backend's ``sources``) of each.
SCHEMES = {"s3": "s3", "http": "http", "https": "http"}


def scheme_of(path: Any) -> str | None:
    """'s3', 'http' or 'https' when `path` is such a URL (a str), else None."""
    if not isinstance(path, str):
        return None
    head, sep, _ = path.partition("://")
    if not sep:
        return None
    s = head.lower()
    return s if s in SCHEMES else None


def request_url(p: urllib.parse.SplitResult) -> str:
    """The URL a request goes to: without user information (sent, if at all, as a
    header) and fragment, its path "/" when empty."""
    netloc = p.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path or "/", p.query, ""))


def is_url(path: Any) -> bool:
    """True when `path` is an s3://, http:// or https:// URL."""
    return scheme_of(path) is not None


def split_s3(url: str) -> tuple[str, str]:
    """'s3://bucket/some/key' -> ('bucket', 'some/key'); ValueError naming the URL if malformed."""
    rest = url.split("://", 1)[1]
    bucket, _, key = rest.partition("/")
    if not bucket:
        raise ValueError(f"'{url}' names no bucket (expected s3://bucket/key)")
    return bucket, key


def display(url: str) -> str:
    """The form of `url` that messages show: no user information, no query."""
    if scheme_of(url) == "s3":
        return url
    p = urllib.parse.urlsplit(url)
    host = p.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    netloc = host + (f":{p.port}" if p.port else "")
    return urllib.parse.urlunsplit((p.scheme, netloc, p.path, "…" if p.query else "", ""))


def fspath_or_url(path: Any) -> Any:
    """`path` unchanged when it is a URL, else os.fspath(path) (TypeError as os.fspath)."""
    return path if is_url(path) else os.fspath(path)


def redact(text: str, url: str) -> str:
    """`text` (another library's message) with `url` in its display form and
    every query string cut, so no presigned signature or credential shows.

    >>> redact("GET https://u:p@h/k?X-Amz-Signature=abc failed: 403", "https://u:p@h/k?X-Amz-Signature=abc")
    'GET https://h/k?… failed: 403'
    """
    return re.sub(r"\?[^\s'\"]*", "?…", text.replace(url, display(url)))
