"""Quantized inference on the default model: furca's precisions side by side, llama.cpp beside.

    .venv/bin/python bench/quantization.py [--threads 2] [--configs fp32,default,int8,int4,q4_1]
        [--skip-llama-cpp] [--skip-mixed] [--skip-ppl] [--ppl-tokens N]

For each furca configuration (``CONFIGS``), in a child process of its own (one OpenMP pool,
a clean resident set), with ``--threads`` torch threads (default 2):

- ``load``: the resident model bytes, two ways: the bytes of every tensor the model holds
  (parameters, buffers and tensor attributes such as packed weights, each storage once,
  so a tied head counts once), and the process RSS grown by loading the model (the
  engine's own ``Engine._load``, before the KV pool exists; and the peak RSS grown, which
  shows a transient full-precision copy);
- ``decode``: batch-1 greedy decode tokens/s, EOS ignored: the difference of two runs of
  ``--short`` and ``--long`` new tokens after the same chat prompt, best of ``--repeats``
  each (so the prompt and the first step cancel out);
- ``prefill``: prompt tokens/s over the first ``--prefill-tokens`` tokens of the text, radix
  cache flushed, best of ``--repeats``;
- ``mixed``: the 32-request mixed workload of ``bench/vs_transformers.py`` (prompt lengths
  20-500, output lengths 8-256, seeded) submitted at once: requested output tokens/s;
- ``ppl``: perplexity over ``bench/data/alice_ch1-3.txt`` (public domain; see
  ``bench/data/SOURCE.md``), tokenized once with the default model's tokenizer, no BOS:
  sliding windows of ``--window`` tokens (1024, or the model's context if shorter) moved by
  ``--stride`` (512); each window scores the tokens the previous one did not, from the
  engine's prompt logprobs (``return_logprob`` with ``logprob_start_len``).

llama.cpp (``llama-cpp-python`` built by ``bench/llama_cpp_env.sh`` into ``bench/.llama-venv``;
never a dependency of furca) runs the default model's own GGUF file (Q4_1 projections,
Q8_0 embedding) in a child process of that venv's Python with the same thread count, on the
same token ids: batch-1 greedy decode tokens/s (argmax of the last logits, the same
difference of two lengths), prompt tokens/s over the same prefill tokens (``n_batch`` 512),
and perplexity over the same windows (``logits_all=True``).

One JSON line per run goes to ``bench/results/raw/quantization.jsonl``; a markdown table
is printed. Wall-clock figures on a shared machine swing (with 2 threads on 2 busy cores,
every parallel region waits for a descheduled thread): the 1-minute load average at the end
of each row is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEXT = HERE / "data" / "alice_ch1-3.txt"
LLAMA_PYTHON = HERE / ".llama-venv" / "bin" / "python"
GGUF = Path("~/.cache/furca/gguf/SmolLM2-135M-Instruct.Q4_1.gguf").expanduser()
PROMPT = "Write a long story about a lighthouse keeper."

# name -> (Engine keyword arguments, model path or None for the default model, what it is).
# Rows whose keywords include "quantization" need an engine with that option; on one
# without it they are reported as skipped.
CONFIGS: dict[str, tuple[dict, Path | None, str]] = {
    "fp32": ({"dtype": "float32", "linear_dtype": "float32"}, None, "all fp32"),
    "default": ({}, None, "Engine() defaults (bf16 projections on a CPU with native bf16)"),
    "int8": ({"quantization": "int8"}, None, "int8 per output channel, symmetric"),
    "int4": ({"quantization": "int4", "quantization_group_size": 32}, None, "int4 groups of 32, asymmetric"),
    "q4_1": ({"quantization": "auto"}, GGUF, "the GGUF file's Q4_1 / Q8_0 kept"),
}


# -- shared by both sides (no torch, no furca: the llama.cpp child imports this module) ------


def ppl_windows(n: int, window: int, stride: int) -> list[tuple[int, int, int]]:
    """(begin, end, first scored position within the window) of each sliding window over
    ``n`` tokens: every token but the first is scored exactly once, each with up to
    ``window - stride`` tokens of context before the window's scored part."""
    out, prev_end, begin = [], 0, 0
    while prev_end < n:
        end = min(begin + window, n)
        out.append((begin, end, max(prev_end - begin, 1)))
        prev_end = end
        begin += stride
    return out


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def decode_rate(run, short: int, long: int, repeats: int) -> float:
    """Tokens/s of decode alone: ``run(n)`` generates n tokens after the same prompt; the
    best time of ``long`` minus the best of ``short``."""
    run(short)  # warm-up
    t_short = min(_timed(run, short) for _ in range(repeats))
    t_long = min(_timed(run, long) for _ in range(repeats))
    return (long - short) / (t_long - t_short)


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


# -- the llama.cpp side (runs under bench/.llama-venv's Python) -------------------------------


def llama_cpp_child(job: dict) -> dict:
    import numpy as np
    import llama_cpp
    from llama_cpp import Llama

    threads, windows, ids = job["threads"], job["windows"], job["ppl_ids"]
    common = dict(n_threads=threads, n_threads_batch=threads, n_batch=512, n_ubatch=512, n_gpu_layers=0,
                  verbose=False)
    rss0 = rss_bytes()
    llm = Llama(job["gguf"], n_ctx=2048, **common)
    out = {"version": llama_cpp.__version__, "rss_delta": rss_bytes() - rss0,
           "system_info": llama_cpp.llama_print_system_info().decode().strip()}
    n_vocab = llm.n_vocab()

    def greedy(n: int) -> None:
        llm.reset()
        llm.eval(job["prompt_ids"])
        for _ in range(n):
            logits = np.ctypeslib.as_array(llm._ctx.get_logits_ith(-1), shape=(n_vocab,))
            llm.eval([int(logits.argmax())])

    out["decode_tok_s"] = decode_rate(greedy, job["short"], job["long"], job["repeats"])

    def prefill() -> None:
        llm.reset()
        llm.eval(job["prefill_ids"])

    prefill()
    out["prefill_tok_s"] = len(job["prefill_ids"]) / min(_timed(prefill) for _ in range(job["repeats"]))
    del llm
    if windows:
        window = max(e - b for b, e, _ in windows)
        llm = Llama(job["gguf"], n_ctx=window, logits_all=True, **common)
        nll, count = 0.0, 0
        for b, e, s in windows:
            llm.reset()
            llm.eval(ids[b:e])
            nll += window_nll(llm.scores[: e - b], ids[b:e], s)
            count += e - b - s
        out.update(ppl=math.exp(nll / count), ppl_tokens=count)
    out["loadavg_1m_end"] = os.getloadavg()[0]
    return out


def window_nll(logits, ids: list[int], start: int) -> float:
    """Summed negative log-likelihood of ``ids[start:]`` from a window's logits
    (``logits[q]``, a numpy row per position, scores ``ids[q + 1]``), in float64."""
    import numpy as np

    rows = np.asarray(logits[start - 1 : len(ids) - 1], dtype=np.float64)
    top = rows.max(axis=1, keepdims=True)
    logz = np.log(np.exp(rows - top).sum(axis=1)) + top[:, 0]
    return float((logz - rows[np.arange(len(rows)), ids[start:]]).sum())


# -- the furca side ----------------------------------------------------------------------------


def tensor_bytes(model) -> int:
    """Bytes of every tensor ``model`` holds: each module's parameters, buffers and tensor
    attributes (also inside lists, tuples, dicts and plain objects such as packed-weight
    holders), each storage counted once."""
    import torch

    seen: set[int] = set()
    total = 0

    def visit(obj, depth: int) -> None:
        nonlocal total
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        elif depth < 3 and isinstance(obj, (list, tuple)):
            for v in obj:
                visit(v, depth + 1)
        elif depth < 3 and isinstance(obj, dict):
            for v in obj.values():
                visit(v, depth + 1)
        elif depth < 3 and hasattr(obj, "__dict__") and not isinstance(obj, (torch.nn.Module, type)):
            for v in vars(obj).values():
                visit(v, depth + 1)

    for m in model.modules():
        for v in vars(m).values():  # _parameters and _buffers are dicts in here
            visit(v, 0)
    return total


def furca_child(name: str, job: dict) -> dict:
    from types import SimpleNamespace

    from furca.runtime.config import EngineConfig
    from furca.runtime.engine import Engine

    kwargs, model_path, _ = CONFIGS[name]
    config = EngineConfig.from_kwargs(**kwargs)
    rss0, peak0 = rss_bytes(), peak_rss_bytes()
    t = time.perf_counter()
    loaded = Engine._load(SimpleNamespace(config=config), model_path)  # the engine's own loading
    out = {"load_s": time.perf_counter() - t, "rss_delta": rss_bytes() - rss0,
           "peak_rss_delta": peak_rss_bytes() - peak0, "model_bytes": tensor_bytes(loaded.model)}
    with Engine(loaded, **kwargs) as engine:
        info = engine.effective_config()
        out["weights"] = {k: info[k] for k in ("dtype", "linear_dtype", "kv_cache_dtype", "quantization") if k in info}
        greedy = {"temperature": 0.0, "ignore_eos": True}

        def decode(n: int) -> None:
            engine.generate(input_ids=job["prompt_ids"], sampling_params={**greedy, "max_new_tokens": n})

        out["decode_tok_s"] = decode_rate(decode, job["short"], job["long"], job["repeats"])

        def prefill() -> None:
            engine.flush_cache()
            engine.generate(input_ids=job["prefill_ids"], sampling_params={**greedy, "max_new_tokens": 1})

        prefill()
        out["prefill_tok_s"] = len(job["prefill_ids"]) / min(_timed(prefill) for _ in range(job["repeats"]))
        if job["mixed"]:
            reqs = job["mixed"]
            engine.flush_cache()
            wall = _timed(lambda: engine.generate(input_ids=[p for p, _ in reqs], sampling_params=[
                {**greedy, "max_new_tokens": o} for _, o in reqs]))
            out["mixed_tok_s"] = sum(o for _, o in reqs) / wall
        if job["windows"]:
            out["ppl"], out["ppl_tokens"] = engine_perplexity(engine, job["ppl_ids"], job["windows"])
    out["loadavg_1m_end"] = os.getloadavg()[0]
    return out


def engine_perplexity(engine, ids: list[int], windows) -> tuple[float, int]:
    """(perplexity, tokens scored) of ``ids`` over ``windows`` (`ppl_windows`), from the
    engine's prompt logprobs: one request per window, radix cache flushed before each."""
    nll, count = 0.0, 0
    for b, e, s in windows:
        engine.flush_cache()
        res = engine.generate(input_ids=ids[b:e], sampling_params={
            "temperature": 0.0, "max_new_tokens": 1, "return_logprob": True, "logprob_start_len": s})
        scored = res.meta_info["input_token_logprobs"]
        if [t for _, t, _ in scored] != ids[b + s : e]:
            raise RuntimeError(f"window {b}:{e}: prompt logprobs are not those of tokens {b + s}..{e - 1}")
        nll -= sum(lp for lp, _, _ in scored)
        count += len(scored)
    return math.exp(nll / count), count


def supports_quantization() -> bool:
    import dataclasses

    from furca.runtime.config import EngineConfig

    return "quantization" in {f.name for f in dataclasses.fields(EngineConfig)}


# -- the parent --------------------------------------------------------------------------------


def run_child(cmd: list[str], job: dict, env: dict | None = None) -> dict:
    """Run one side in a child process: the job as JSON on stdin, its result as the last
    line of stdout; SystemExit with the child's stderr tail if it fails."""
    proc = subprocess.run(cmd, input=json.dumps(job), capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[-2:])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def build_job(args) -> dict:
    from furca.runtime.pull import pull_default_model
    from furca.runtime.tokenizer import Tokenizer
    from vs_transformers import draw_workload

    tok = Tokenizer.from_pretrained(str(pull_default_model(progress=False)))
    prompt = tok.apply_chat_template([{"role": "user", "content": PROMPT}], add_generation_prompt=True)
    text_ids = tok.encode(TEXT.read_text(), add_special_tokens=False)
    ppl_ids = text_ids[: args.ppl_tokens] if args.ppl_tokens else text_ids
    if args.prefill_tokens > len(text_ids):
        raise SystemExit(f"--prefill-tokens {args.prefill_tokens} exceeds the text's {len(text_ids)} tokens")
    return {
        "threads": args.threads, "short": args.short, "long": args.long, "repeats": args.repeats,
        "prompt_ids": tok.encode(prompt, add_special_tokens=True),
        "prefill_ids": text_ids[: args.prefill_tokens],
        "mixed": None if args.skip_mixed else draw_workload(tok.vocab_size, tok.special_token_ids),
        "ppl_ids": ppl_ids, "text_tokens": len(text_ids),
        "windows": [] if args.skip_ppl else ppl_windows(len(ppl_ids), args.window, args.stride),
    }


def _fmt(v, spec: str) -> str:
    return "–" if v is None else format(v, spec)


def table(rows: dict[str, dict], fp32: dict | None) -> str:
    head = ("| configuration | weights | decode tok/s | prefill tok/s | mixed tok/s | model MiB (tensors) "
            "| RSS delta MiB (peak) | perplexity | vs fp32 | load |\n|:--|:--|--:|--:|--:|--:|--:|--:|--:|--:|")
    lines = [head]
    for name, r in rows.items():
        if "skipped" in r:
            lines.append(f"| {name} | {r['skipped']} | | | | | | | | |")
            continue
        ppl, base = r.get("ppl"), (fp32 or {}).get("ppl")
        desc = ", ".join(f"{k} {v}" for k, v in (r.get("weights") or {}).items())
        mib = (lambda b: None if b is None else b / 2**20)
        peak = r.get("peak_rss_delta")
        lines.append(
            f"| {name} | {desc} | {_fmt(r.get('decode_tok_s'), '.1f')} | {_fmt(r.get('prefill_tok_s'), '.0f')} "
            f"| {_fmt(r.get('mixed_tok_s'), '.1f')} | {_fmt(mib(r.get('model_bytes')), '.1f')} "
            f"| {_fmt(mib(r.get('rss_delta')), '.0f')}"
            + (f" ({mib(peak):.0f})" if peak is not None else "")
            + f" | {_fmt(ppl, '.3f')} | "
            + (f"{ppl / base - 1:+.2%}" if ppl and base else "") + f" | {_fmt(r.get('loadavg_1m_end'), '.1f')} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, of {', '.join(CONFIGS)}")
    ap.add_argument("--skip-llama-cpp", action="store_true")
    ap.add_argument("--skip-mixed", action="store_true")
    ap.add_argument("--skip-ppl", action="store_true")
    ap.add_argument("--ppl-tokens", type=int, default=0, help="score only the text's first N tokens (0: all)")
    ap.add_argument("--window", type=int, default=1024)
    ap.add_argument("--stride", type=int, default=512)
    ap.add_argument("--short", type=int, default=16, help="new tokens of the shorter decode run")
    ap.add_argument("--long", type=int, default=80, help="new tokens of the longer decode run")
    ap.add_argument("--prefill-tokens", type=int, default=512)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child == "llama.cpp":  # under bench/.llama-venv's Python: no torch, no furca
        print(json.dumps(llama_cpp_child(json.loads(sys.stdin.read()))))
        return
    import torch

    torch.set_num_threads(args.threads)
    if args.child:
        print(json.dumps(furca_child(args.child, json.loads(sys.stdin.read()))))
        return
    names = [n.strip() for n in args.configs.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown --configs {unknown}; choose from {list(CONFIGS)}")
    if not args.long > args.short >= 1:
        raise SystemExit("--long must exceed --short, and --short must be >= 1")

    from furca.runtime.model_config import ModelConfig
    from furca.runtime.loader.hf import read_json
    from furca.runtime.pull import pull_default_model

    context = ModelConfig.from_hf_dict(read_json(pull_default_model(progress=False) / "config.json"))
    args.window = min(args.window, context.max_position_embeddings)
    job = build_job(args)
    quant_ok = supports_quantization()
    rows: dict[str, dict] = {}
    for name in names:
        kwargs, model_path, _ = CONFIGS[name]
        if "quantization" in kwargs and not quant_ok:
            rows[name] = {"skipped": "needs Engine(quantization=...)"}
        elif model_path is not None and not model_path.exists():
            rows[name] = {"skipped": f"{model_path} missing"}
        else:
            try:
                rows[name] = run_child([sys.executable, __file__, "--child", name, "--threads", str(args.threads)],
                                       job)
            except RuntimeError as e:
                print(e, file=sys.stderr)
                rows[name] = {"skipped": "failed (see stderr)"}
        print(f"{name}: {json.dumps(rows[name])}", flush=True)
    if not args.skip_llama_cpp:
        if not LLAMA_PYTHON.exists():
            rows["llama.cpp"] = {"skipped": f"no {LLAMA_PYTHON}: run bench/llama_cpp_env.sh"}
        elif not GGUF.exists():
            rows["llama.cpp"] = {"skipped": f"{GGUF} missing"}
        else:
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
            env["OMP_NUM_THREADS"] = str(args.threads)
            r = run_child([str(LLAMA_PYTHON), __file__, "--child", "llama.cpp"], {**job, "gguf": str(GGUF)}, env)
            r["weights"] = {"format": f"{GGUF.name} (llama-cpp-python {r['version']})"}
            r["model_bytes"] = GGUF.stat().st_size  # llama.cpp maps the file's tensors as they are
            rows["llama.cpp"] = r
        print(f"llama.cpp: {json.dumps({k: v for k, v in rows['llama.cpp'].items() if k != 'system_info'})}")

    from _util import save

    settings = {k: getattr(args, k) for k in ("threads", "window", "stride", "short", "long", "prefill_tokens",
                                              "repeats", "skip_mixed", "skip_ppl", "ppl_tokens")}
    record = {"bench": "quantization", **settings, "text": TEXT.name, "text_tokens": job["text_tokens"],
              "prompt_tokens": len(job["prompt_ids"]), "rows": rows}
    path = save("quantization", record)
    print(f"\n{len(job['prompt_ids'])}-token chat prompt; decode = ({args.long} - {args.short}) tokens / time "
          f"difference; prefill {args.prefill_tokens} tokens; threads {args.threads}; "
          f"load {os.getloadavg()[0]:.2f}\n")
    print(table(rows, rows.get("fp32")))
    print(f"\nappended to {path}")


if __name__ == "__main__":
    main()
