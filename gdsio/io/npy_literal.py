"""The Python literals of a .npy header, parsed without the ast module.

numpy reads the header dict with ``ast.literal_eval``. On CPython 3.11 the ast
module is not thread-safe (gh-106905: a SystemError "AST constructor recursion
depth mismatch" in whichever thread uses ast next, pytest's assertion
rewriting included), and gdsio parses headers from reader threads. Python's
own ``tokenize`` (thread-safe) splits the text, so that comments, backslash
continuations, implicit string concatenation and every int spelling are read
as Python reads them; this parser then takes exactly the literals
literal_eval takes that a header can hold (str, bytes, numbers, True/False/None,
tuples, lists, dicts), nested at most as deep as Python's parser allows, and
never evaluates code.
"""

from __future__ import annotations

import io
import tokenize
import unicodedata
from typing import Any

__all__ = ["NPY_MAX_HEADER", "literal"]

_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f",
            "v": "\v", "\n": ""}
_HEX = {"x": 2, "u": 4, "U": 8}
# Python's tokenizer refuses more than 200 nested brackets ("too many nested parentheses").
_MAX_DEPTH = 200
# numpy's own cap on a .npy header (numpy.lib.format, max_header_size): longer
# ones are refused before parsing, so a crafted header costs milliseconds.
NPY_MAX_HEADER = 10000
_SKIP = {tokenize.NL, tokenize.COMMENT}


def _unquote(body: str, raw: bool, as_bytes: bool) -> str:
    """The string a quoted token's body stands for, with Python's escapes; an
    escape Python does not know keeps its backslash, as Python keeps it."""
    if raw or "\\" not in body:
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
        elif nxt in _HEX and not (as_bytes and nxt != "x"):
            digits = body[i + 2 : i + 2 + _HEX[nxt]]
            if len(digits) != _HEX[nxt] or any(d not in "0123456789abcdefABCDEF" for d in digits):
                raise ValueError(f"a bad \\{nxt} escape in a string")
            code = int(digits, 16)
            if code > 0x10FFFF:
                raise ValueError("an escape beyond the last Unicode code point")
            out.append(chr(code))
            i += 2 + _HEX[nxt]
        elif nxt == "N" and not as_bytes:
            close = body.find("}", i)
            if body[i + 2 : i + 3] != "{" or close < 0:
                raise ValueError("a bad \\N escape in a string")
            try:
                out.append(unicodedata.lookup(body[i + 3 : close]))
            except KeyError:
                raise ValueError(f"unknown Unicode character name {body[i + 3 : close]!r}") from None
            i = close + 1
        elif nxt in "01234567":
            j = i + 1
            while j < min(i + 4, len(body)) and body[j] in "01234567":
                j += 1
            code = int(body[i + 1 : j], 8)
            if as_bytes and code > 0o377:
                raise ValueError("an octal escape beyond a byte in a bytes literal")
            out.append(chr(code))
            i = j
        else:
            out.append("\\")  # "\d" is a backslash and a d, as in Python
            i += 1
    return "".join(out)


def _string(tok: str) -> str | bytes:
    """The value of one STRING token: its prefix (r, u, b; f is code), its quotes, its escapes."""
    q = min(i for i in (tok.find("'"), tok.find('"')) if i >= 0)
    prefix = tok[:q].lower()
    if "f" in prefix:
        raise ValueError("an f-string is code, not a literal")
    triple = len(tok) - q >= 6 and tok[q : q + 3] == tok[q] * 3
    n = 3 if triple else 1
    body = tok[q + n : len(tok) - n]
    as_bytes = "b" in prefix
    text = _unquote(body, "r" in prefix, as_bytes)
    if as_bytes:
        if any(ord(c) > 127 for c in body):
            raise ValueError("bytes can only hold ASCII characters")
        return text.encode("latin1")
    return text


def _tokens(text: str, python2_longs: bool) -> list[tuple[int, str]]:
    """(type, string) of the tokens of one expression, as Python's tokenizer
    splits it; comments and line breaks inside brackets dropped."""
    if "\0" in text:
        raise ValueError("a NUL character in the text")
    toks: list[tuple[int, str]] = []
    ended = False  # after the expression's NEWLINE only blank lines and comments may follow
    try:
        # Universal newlines, as Python's compile reads source.
        source = text.lstrip(" \t").replace("\r\n", "\n").replace("\r", "\n")
        for t in tokenize.generate_tokens(io.StringIO(source).readline):
            if t.type in _SKIP or t.type == tokenize.ENDMARKER:
                continue
            if t.type in (tokenize.NEWLINE, tokenize.DEDENT):
                ended = True
                continue
            if ended or t.type in (tokenize.INDENT, tokenize.ERRORTOKEN):
                raise ValueError(f"not a literal at {t.string!r} (line {t.start[0]})")
            if python2_longs and t.type == tokenize.NAME and t.string == "L" and toks and toks[-1][0] == tokenize.NUMBER:
                continue  # numpy's _filter_header: Python 2 wrote 3L in headers of versions 1.0 and 2.0
            toks.append((t.type, t.string))
    except (tokenize.TokenError, SyntaxError) as e:  # IndentationError is a SyntaxError
        raise ValueError(f"not a literal: {e}") from None
    # Python's parser (not tokenize) refuses a last line of blanks with no line
    # break after it as an "unexpected indent" (a form feed resets the column).
    head, brk, last = source.rpartition("\n")
    if not python2_longs and brk and last and not last.strip(" \t\x0c") and last.split("\x0c")[-1] and not head.endswith("\\"):
        raise ValueError("not a literal: unexpected indent on the last line")
    return toks


def literal(text: str, *, python2_longs: bool = False) -> Any:
    """The value of `text`, one literal as ``ast.literal_eval`` reads it, of
    str, bytes, int, float, complex, bool, None, tuple, list and dict;
    ValueError for anything else (names, calls, operators, sets).
    ``python2_longs``: as numpy reads headers of format versions 1.0 and 2.0
    (re-tokenized by its _filter_header when literal_eval refuses them): ints
    spelled 3L are taken as 3, and a last line of blanks is no indent."""
    toks = _tokens(text, python2_longs)
    if not toks:
        raise ValueError("empty literal")
    value, at, _ = _value(toks, 0, 0)
    if at != len(toks):
        raise ValueError(f"trailing text after the literal: {toks[at][1]!r}")
    return value


def _number(tok: str) -> Any:
    t = tok.replace("_", "")
    if t[-1] in "jJ":
        return complex(t)
    if t[:2].lower() not in ("0x", "0o", "0b") and any(c in t for c in ".eE"):
        return float(t)
    if len(t) > 1 and t[0] == "0" and t[1].isdigit() and t.strip("0"):
        raise ValueError(f"leading zeros in the int {tok!r}")
    return int(t, 0)


def _value(toks: list[tuple[int, str]], at: int, depth: int) -> tuple[Any, int, bool]:
    """(value, next token, whether it is a plain number: what a sign may precede)."""
    if at >= len(toks):
        raise ValueError("the literal ends early")
    kind, tok = toks[at]
    if kind == tokenize.STRING:
        v = _string(tok)
        at += 1
        while at < len(toks) and toks[at][0] == tokenize.STRING:  # 'a' 'b' is 'ab'
            w = _string(toks[at][1])
            if type(w) is not type(v):
                raise ValueError("bytes and str literals cannot be joined")
            v += w  # type: ignore[operator]
            at += 1
        return v, at, False
    if kind == tokenize.NUMBER:
        try:
            return _number(tok), at + 1, True
        except ValueError as e:
            raise ValueError(f"a bad number {tok!r}: {e}") from None
    if kind == tokenize.NAME:
        if tok in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[tok], at + 1, False
        raise ValueError(f"a name ({tok!r}) is not a literal")
    if tok in ("-", "+"):
        v, at, plain = _value(toks, at + 1, depth)
        if not plain:
            raise ValueError("a sign before something that is not a number")
        return (-v if tok == "-" else +v), at, False
    if tok in ("(", "[", "{"):
        if depth >= _MAX_DEPTH:
            raise ValueError(f"literal nested deeper than {_MAX_DEPTH}")
        close = {"(": ")", "[": "]", "{": "}"}[tok]
        items: list[Any] = []
        at += 1
        commas = 0
        plain = False
        while True:
            if at >= len(toks):
                raise ValueError(f"no closing {close!r}")
            if toks[at][1] == close:
                at += 1
                break
            if tok == "{":
                key, at, _ = _value(toks, at, depth + 1)
                if at >= len(toks) or toks[at][1] != ":":
                    raise ValueError("a dict entry without ':' (sets are not read)")
                val, at, _ = _value(toks, at + 1, depth + 1)
                try:
                    hash(key)
                except TypeError:
                    raise ValueError("an unhashable dict key") from None
                items.append((key, val))
            else:
                v, at, plain = _value(toks, at, depth + 1)
                items.append(v)
            if at < len(toks) and toks[at][1] == ",":
                at += 1
                commas += 1
            elif at < len(toks) and toks[at][1] != close:
                raise ValueError(f"expected ',' or {close!r}, got {toks[at][1]!r}")
        if tok == "{":
            return dict(items), at, False
        if tok == "[":
            return items, at, False
        if len(items) == 1 and commas == 0:  # (x) is x, (x,) a tuple
            return items[0], at, plain
        return tuple(items), at, False
    raise ValueError(f"unexpected {tok!r}")
