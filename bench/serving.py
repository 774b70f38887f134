"""Serving benchmark: the OpenAI chat endpoint under fixed concurrency.

For each concurrency (default 1, 8, 32) and each prompt kind (a system prompt shared
by every request, or a unique one per request), closed-loop clients stream chat
completions of a fixed length (ignore_eos) and we report requests/s, output tokens/s,
time to first token and inter-token latency (p50 / p99). A second table compares
json_schema-constrained requests with the same requests unconstrained (both produce
exactly --output-len tokens), as an output-throughput ratio (target >= 0.9).

    .venv/bin/python bench/serving.py                      # starts `furca serve` itself
    .venv/bin/python bench/serving.py --url http://127.0.0.1:30000 --api-key KEY
    .venv/bin/python bench/serving.py --concurrency 1 8 --output-len 16 --quick
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import save, wait_healthy  # noqa: E402

SHARED_SYSTEM = ("You are a meticulous assistant for a logistics company. Answer questions about shipments, "
                 "routes, customs forms and delivery windows. Be concise, cite the relevant policy section, "
                 "never invent tracking numbers, and ask for clarification when a question is ambiguous. ") * 3
QUESTIONS = ["Where is my parcel?", "How long does customs take?", "Can I change the delivery address?",
             "What is a bill of lading?", "Do you ship batteries?", "What are your opening hours?"]
ARRAY_SCHEMA = {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 200}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q / 100 * (len(xs) - 1))))]


def make_body(i: int, shared: bool, output_len: int, model: str | None, constrained: bool = False) -> dict:
    system = SHARED_SYSTEM if shared else f"[session {i:06d}] " + SHARED_SYSTEM
    body = {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": QUESTIONS[i % len(QUESTIONS)]}],
            "max_tokens": output_len, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    if model:
        body["model"] = model
    if constrained:
        body["response_format"] = {"type": "json_schema", "json_schema": {"name": "list", "schema": ARRAY_SCHEMA}}
    else:
        body["ignore_eos"] = True
    return body


async def one_request(client: httpx.AsyncClient, body: dict) -> dict:
    t0 = time.perf_counter()
    first, stamps, tokens = None, [], 0
    async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
        if resp.status_code != 200:
            raise RuntimeError(f"{resp.status_code}: {(await resp.aread())[:300]!r}")
        async for line in resp.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(chunk["error"]["message"])
            if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
                now = time.perf_counter()
                first = first or now
                stamps.append(now)
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    end = time.perf_counter()
    itl = [(b - a) for a, b in zip(stamps, stamps[1:])]
    return {"ttft": (first or end) - t0, "itl": itl, "tokens": tokens, "e2e": end - t0}


async def run_level(url: str, headers: dict, concurrency: int, num_requests: int, make) -> dict:
    limits = httpx.Limits(max_connections=concurrency + 4)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=None, limits=limits) as client:
        queue = list(range(num_requests))
        results: list[dict] = []

        async def worker():
            while queue:
                results.append(await one_request(client, make(queue.pop())))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    ttft = [r["ttft"] for r in results]
    itl = [x for r in results for x in r["itl"]]
    tokens = sum(r["tokens"] for r in results)
    return {"concurrency": concurrency, "num_requests": num_requests, "wall_s": wall,
            "req_per_s": num_requests / wall, "out_tok_per_s": tokens / wall, "output_tokens": tokens,
            "ttft_p50_ms": 1e3 * pct(ttft, 50), "ttft_p99_ms": 1e3 * pct(ttft, 99),
            "itl_p50_ms": 1e3 * pct(itl, 50), "itl_p99_ms": 1e3 * pct(itl, 99)}


def start_server(args) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "furca.server", "--port", str(port), "--log-level", "warning",
           "--max-total-tokens", str(args.max_total_tokens)]
    if args.model:
        cmd.insert(3, args.model)
    proc = subprocess.Popen(cmd, cwd=Path(__file__).resolve().parents[1])
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url)
    return proc, url


def table(rows: list[dict], cols: list[str]) -> str:
    out = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows:
        out.append("| " + " | ".join(f"{r[c]:.2f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + " |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=None, help="an already running server (default: start one)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--model", default=None, help="model for the started server / the model field")
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--requests-per-level", type=int, default=None, help="default: max(8, 3 * concurrency)")
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--max-total-tokens", type=int, default=65536)
    ap.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    args = ap.parse_args()

    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args)
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    model = None if args.url is None else args.model
    try:
        rows = []
        for conc in args.concurrency:
            n = args.requests_per_level or (max(4, conc) if args.quick else max(8, 3 * conc))
            for shared in (True, False):
                httpx.post(f"{url}/flush_cache", headers=headers)
                row = asyncio.run(run_level(url, headers, conc, n,
                                            lambda i, s=shared: make_body(i, s, args.output_len, model)))
                row["system_prompt"] = "shared" if shared else "unique"
                rows.append(row)
                print(json.dumps(row), flush=True)
        conc = max(args.concurrency)
        n = args.requests_per_level or (max(4, conc) if args.quick else max(8, 2 * conc))
        ratio_rows = []
        for constrained in (False, True):
            row = asyncio.run(run_level(url, headers, conc, n,
                                        lambda i, c=constrained: make_body(i, True, args.output_len, model, c)))
            row["mode"] = "json_schema" if constrained else "unconstrained"
            ratio_rows.append(row)
            print(json.dumps(row), flush=True)
        ratio = ratio_rows[1]["out_tok_per_s"] / ratio_rows[0]["out_tok_per_s"]
        cols = ["concurrency", "system_prompt", "num_requests", "req_per_s", "out_tok_per_s",
                "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms"]
        print("\n" + table(rows, cols))
        print("\n" + table(ratio_rows, ["mode", "concurrency", "num_requests", "out_tok_per_s", "itl_p50_ms",
                                        "itl_p99_ms"]))
        print(f"\njson_schema / unconstrained output throughput: {ratio:.3f} (target >= 0.9)")
        path = save("serving", {"output_len": args.output_len, "levels": rows, "constrained": ratio_rows,
                                "json_schema_throughput_ratio": ratio})
        print(f"saved to {path}")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(60)


if __name__ == "__main__":
    main()
