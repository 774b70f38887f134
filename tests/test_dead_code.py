"""No dead code in furca: vulture, configured in pyproject.toml ([tool.vulture]: the
package, confidence 60, tools/vulture_whitelist.py for names that are API or called by
a framework), finds nothing. A finding is removed, or whitelisted with its reason."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import vulture  # noqa: F401 - a test dependency: fail here, never skip

from tests.conftest import CLIENT_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]


def test_vulture_finds_no_dead_code():
    run = subprocess.run([sys.executable, "-m", "vulture"], cwd=ROOT, capture_output=True, text=True,
                         timeout=CLIENT_TIMEOUT)
    findings = run.stdout.strip()
    assert run.returncode in (0, 3), f"vulture failed to run (exit {run.returncode}): {run.stderr}"
    assert run.returncode == 0 and not findings, (
        "unused code (remove it, or add it to tools/vulture_whitelist.py with the reason it is used):\n"
        + findings)


def test_vulture_reports_dead_code(tmp_path):
    """The check can fail: an unused function in a scanned file is reported."""
    module = tmp_path / "dead.py"
    module.write_text("def used():\n    return 1\n\n\ndef never_called():\n    return 2\n\n\nused()\n")
    run = subprocess.run([sys.executable, "-m", "vulture", str(module), "--min-confidence", "60"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=CLIENT_TIMEOUT)
    assert run.returncode == 3 and "never_called" in run.stdout and "'used'" not in run.stdout, run.stdout
