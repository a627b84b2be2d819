"""gdsio.io.npy_literal: the .npy header parser that replaces ast.literal_eval (not
thread-safe on CPython 3.11) must agree with it on literals and refuse code."""

from __future__ import annotations

import ast
import io
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import in_threads

from gdsio.io.npy_literal import literal

scalars = st.one_of(st.integers(), st.booleans(), st.none(), st.text(max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.tuples(inner), st.lists(inner, max_size=4).map(tuple),
    st.dictionaries(st.text(max_size=6), inner, max_size=4)), max_leaves=20)


@given(values)
@settings(max_examples=300)
def test_agrees_with_ast_literal_eval(v):
    text = repr(v)
    assert literal(text) == ast.literal_eval(text)


@pytest.mark.parametrize("descr", ["<f4", ">i8", "|u1", "<U7", "<c16", "|b1", "<M8[ns]", [("a", "<f4"), ("b", "|u1", (2, 3))]])
@pytest.mark.parametrize("shape", [(), (0,), (3,), (2, 3, 4)])
def test_headers_numpy_writes(descr, shape):
    b = io.BytesIO()
    d = {"descr": np.lib.format.dtype_to_descr(np.dtype(descr)), "fortran_order": True, "shape": shape}
    np.lib.format.write_array_header_2_0(b, d)
    text = b.getvalue()[12:].decode("latin1")
    assert literal(text) == ast.literal_eval(text) == d


@pytest.mark.parametrize("text", [
    "{'a': __import__('os').system('true')}", "{'a': 1+2}", "{'a': 1", "{'a':}", "lambda: 1", "",
    "   ", "{'a': 1}}", "[1 2]", "{[1]: 2}", "{(1, [2]): 3}", "{'a': \u0661}", "'\\x4'", "f'{x}'",
    "(" * 201 + ")" * 201, "-(-1)", "-True", "{}\n1", "\n  {}", "{} \\", "0_7", "1__0", "b'\u20ac'", "'a' b'b'",
    "{'a': 1}\x00", "x", "{'a': ...}", "(3L,)", "{}\n  ", "{}  #x\n\t", "{\n}\n ",
])
def test_refuses_what_is_not_a_plain_literal(text):
    with pytest.raises(ValueError):
        literal(text)


@pytest.mark.parametrize("text", [
    "1.5", "(" * 200 + ")" * 200, "'x' 'y'", "'\\q'", "b'x'", "r'\\n'", "0x1f", "0o7", "0b1", "1_000", "00", "-(1)",
    "+1", "- 1", "1j", "{'a': 1} # a comment", "{'a': \\\n 1}", "{'a':\n 1,\n}", "'\\N{BULLET}'", "'''x'''",
    "{'a': 1}\r", "\x0c{'a': 1}", "\n{'a': 1}", "  {'a': 1}", "{'a': 1}\n\n# end\n",
])
def test_reads_what_ast_literal_eval_reads(text):
    """Python's spelling, as numpy.load (ast.literal_eval) reads headers: comments,
    continuations, joined strings, every int spelling, nesting up to 200."""
    with warnings.catch_warnings():  # "\\q": Python warns of the escape, and reads it
        warnings.simplefilter("ignore")
        expected = ast.literal_eval(text)
    assert literal(text) == expected


def test_sets_are_not_read():
    """A deliberate difference: a set is never part of a header numpy loads."""
    with pytest.raises(ValueError, match="sets are not read"):
        literal("{1, 2}")


def test_escapes_as_repr_writes_them():
    for s in ["a'b", 'a"b', "\x00\x9b\u20ac\U0001f600", "tab\there", "back\\slash"]:
        assert literal(repr(s)) == s
    assert literal("'\\101\\0'") == "A\0"


def test_python2_long_suffix_and_unicode_prefix_as_numpy_accepts():
    assert literal("{'descr': '<f8', 'fortran_order': False, 'shape': (3L, 4L), }", python2_longs=True) == {
        "descr": "<f8", "fortran_order": False, "shape": (3, 4)}
    assert literal("{u'descr': u'<f8'}") == {"descr": "<f8"}


def test_threads_parse_at_once():
    text = repr({"descr": "<f4", "fortran_order": False, "shape": tuple(range(20))})

    def work():
        for _ in range(300):
            assert literal(text)["shape"] == tuple(range(20))

    in_threads(work)
