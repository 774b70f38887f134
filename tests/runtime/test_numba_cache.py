"""numba's disk cache is keyed on the files of the kernels a kernel links (numba_cache.py).

A kernel compiled with cache=True and a callee in another module: after an edit to the
callee alone, numba's own keying (the caller's file) reloads the stale compiled caller;
with link_sources the caller is compiled afresh. Each run is a fresh interpreter, so the
second one can only get its kernel from the disk cache or a new compile."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CALLER = """
from numba import njit
{link}
from pkg.callee import f

@njit(cache=True)
def g(x):
    return f(x) * 2
"""


def _run(root, module):
    code = f"import {module} as m; print(m.g(1))"
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return int(out.stdout.strip())


def test_edit_to_a_linked_callee_recompiles_the_caller(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "callee.py").write_text("from numba import njit\n\n@njit\ndef f(x):\n    return x + 1\n")
    link = textwrap.dedent("""
        import pkg.callee
        from furca.runtime.numba_cache import link_sources
        link_sources(__file__, "pkg.callee")
    """)
    (pkg / "linked.py").write_text(CALLER.format(link=link))
    (pkg / "plain.py").write_text(CALLER.format(link=""))
    assert _run(tmp_path, "pkg.linked") == 4
    assert _run(tmp_path, "pkg.plain") == 4
    assert list((pkg / "__pycache__").glob("linked.g-*.nbi")), "the linked kernel was not cached on disk"

    (pkg / "callee.py").write_text("from numba import njit\n\n@njit\ndef f(x):\n    return x + 2\n")
    assert _run(tmp_path, "pkg.plain") == 4  # numba's own keying: the stale caller (why linking exists)
    assert _run(tmp_path, "pkg.linked") == 6
    assert _run(tmp_path, "pkg.linked") == 6  # and the new entry is cached and reused
