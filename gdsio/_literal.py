"""The Python literals of a .npy header, parsed without the ast module.

numpy reads the header dict with ``ast.literal_eval``. On CPython 3.11 the ast
module is not thread-safe (gh-106905: a SystemError "AST constructor recursion
depth mismatch" in whichever thread uses ast next, pytest's assertion
rewriting included), and gdsio parses headers from reader threads. A header
holds strings, ints, True/False/None, tuples, lists and dicts; this parser
takes exactly those, nested at most `_MAX_DEPTH` deep, and never evaluates code.
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\s*(?:
        [uU]?(?P<str>'[^'\\\n]*(?:\\.[^'\\\n]*)*'|"[^"\\\n]*(?:\\.[^"\\\n]*)*")
      | (?P<int>[-+]?\d+)L?
      | (?P<name>True|False|None)\b
      | (?P<punct>[{}()\[\]:,])
    )""",
    re.VERBOSE | re.ASCII,
)  # strings unrolled (no backtracking per character); u'' as Python 2 numpy wrote
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "\n": ""}
_HEX = {"x": 2, "u": 4, "U": 8}
_MAX_DEPTH = 32
# numpy's own cap on a .npy header (numpy.lib.format, max_header_size): longer
# ones are refused before parsing, so a crafted header costs milliseconds.
NPY_MAX_HEADER = 10000


def _unquote(tok: str) -> str:
    """The string a quoted token stands for, with Python's escapes (as repr writes them)."""
    body = tok[1:-1]
    if "\\" not in body:
        return body
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in _ESCAPES:
            out.append(_ESCAPES[nxt])
            i += 2
        elif nxt in _HEX:
            digits = body[i + 2 : i + 2 + _HEX[nxt]]
            if len(digits) != _HEX[nxt] or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"a bad \\{nxt} escape in a string")
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise ValueError("an escape beyond the last Unicode code point")
            out.append(chr(code))
            i += 2 + _HEX[nxt]
        elif nxt in "01234567":
            j = i + 1
            while j < min(i + 4, len(body)) and body[j] in "01234567":
                j += 1
            out.append(chr(int(body[i + 1 : j], 8)))
            i = j
        else:
            raise ValueError(f"unsupported escape \\{nxt} in a string")
    return "".join(out)


def literal(text: str) -> Any:
    """The value of `text`, a literal of str, int, bool, None, tuple, list and
    dict; ValueError for anything else (names, calls, operators, sets, floats)."""
    toks: list[tuple[str, str]] = []
    pos, end = 0, len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ValueError(f"not a literal at offset {pos}: {text[pos:pos + 20]!r}")
        kind = m.lastgroup or ""
        toks.append((kind, m.group(kind)))
        pos = m.end()
    if not toks:
        raise ValueError("empty literal")
    value, at = _value(toks, 0, 0)
    if at != len(toks):
        raise ValueError(f"trailing text after the literal: {toks[at][1]!r}")
    return value


def _value(toks: list[tuple[str, str]], at: int, depth: int) -> tuple[Any, int]:
    if depth > _MAX_DEPTH:
        raise ValueError(f"literal nested deeper than {_MAX_DEPTH}")
    if at >= len(toks):
        raise ValueError("the literal ends early")
    kind, tok = toks[at]
    if kind == "str":
        return _unquote(tok), at + 1
    if kind == "int":
        return int(tok), at + 1
    if kind == "name":
        return {"True": True, "False": False, "None": None}[tok], at + 1
    if tok in "([{":
        close = {"(": ")", "[": "]", "{": "}"}[tok]
        items: list[Any] = []
        at += 1
        commas = 0
        while True:
            if at >= len(toks):
                raise ValueError(f"no closing {close!r}")
            if toks[at][1] == close:
                at += 1
                break
            if tok == "{":
                key, at = _value(toks, at, depth + 1)
                if at >= len(toks) or toks[at][1] != ":":
                    raise ValueError("a dict entry without ':'")
                val, at = _value(toks, at + 1, depth + 1)
                try:
                    hash(key)
                except TypeError:
                    raise ValueError("an unhashable dict key") from None
                items.append((key, val))
            else:
                v, at = _value(toks, at, depth + 1)
                items.append(v)
            if at < len(toks) and toks[at][1] == ",":
                at += 1
                commas += 1
            elif at < len(toks) and toks[at][1] != close:
                raise ValueError(f"expected ',' or {close!r}, got {toks[at][1]!r}")
        if tok == "{":
            return dict(items), at
        if tok == "[":
            return items, at
        if len(items) == 1 and commas == 0:  # (x) is x, (x,) a tuple
            return items[0], at
        return tuple(items), at
    raise ValueError(f"unexpected {tok!r}")
