"""Settings of the I/O engine: one name each in Python, in the environment
(``GDSIO_<NAME>``) and on the command line (``--<name>``).

Precedence: ``gdsio.settings(...)`` blocks, innermost first, then environment
variables, then defaults. Values are read at each call, so a changed
environment variable takes effect at once.

(The module is ``config``, not ``settings``: ``gdsio.settings`` is the
function that opens a settings block.)
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import os
import re
import types
from typing import Any, Callable, Iterator, Mapping

__all__ = ["BACKENDS", "CPU_SIMD_LEVELS", "Settings", "check_environment", "current", "env_name", "from_env",
           "parse_bytes", "settings"]

BACKENDS = ("auto", "gds", "cufile", "kvikio", "pinned", "posix", "s3", "http", "kvikio-remote")

_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}


def _default_threads() -> int:
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(2, min(8, n))


@dataclasses.dataclass(frozen=True)
class Settings:
    """The knobs of one read; see ``gdsio.settings``.

    threads: reader threads per call. chunk_bytes: bytes per task, a multiple
    of 4096. staging_buffers: pinned staging buffers per reader thread (>= 2,
    so a disk read overlaps a copy). direct_io: read with O_DIRECT (host and
    pinned paths; cuFile always uses it). backend: the default backend.
    huge_pages: host buffers gdsio allocates (read(device="cpu"), the tensor
    loaders on the CPU) of 8 MiB or more ask for transparent huge pages, so
    filling fresh ones faults 512x less often (off where THP compaction stalls
    matter more than read speed). Either way such buffers come from a pool
    that reuses freed ones (see gdsio/io/buffers.py host_empty).
    max_image_pixels: gdsio.image's
    decompression-bomb rule, Pillow's (``PIL.Image.MAX_IMAGE_PIXELS``, the same
    default): an image of more pixels is decoded with a DecompressionBombWarning,
    one of more than twice as many refused (DecompressionBombError), from its header.

    Remote objects (s3://, http(s)://): remote_concurrency: ranged GETs in
    flight per read (each on its own kept-alive connection). remote_chunk_bytes:
    bytes per GET (a multiple of 4096). remote_retries: tries after the first
    on a 5xx/429 answer, a dropped connection or a timeout (with backoff).
    remote_timeout: seconds a connect or a socket read may take.
    """

    threads: int = dataclasses.field(default_factory=_default_threads)
    chunk_bytes: int = 4 << 20
    staging_buffers: int = 3
    direct_io: bool = False
    backend: str = "auto"
    huge_pages: bool = True
    remote_concurrency: int = 8
    remote_chunk_bytes: int = 8 << 20
    remote_retries: int = 4
    remote_timeout: float = 30.0
    max_image_pixels: int = 89_478_485  # Pillow's: 1 GiB of 4-byte pixels, over 3

    def __post_init__(self) -> None:
        _check("threads", self.threads, int, lambda v: 1 <= v <= 256, "between 1 and 256")
        _check(
            "chunk_bytes",
            self.chunk_bytes,
            int,
            lambda v: 4096 <= v <= (1 << 30) and v % 4096 == 0,
            "a multiple of 4096 between 4 KiB and 1 GiB",
        )
        _check("staging_buffers", self.staging_buffers, int, lambda v: 2 <= v <= 64, "between 2 and 64")
        _check("direct_io", self.direct_io, bool, lambda v: True, "a bool")
        _check("backend", self.backend, str, lambda v: v in BACKENDS, "one of " + ", ".join(BACKENDS))
        _check("huge_pages", self.huge_pages, bool, lambda v: True, "a bool")
        _check("remote_concurrency", self.remote_concurrency, int, lambda v: 1 <= v <= 256, "between 1 and 256")
        _check(
            "remote_chunk_bytes",
            self.remote_chunk_bytes,
            int,
            lambda v: 4096 <= v <= (1 << 30) and v % 4096 == 0,
            "a multiple of 4096 between 4 KiB and 1 GiB",
        )
        _check("remote_retries", self.remote_retries, int, lambda v: 0 <= v <= 50, "between 0 and 50")
        if isinstance(self.remote_timeout, int) and not isinstance(self.remote_timeout, bool):
            object.__setattr__(self, "remote_timeout", float(self.remote_timeout))
        _check("remote_timeout", self.remote_timeout, float, lambda v: 0 < v <= 3600, "seconds between 0 and 3600")
        _check("max_image_pixels", self.max_image_pixels, int, lambda v: v >= 1, "a positive int")


def _check(name: str, value: Any, typ: type, ok: Any, what: str) -> None:
    if typ is int and isinstance(value, bool) or not isinstance(value, typ):
        raise TypeError(f"setting {name!r} must be {typ.__name__}, got {type(value).__name__}")
    if not ok(value):
        raise ValueError(f"setting {name!r} must be {what}, got {value!r}")


def parse_bytes(text: str) -> int:
    """'4194304', '4M', '4MiB', '512k' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(?:i?[bB])?\s*", text)
    if not m:
        raise ValueError(f"not a byte count: {text!r} (examples: 4194304, 4M, 4MiB)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def _number(kind: Callable[[str], Any], what: str) -> Callable[[str], Any]:
    """A parser of `kind` whose error says "not <what>" (not Python's "invalid literal ...")."""

    def parse(text: str) -> Any:
        try:
            return kind(text)
        except ValueError:
            raise ValueError(f"not {what}: {text!r}") from None

    return parse


_parse_int = _number(int, "an int")
_parse_float = _number(float, "a number")


def _parse_bool(text: str) -> bool:
    t = text.strip().lower()
    if t in ("1", "true", "on", "yes"):
        return True
    if t in ("0", "false", "off", "no", ""):
        return False
    raise ValueError(f"not a boolean: {text!r} (use 1/0, true/false, on/off)")


_PARSERS = {
    "threads": _parse_int,
    "chunk_bytes": parse_bytes,
    "staging_buffers": _parse_int,
    "direct_io": _parse_bool,
    "backend": lambda s: s.strip().lower(),
    "huge_pages": _parse_bool,
    "remote_concurrency": _parse_int,
    "remote_chunk_bytes": parse_bytes,
    "remote_retries": _parse_int,
    "remote_timeout": _parse_float,
    "max_image_pixels": _parse_int,
}

# Read-only default: blocks replace the mapping, never mutate it.
_overrides: contextvars.ContextVar[Mapping[str, Any]] = contextvars.ContextVar(
    "gdsio_settings", default=types.MappingProxyType({})
)


def env_name(field: str) -> str:
    return "GDSIO_" + field.upper()


def from_env(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The settings that environment variables set, parsed; ValueError names the variable."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    for field, parse in _PARSERS.items():
        raw = environ.get(env_name(field))
        if raw is None or raw.strip() == "":
            continue
        try:
            out[field] = parse(raw)
        except ValueError as e:
            raise ValueError(f"environment variable {env_name(field)}={raw!r}: {e}") from None
    return out


_ENV_NAMES = tuple(env_name(f) for f in _PARSERS)


@functools.lru_cache(maxsize=64)
def _resolve(raw_env: tuple[str | None, ...], overrides: tuple[tuple[str, Any], ...]) -> Settings:
    # Cached on the raw values: a read is called often and Settings checks its fields.
    values = from_env({k: v for k, v in zip(_ENV_NAMES, raw_env) if v is not None})
    values.update(overrides)
    try:
        return Settings(**values)
    except (TypeError, ValueError) as e:
        where = [f"{n}={v!r}" for n, v in zip(_ENV_NAMES, raw_env) if v is not None]
        hint = f" (environment: {', '.join(where)})" if where else ""
        raise type(e)(f"{e}{hint}") from None


# os.environ keeps its variables in a dict of encoded names (_data on POSIX,
# updated by every os.environ change): six dict lookups there cost well under
# a microsecond, where six os.environ.get calls cost several, on every read.
_ENV_DATA = getattr(os.environ, "_data", None)
_ENV_KEYS = tuple(os.environ.encodekey(n) for n in _ENV_NAMES) if _ENV_DATA is not None else ()  # type: ignore[attr-defined]
_ENV_DECODE = getattr(os.environ, "decodevalue", None)


_ENV_ENCODED = _ENV_DATA is not None and _ENV_DECODE is not None


def _raw_env() -> tuple[Any, ...]:
    # The variables as os.environ keeps them (encoded, not decoded: current()'s cache compares
    # these, and decoding a set variable on every read cost ~8k instructions of a 500x375 decode).
    if not _ENV_ENCODED:
        return tuple(os.environ.get(n) for n in _ENV_NAMES)
    return tuple(map(_ENV_DATA.get, _ENV_KEYS))  # type: ignore[union-attr]


def _decoded(raw: tuple[Any, ...]) -> tuple[str | None, ...]:
    if not _ENV_ENCODED or raw.count(None) == len(raw):
        return raw
    return tuple(None if v is None else _ENV_DECODE(v) for v in raw)


# The last answer of current() and what it was made from: a read calls
# current() once or twice, and the environment and the settings blocks seldom
# change between two reads.
_last: tuple[Any, tuple[Any, ...], Settings] | None = None


def carried() -> Callable[[], None]:
    """The ``settings`` blocks in force here, for a thread this one starts:
    the returned function, called first in that thread (a ThreadPoolExecutor's
    initializer, or the start of a Thread's target), puts them in force there.
    A block is thread-local, so without it a worker thread of the Loader would
    read the defaults and the environment only."""
    over = _overrides.get()

    def put() -> None:
        _overrides.set(over)

    return put


def current() -> Settings:
    """The settings in force here and now."""
    global _last
    raw_env = tuple(map(_ENV_DATA.get, _ENV_KEYS)) if _ENV_ENCODED else _raw_env()  # type: ignore[union-attr]
    over = _overrides.get()
    last = _last
    if last is not None and last[0] is over and last[1] == raw_env:
        return last[2]
    made = _current(_decoded(raw_env), over)
    _last = (over, raw_env, made)
    return made


def _current(raw_env: tuple[str | None, ...], over: Mapping[str, Any]) -> Settings:
    overrides = tuple(sorted(over.items()))
    try:
        hash(overrides)
    except TypeError:  # an unhashable value: let Settings say what is wrong with it
        return _resolve.__wrapped__(raw_env, overrides)
    return _resolve(raw_env, overrides)


#: Values of ``GDSIO_CPU_SIMD``, which caps the CPU resize's SIMD level (read
#: by the extension at its first resize; it ignores any other value).
CPU_SIMD_LEVELS = ("scalar", "avx2", "avx512")


def check_environment(environ: Mapping[str, str] | None = None) -> Settings:
    """Parses and checks every ``GDSIO_*`` setting of the environment now,
    where the library would only at its first read (``gdsio`` commands call
    this before any work, so a typo is not found after minutes of it).

    Args:
        environ: the variables to check (default: ``os.environ``).

    Returns:
        Settings: what the environment sets, over the defaults (no
        ``gdsio.settings`` block counts).

    Raises:
        ValueError: a variable that does not parse or is out of range; the
            message names the variable and its value.

    Example:
        >>> check_environment({"GDSIO_THREADS": "abc"})
        ValueError: environment variable GDSIO_THREADS='abc': not an int: 'abc'
    """
    environ = os.environ if environ is None else environ
    simd = environ.get("GDSIO_CPU_SIMD")
    if simd and simd not in CPU_SIMD_LEVELS:
        raise ValueError(f"environment variable GDSIO_CPU_SIMD={simd!r}: not a SIMD level "
                         f"(one of {', '.join(CPU_SIMD_LEVELS)}; unset: the best this CPU has)")
    return _resolve.__wrapped__(tuple(environ.get(n) for n in _ENV_NAMES), ())


@contextlib.contextmanager
def settings(**changes: Any) -> Iterator[Settings]:
    """Overrides settings of the I/O engine inside a ``with`` block; blocks nest
    (innermost first), then the ``GDSIO_<NAME>`` environment variables, then
    the defaults. Thread- and task-local (a contextvar): other threads keep theirs
    (a gdsio.Loader pass carries those in force at ``iter()`` into its threads).

    Args:
        **changes: any of ``threads`` (reader threads per call, 1-256),
            ``chunk_bytes`` (bytes per task, an int or text like "8M", a
            multiple of 4096), ``staging_buffers`` (pinned buffers per reader
            thread, >= 2), ``direct_io`` (bool: O_DIRECT for host and pinned
            reads), ``backend`` (the default backend), ``huge_pages`` (bool:
            transparent huge pages for large host buffers gdsio allocates),
            ``remote_concurrency`` (ranged GETs in flight per remote read,
            1-256), ``remote_chunk_bytes`` (bytes per GET, like chunk_bytes),
            ``remote_retries`` (tries after the first, 0-50),
            ``remote_timeout`` (seconds per connect or socket read),
            ``max_image_pixels`` (gdsio.image warns of images of more pixels
            and refuses those of more than twice as many, as Pillow does).

    Returns:
        A context manager; ``with`` gives the Settings in force inside the block.

    Raises:
        TypeError: an unknown setting, or a value of the wrong type.
        ValueError: a value out of range (checked when the block is entered),
            or an environment variable that does not parse.

    Example:
        >>> with gdsio.settings(threads=8, chunk_bytes="8M", direct_io=True) as s:
        ...     t = gdsio.read("shard-0001.bin", device="cpu")
        >>> s.threads
        8
    """
    unknown = set(changes) - set(_PARSERS)
    if unknown:
        raise TypeError(f"unknown setting(s) {sorted(unknown)}; known: {sorted(_PARSERS)}")
    for name in ("chunk_bytes", "remote_chunk_bytes"):
        if isinstance(changes.get(name), str):
            changes[name] = parse_bytes(changes[name])
    merged = {**_overrides.get(), **changes}
    token = _overrides.set(merged)
    try:
        yield current()
    finally:
        _overrides.reset(token)
