"""Whether the kvikio backends can run is decided by importing kvikio, not by
finding it: libkvikio-cu13 26.10 without rapids-logger's librapids_logger.so
is installed but raises on import (issue 28, F2). Each case runs in a fresh
interpreter with a stand-in ``kvikio`` package first on sys.path, so no real
kvikio is needed (or touched)."""

from __future__ import annotations

import json
import textwrap

import pytest

from conftest import run_python

# What libkvikio's loader raises when librapids_logger.so is missing.
MISSING_LOGGER = "librapids_logger.so: cannot open shared object file: No such file or directory"

CHECK = textwrap.dedent('''
    import json, sys
    sys.path.insert(0, {pkgs!r})
    import numpy as np
    import gdsio
    from gdsio.io.kvikio import kvikio_unusable_reason

    imported_by_gdsio = "kvikio" in sys.modules
    rows = {{b.name: [b.usable, b.reason] for b in gdsio.backends()}}
    again = kvikio_unusable_reason()
    try:
        gdsio.read_into({data!r}, np.empty(16, dtype=np.uint8), backend="kvikio")
        read = ""
    except gdsio.BackendUnavailable as e:
        read = str(e)
    except Exception as e:  # the stand-in's CuFile is not there: it got past the usability check
        read = "ran: " + type(e).__name__
    print(json.dumps({{"imported_by_gdsio": imported_by_gdsio, "rows": rows, "again": again, "read": read,
                       "imports": open({log!r}).read().count("import")}}))
''')


def run_with(tmp_path, init: str) -> dict:
    pkg = tmp_path / "pkgs" / "kvikio"
    pkg.mkdir(parents=True)
    log = tmp_path / "imports.log"
    log.write_text("")
    (pkg / "__init__.py").write_text(f"open({str(log)!r}, 'a').write('import\\n')\n" + init)
    (pkg / "defaults.py").write_text("")
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(16))
    r = run_python(CHECK.format(pkgs=str(tmp_path / "pkgs"), data=str(data), log=str(log)))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("error", ["OSError", "ImportError"])
def test_a_kvikio_that_cannot_import_is_unusable_and_says_why(tmp_path, error):
    got = run_with(tmp_path, f"raise {error}({MISSING_LOGGER!r})\n")
    why = f"kvikio is installed but cannot be imported here: {error}: {MISSING_LOGGER}"
    assert got["rows"]["kvikio"] == [False, why]
    assert got["rows"]["kvikio-remote"] == [False, why]
    assert got["read"] == f"kvikio is not available: {why}"  # BackendUnavailable, not a failed read
    assert got["again"] == why
    assert got["imports"] == 1  # tried once a process, however often asked
    assert not got["imported_by_gdsio"]  # `import gdsio` does not import kvikio


def test_a_kvikio_that_imports_is_usable(tmp_path):
    got = run_with(tmp_path, "")
    assert got["rows"]["kvikio"] == [True, ""]
    assert got["rows"]["kvikio-remote"] == [True, ""]
    assert got["again"] is None
    assert got["read"].startswith("ran: ")  # past the check, into the stand-in, which reads nothing
    assert not got["imported_by_gdsio"]
