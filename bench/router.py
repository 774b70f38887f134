"""Data parallelism: DP=2 behind the router vs one replica, on a shared-prefix workload.

`--programs` programs, each its own ~300-token system prompt, `--questions` chat requests
each (max_tokens `--output-len`, greedy), sent interleaved by `--concurrency` closed-loop
clients. Three setups over the same two `furca serve` replicas (default model), every
replica's cache flushed before each: one replica alone (direct), DP=2 behind `furca router
--policy cache_aware`, DP=2 behind `--policy round_robin`. Reported per setup: requests/s,
the prefix hit rate (summed `cached_tokens` / prompt tokens), the cached tokens as a share
of one replica's, and how many programs the router split over both replicas.
On a 2-core machine both replicas share the cores, so DP=2 cannot add throughput here: the
figures show what the routing keeps of the cache, and the router's overhead.

    .venv/bin/python bench/router.py [--programs 8 --questions 4 --concurrency 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import save, wait_healthy  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WORDS = ["river", "copper", "lantern", "meadow", "violet", "harbor", "quartz", "ember", "willow", "cobalt"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def workload(programs: int, questions: int, seed: int) -> list[tuple[int, dict]]:
    rng = random.Random(seed)
    systems = [f"You are assistant {p}. Facts: " + ", ".join(f"{rng.choice(WORDS)} {rng.randrange(10**4)}"
                                                          for _ in range(60)) for p in range(programs)]
    order = [p for _ in range(questions) for p in rng.sample(range(programs), programs)]
    return [(p, {"messages": [{"role": "system", "content": systems[p]},
                              {"role": "user", "content": f"Question {i}?"}]}) for i, p in enumerate(order)]


async def run(url: str, requests: list[tuple[int, dict]], concurrency: int, output_len: int) -> dict:
    queue: asyncio.Queue = asyncio.Queue()
    for item in requests:
        queue.put_nowait(item)
    usage, homes = [], {}

    async def client(http: httpx.AsyncClient) -> None:
        while not queue.empty():
            program, body = queue.get_nowait()
            resp = await http.post("/v1/chat/completions", json={**body, "max_tokens": output_len, "temperature": 0})
            resp.raise_for_status()
            usage.append(resp.json()["usage"])
            homes.setdefault(program, set()).add(resp.headers.get("x-furca-replica", url))

    async with httpx.AsyncClient(base_url=url, timeout=600) as http:
        t0 = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    prompt = sum(u["prompt_tokens"] for u in usage)
    cached = sum(u["prompt_tokens_details"]["cached_tokens"] for u in usage)
    return {"requests": len(usage), "wall_s": round(wall, 2), "req_per_s": round(len(usage) / wall, 2),
            "prompt_tokens": prompt, "cached_tokens": cached, "hit_rate": round(cached / prompt, 3),
            "programs_split": sum(len(h) > 1 for h in homes.values())}


def start(cmd: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen(cmd, cwd=REPO, stdout=open(log, "w"), stderr=subprocess.STDOUT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--programs", type=int, default=8)
    ap.add_argument("--questions", type=int, default=4)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--output-len", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    logs = Path(os.environ.get("TMPDIR", "/tmp"))
    procs, replicas = [], []
    try:
        for _ in range(2):
            port = free_port()
            replicas.append(f"http://127.0.0.1:{port}")
            procs.append(start([sys.executable, "-m", "furca.server", "--port", str(port), "--log-level", "warning"],
                               logs / f"bench-router-replica-{port}.log"))
        for proc, url in zip(procs, replicas):
            wait_healthy(proc, url)
        routers = {}
        for policy in ("cache_aware", "round_robin"):
            port = free_port()
            routers[policy] = f"http://127.0.0.1:{port}"
            workers = [a for u in replicas for a in ("--worker", u)]
            procs.append(start([sys.executable, "-m", "furca.cli", "router", "--port", str(port), "--policy", policy,
                                "--log-level", "warning", *workers], logs / f"bench-router-{policy}.log"))
            wait_healthy(procs[-1], routers[policy])
            while not all(w["healthy"] for w in httpx.get(f"{routers[policy]}/workers").json()["workers"]):
                time.sleep(0.2)
        requests = workload(args.programs, args.questions, args.seed)
        results = {}
        for name, url in [("one replica", replicas[0]), ("DP=2 cache_aware", routers["cache_aware"]),
                          ("DP=2 round_robin", routers["round_robin"])]:
            for r in replicas:
                httpx.post(f"{r}/flush_cache", timeout=600).raise_for_status()
            results[name] = asyncio.run(run(url, requests, args.concurrency, args.output_len))
        base = results["one replica"]["cached_tokens"]
        print(f"{len(requests)} requests ({args.programs} programs x {args.questions}), concurrency "
              f"{args.concurrency}, {args.output_len} output tokens; load {os.getloadavg()[0]:.1f}")
        print("| setup | req/s | hit rate | cached vs one replica | programs split over replicas |")
        print("|---|---|---|---|---|")
        for name, r in results.items():
            share = r["cached_tokens"] / base if base else float("nan")
            print(f"| {name} | {r['req_per_s']} | {r['hit_rate']:.1%} | {share:.1%} | {r['programs_split']} |")
        print("raw:", save("router", {"args": vars(args), "results": results}))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait()


if __name__ == "__main__":
    main()
