"""Small helpers shared by the runtime benchmarks (not part of the package)."""

from __future__ import annotations

import datetime as _dt
import json
import time
import os
import platform
from pathlib import Path

import torch

# Raw outputs (JSON lines, dumps, logs, per-run folders) go here; git ignores it. The
# figures worth keeping are copied by hand into bench/results/<area>.md.
RAW = Path(__file__).resolve().parent / "results" / "raw"


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine() -> dict:
    return {
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "cpu": _cpu_name(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        # other processes' load skews wall-clock figures; CPU-time figures less so
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }


def add_threads_arg(ap) -> None:
    ap.add_argument("--threads", type=int, default=None,
                    help="torch threads for both sides (default: torch's default)")


def set_threads(args) -> None:
    """Apply ``--threads`` before any model runs; both sides then use the same count."""
    if args.threads:
        torch.set_num_threads(args.threads)


def save(name: str, record: dict) -> Path:
    """Append one JSON line to bench/results/raw/<name>.jsonl and return its path."""
    RAW.mkdir(parents=True, exist_ok=True)
    path = RAW / f"{name}.jsonl"
    with path.open("a") as f:
        f.write(json.dumps({**machine(), **record}) + "\n")
    return path


def few_shot_prefix(tokenizer, target_tokens: int) -> str:
    """Deterministic arithmetic few-shot text of about `target_tokens` tokens."""
    lines, i = [], 0
    text = "Answer each question with a number.\n"
    while len(tokenizer.encode(text)) < target_tokens:
        a, b = (i * 37) % 97 + 3, (i * 53) % 89 + 5
        lines.append(f"Q: What is {a} plus {b}? A: {a + b}\n")
        text = "Answer each question with a number.\n" + "".join(lines)
        i += 1
    return text


def time_full_decode_steps(runner, batch_size: int) -> list[float]:
    """Wrap ``runner.forward`` (a ``ModelRunner``, from the scheduler thread) so that the
    wall time of every forward pass whose rows are all decode rows of ``batch_size``
    requests is appended to the returned list (clear it between measurements)."""
    times: list[float] = []
    forward = runner.forward

    def timed_forward(step):
        t = time.perf_counter()
        out = forward(step)
        lens = step.batch.qo_lens_cpu
        if lens is not None and len(lens) == batch_size and max(lens) == 1:
            times.append(time.perf_counter() - t)
        return out

    runner.forward = timed_forward
    return times


def random_weights_model(hf_config: dict, tokenizer, *, device, dtype, seed: int = 0,
                         context_length: int = 2048):
    """A `LoadedModel` of ``hf_config``'s architecture with random weights (N(0, 0.05),
    norms 1) on ``device``: for timings where the weights' values do not matter, on a
    machine the real weights cannot reach. ``tokenizer``: a furca `Tokenizer`."""
    from furca.runtime.loader import LoadedModel
    from furca.runtime.model_config import ModelConfig
    from furca.runtime.models import get_model_class

    config = ModelConfig.from_hf_dict(hf_config)
    model = get_model_class(config.architecture)(config, dtype=dtype, device=device).eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.copy_(torch.randn(p.shape, device=device, generator=gen, dtype=torch.float32) * 0.05)
    return LoadedModel(model=model, config=config, tokenizer=tokenizer, generation_defaults={},
                       context_length=context_length, model_path=Path("random-weights"))


def wait_healthy(proc, url: str, timeout: float = 600.0, log: str | None = None) -> None:
    """Poll ``url``/health until 200; SystemExit if the server process `proc` exits first
    (naming `log`, its output file) or `timeout` passes."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}" + (f"; see {log}" if log else ""))
        time.sleep(0.5)
    raise SystemExit("server did not become ready")
