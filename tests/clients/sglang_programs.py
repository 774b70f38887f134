"""Run SGLang's own frontend test programs (``sglang.test.test_programs``), unmodified,
through ``sgl.RuntimeEndpoint`` against a server.

    python sglang_programs.py URL API_KEY [NAME[:check_answer=False] ...]

Runs the programs named on the command line, or, without names, each name read from a
line of standard input (a worker: the caller pays for ``import sglang`` once and runs one
program per test). Prints ``{"ready": true}`` once the backend is set, then one JSON line
per program: ``{"name", "passed", "seconds", "error"}`` (``error``: the traceback's tail,
or null). A program that raises does not stop the others. Run in a process of its own: importing ``sglang`` patches transformers and sets
cache environment variables, which must not leak into the rest of the test session.
"""

from __future__ import annotations

import json
import sys
import time
import traceback


def parse(spec: str) -> tuple[str, dict]:
    name, _, kwargs = spec.partition(":")
    out = {}
    for item in filter(None, kwargs.split(",")):
        key, _, value = item.partition("=")
        out[key] = {"True": True, "False": False}[value]
    return name, out


def main(argv: list[str]) -> int:
    url, api_key, specs = argv[0], argv[1], argv[2:]
    import sglang as sgl
    import sglang.test.test_programs as programs

    sgl.set_default_backend(sgl.RuntimeEndpoint(url, api_key=api_key or None))
    print(json.dumps({"ready": True}), flush=True)
    for spec in specs or (line.strip() for line in sys.stdin):
        if not spec:
            continue
        name, kwargs = parse(spec)
        start = time.monotonic()
        error = None
        try:
            getattr(programs, name)(**kwargs)
        except BaseException:  # noqa: BLE001 - report every failure, including assertion errors
            error = traceback.format_exc()[-4000:]
        line = {"name": name, "passed": error is None, "seconds": round(time.monotonic() - start, 2), "error": error}
        print(json.dumps(line), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
