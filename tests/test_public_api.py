"""The package's public surface: every public module has an ``__all__`` of
names it defines, star imports bring no imported module or typing helper, the
user-facing namespaces show only their API in dir(), and the main entry
points carry full docstrings (Args / Returns / Raises / Example)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import types

import pytest

import gdsio


def _public_modules() -> list[str]:
    names = ["gdsio"]
    for m in pkgutil.walk_packages(gdsio.__path__, "gdsio."):
        if not any(part.startswith("_") for part in m.name.split(".")[1:]):
            names.append(m.name)
    return names


PUBLIC = _public_modules()
# What users import and tab-complete: dir() shows the API alone.
USER_FACING = ["gdsio", "gdsio.transforms", "gdsio.image", "gdsio.data", "gdsio.starvation"]
HELPER_MODULES = ("typing", "typing_extensions", "__future__", "collections.abc")


def _is_leak(module: types.ModuleType, name: str, value: object) -> bool:
    if isinstance(value, types.ModuleType):
        return value.__name__ != f"{module.__name__}.{name}"  # a subpackage of its own is API
    if getattr(value, "__module__", None) == module.__name__:
        return False  # defined here (a typing.Protocol's metaclass lives in typing, the class does not)
    return getattr(value, "__module__", None) in HELPER_MODULES or type(value).__module__ in HELPER_MODULES


def test_the_walk_finds_the_modules():
    assert {"gdsio.io", "gdsio.tensors", "gdsio.transforms", "gdsio.data.loader", "gdsio.image.formats.jpeg",
            "gdsio.tools.cli", "gdsio.tools.doctor", "gdsio.starvation"} <= set(PUBLIC)


@pytest.mark.parametrize("name", PUBLIC)
def test_every_public_module_has_a_true_all(name):
    mod = importlib.import_module(name)
    assert hasattr(mod, "__all__"), f"{name} has no __all__"
    names = list(mod.__all__)
    assert all(isinstance(n, str) for n in names) and len(set(names)) == len(names), names
    missing = [n for n in names if not hasattr(mod, n)]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    assert not [n for n in names if n.startswith("_")], names


@pytest.mark.parametrize("name", PUBLIC)
def test_star_import_brings_no_module_or_typing_helper(name):
    mod = importlib.import_module(name)
    ns: dict[str, object] = {}
    exec(f"from {name} import *", ns)
    ns.pop("__builtins__", None)
    leaks = sorted(n for n, v in ns.items() if _is_leak(mod, n, v))
    assert not leaks, f"`from {name} import *` brings {leaks}"


@pytest.mark.parametrize("name", USER_FACING)
def test_dir_shows_the_api_only(name):
    mod = importlib.import_module(name)
    shown = [n for n in dir(mod) if not n.startswith("_")]
    assert sorted(shown) == sorted(mod.__all__)
    assert not [n for n in shown if _is_leak(mod, n, getattr(mod, n))]
    assert "__version__" in dir(gdsio) and "__doc__" in dir(mod)


def test_transforms_no_longer_shows_np_torch_math_any():
    import gdsio.transforms as T

    assert not {"np", "torch", "math", "Any"} & set(dir(T))


# ---- docstrings ---------------------------------------------------------------------------

DOCUMENTED = {
    "gdsio.read": gdsio.read,
    "gdsio.read_into": gdsio.read_into,
    "gdsio.File": gdsio.File,
    "gdsio.File.read_into": gdsio.File.read_into,
    "gdsio.File.pread": gdsio.File.pread,
    "gdsio.File.read_batch": gdsio.File.read_batch,
    "gdsio.File.size": gdsio.File.size,
    "gdsio.File.close": gdsio.File.close,
    "gdsio.load_safetensors": gdsio.load_safetensors,
    "gdsio.load_npy": gdsio.load_npy,
    "gdsio.backends": gdsio.backends,
    "gdsio.info": gdsio.info,
    "gdsio.settings": gdsio.settings,
    "gdsio.starvation.measure": gdsio.starvation.measure,
    "gdsio.image.read": gdsio.image.read,
    "gdsio.image.decode": gdsio.image.decode,
}


@pytest.mark.parametrize("name", list(DOCUMENTED))
def test_entry_points_have_full_docstrings(name):
    fn = DOCUMENTED[name]
    doc = inspect.getdoc(fn) or ""
    target = fn.__init__ if inspect.isclass(fn) else fn
    params = [p for p in inspect.signature(target).parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_POSITIONAL,)]
    sections = ["Args:", "Returns:", "Example:"] if params else ["Returns:", "Example:"]
    if inspect.isclass(fn) or inspect.signature(target).return_annotation in (None, "None"):
        sections = [s for s in sections if s != "Returns:"]
    for section in sections:
        assert f"\n{section}\n" in f"\n{doc}\n", f"{name}: no {section} section"
    if name not in ("gdsio.File.size", "gdsio.File.close", "gdsio.backends", "gdsio.info"):
        assert "\nRaises:\n" in doc, f"{name}: no Raises section"
    args = doc.split("Args:", 1)[1] if "Args:" in doc else ""
    for p in params:
        shown = f"**{p.name}" if p.kind == p.VAR_KEYWORD else p.name
        assert f"\n    {shown}" in args or f"\n    {shown}:" in args, f"{name}: parameter {p.name!r} is not in Args"
    assert ">>> " in doc, f"{name}: no example"


def test_read_docstring_says_what_a_new_user_needs():
    doc = inspect.getdoc(gdsio.read)
    assert 'Default "cuda"' in doc or 'default "cuda"' in doc
    for word in ("gds", "pinned", "posix", "kvikio", "BackendUnavailable", "FileNotFoundError", "ValueError", 'device="cpu"'):
        assert word in doc, word


@pytest.mark.parametrize("name", ["BackendUnavailable", "NvjpegError", "SampleError", "DecompressionBombError",
                                  "DecompressionBombWarning"])
def test_errors_are_named_where_users_catch_them(name):
    """Tracebacks print ``gdsio.BackendUnavailable`` (what users write in
    ``except``), not the private ``gdsio._core`` or ``gdsio.errors``; pickles
    (a Ray worker's error) resolve to the same class."""
    import pickle
    import traceback

    cls = getattr(gdsio, cls_name := name)
    assert cls.__module__ == "gdsio" and f"{cls.__module__}.{cls.__qualname__}" == f"gdsio.{cls_name}"
    e = cls("boom", index=3, path="a.jpg") if cls is gdsio.SampleError else cls("boom")
    assert traceback.format_exception_only(e)[0].startswith(f"gdsio.{name}: boom")
    assert type(pickle.loads(pickle.dumps(e))) is cls
