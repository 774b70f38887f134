"""`Runtime`: start ``furca serve`` in a subprocess and talk to it through its
`RuntimeEndpoint` (SGLang's ``sgl.Runtime``)."""

from __future__ import annotations

import atexit
import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

from furca.lang.backends.runtime_endpoint import RuntimeEndpoint, _error_message
from furca.lang.errors import BackendRequestError


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def server_command(model_path: str | None, host: str, port: int, server_args: dict[str, Any]) -> list[str]:
    """The ``furca serve`` command line; ``server_args`` are named as ``furca serve``'s
    options (`furca.cli.serve_argv`): ``context_length=4096`` -> ``--context-length 4096``,
    ``disable_radix_cache=True`` -> ``--disable-radix-cache``, ``enable_jump_forward=False``
    -> ``--disable-jump-forward``. An unknown name raises ConfigError."""
    from furca.cli import serve_argv

    return [sys.executable, "-m", "furca.cli", "serve",
            *serve_argv(model_path, host=host, port=port, **server_args)]


class _StderrTail:
    """Copies a child's stderr to ours line by line (so its output shows as if inherited)
    and keeps the last lines, to say why it exited."""

    def __init__(self, stream: Any, keep: int = 20):
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)
        self.thread = threading.Thread(target=self._pump, args=(stream,), name="furca-serve-stderr", daemon=True)
        self.thread.start()

    def _pump(self, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            line = raw.decode("utf-8", "replace")
            self.lines.append(line.rstrip("\n"))
            try:
                sys.stderr.write(line)
            except (ValueError, OSError):  # our stderr is closed: keep draining the pipe
                pass
        stream.close()

    def reason(self) -> str:
        """The child's own error line (``furca serve: Error: ...``), else its last line."""
        self.thread.join(timeout=5)
        for line in reversed(self.lines):
            if line.startswith("furca serve:"):
                return line[len("furca serve:"):].strip()
        return self.lines[-1] if self.lines else ""


class Runtime:
    """``Runtime(model_path=None, **server_args)``: a ``furca serve`` on a free port.

    Waits until ``/health`` answers 200 (at most ``launch_timeout`` seconds), then
    ``.endpoint`` is its `RuntimeEndpoint` and ``.url`` its address. ``shutdown()``
    (also at interpreter exit) stops the server. Server output goes to ``log_file``
    (default: inherited stderr)."""

    def __init__(self, model_path: str | None = None, *, host: str = "127.0.0.1", port: int | None = None,
                 launch_timeout: float = 300.0, log_file: str | None = None, **server_args: Any):
        server_args.setdefault("log_level", "error")  # as SGLang's Runtime: quiet unless asked
        self.port = port or free_port(host)
        self.url = f"http://{host}:{self.port}"
        self.api_key = server_args.get("api_key")
        cmd = server_command(model_path, host, self.port, server_args)
        self._log = open(log_file, "ab") if log_file else None  # noqa: SIM115 - closed in shutdown
        self.process: subprocess.Popen | None = subprocess.Popen(
            cmd, stdout=self._log or subprocess.DEVNULL, stderr=self._log or subprocess.PIPE, start_new_session=True)
        self._stderr = None if self._log else _StderrTail(self.process.stderr)
        atexit.register(self.shutdown)
        try:
            self._wait_healthy(launch_timeout)
            self.endpoint = RuntimeEndpoint(self.url, api_key=self.api_key)
        except BaseException:
            self.shutdown()
            raise

    def _wait_healthy(self, timeout: float) -> None:
        import httpx

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.process.poll() if self.process else None
            if code is not None:
                why = self._stderr.reason() if self._stderr else ""
                raise BackendRequestError(f"furca serve could not start: exited with status {code}"
                                          + (f": {why}" if why else " (its output is in the log file)"))
            try:
                health = httpx.get(self.url + "/health", timeout=2.0)
                if health.status_code == 200:
                    return
                if "failed" in health.text:  # up, but the model did not load: ask why, stop waiting
                    why = httpx.get(self.url + "/get_model_info", timeout=5.0)
                    raise BackendRequestError(f"furca serve could not start: {_error_message(why)}")
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise BackendRequestError(f"furca serve at {self.url} was not healthy within {timeout:g} s")

    def shutdown(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 20 s). Idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
                process.wait(timeout=20)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None

    def cache_prefix(self, prefix: str) -> None:
        self.endpoint.cache_prefix(prefix)

    def __enter__(self) -> "Runtime":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()

    def __repr__(self) -> str:
        return f"Runtime({self.url!r})"
