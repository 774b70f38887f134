"""Server fairness under hostile grammars: /health and /tokenize latency while slow JSON
schemas compile: a grammar compile, however slow, must not hold up the rest of the server.

A live `furca serve` on the default model. --attackers clients (default 8) send chat
completions with JSON schemas that take seconds to compile (each a fresh schema, so
nothing is cached or shared: an anyOf of --objects objects with --props optional
properties each), one after another, for --duration seconds, from a process of their own
(building and sending 0.1-0.5 MB bodies would otherwise delay the poller in this
process's event loop, not the server). Meanwhile a poller hits
/health and /tokenize every --interval s (each on its own connection) and records the
latency. Reported: p50 / p99 / max of each, idle (before the attack) and during it, and
how the attack requests ended (400 "did not compile within" when over --grammar-timeout).

    .venv/bin/python bench/server_fairness.py                       # starts `furca serve` itself
    .venv/bin/python bench/server_fairness.py --checkout /tmp/fair-before   # that tree's furca
    .venv/bin/python bench/server_fairness.py --url http://127.0.0.1:30000 --api-key KEY

--checkout runs the server from another source tree (PYTHONPATH, cwd) with this venv,
e.g. a `git worktree add /tmp/fair-before <commit>` of the code before a change.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import RAW, wait_healthy  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def slow_schema(seed: int, objects: int, props: int) -> dict:
    """Seconds to compile: objects x props optional properties with non-ASCII names (a
    key-exclusion trie per object), as alternatives."""
    return {"anyOf": [{"type": "object", "properties": {
        f"property_{seed}_{k}_{i}_é": {"type": ["string", "integer", "null"]} for i in range(props)}}
        for k in range(objects)]}


def pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def start_server(args) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cwd = Path(args.checkout).resolve() if args.checkout else ROOT
    env = dict(os.environ, PYTHONPATH=str(cwd))
    cmd = [sys.executable, "-c", "import furca, sys; print('furca from', furca.__file__, flush=True); "
           "from furca.cli import main; sys.exit(main(['serve', *sys.argv[1:]]))",
           "--port", str(port), "--log-level", "warning", "--grammar-timeout", str(args.grammar_timeout)]
    if args.grammar_workers is not None:
        cmd += ["--grammar-workers", str(args.grammar_workers)]
    Path(args.server_log).parent.mkdir(parents=True, exist_ok=True)
    log = open(args.server_log, "w")
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(proc, url, log=args.server_log)
    return proc, url


async def poll(url: str, headers: dict, interval: float, stop: asyncio.Event, out: dict) -> None:
    """/health and /tokenize every `interval` s, each on its own connection; latencies
    appended to out[endpoint] as (start time, seconds, status)."""
    async def one(name: str, method: str, path: str, body: dict | None):
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as c:
            while not stop.is_set():
                t0 = time.monotonic()
                try:
                    r = await (c.get(path) if method == "GET" else c.post(path, json=body))
                    status = r.status_code
                except httpx.HTTPError as e:
                    status = type(e).__name__
                out[name].append((t0, time.monotonic() - t0, status))
                await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))

    await asyncio.gather(one("health", "GET", "/health", None),
                         one("tokenize", "POST", "/tokenize", {"prompt": "How fair is this server today?"}))


def attack_process(url: str, headers: dict, args, out) -> None:
    """The attackers, in a child process: results put on `out` as one list."""
    results: list = []
    asyncio.run(attack(url, headers, args, results))
    out.put(results)


async def attack(url: str, headers: dict, args, results: list) -> None:
    seeds = iter(range(10**9))
    end = time.monotonic() + args.duration

    async def attacker(k: int):
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as c:
            while time.monotonic() < end:
                schema = slow_schema(1000 * k + next(seeds) + args.seed, args.objects, args.props)
                body = {"messages": [{"role": "user", "content": "Fill the form."}], "max_tokens": 4,
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": "form", "schema": schema}}}
                t0 = time.monotonic()
                try:
                    r = await c.post("/v1/chat/completions", json=body)
                    status = r.status_code
                    kind = "timeout" if "did not compile within" in r.text else ("ok" if status == 200 else r.text[:80])
                except httpx.HTTPError as e:
                    status, kind = type(e).__name__, "client error"
                results.append((k, status, kind, time.monotonic() - t0))

    await asyncio.gather(*(attacker(k) for k in range(args.attackers)))


def summary(rows: list, t_from: float, t_to: float) -> dict:
    lat = [s for t0, s, st in rows if t_from <= t0 <= t_to]
    bad = sum(1 for t0, s, st in rows if t_from <= t0 <= t_to and st != 200)
    return {"n": len(lat), "p50_ms": pct(lat, 50) * 1e3, "p99_ms": pct(lat, 99) * 1e3,
            "max_ms": max(lat, default=float("nan")) * 1e3, "over_100ms": sum(1 for s in lat if s > 0.1),
            "non_200": bad}


async def run(args, url: str, headers: dict) -> dict:
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as c:
        (await c.post("/tokenize", json={"prompt": "warm up"})).raise_for_status()
        r = await c.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                       "max_tokens": 2, "response_format": {"type": "json_object"}})
        r.raise_for_status()
    lat = {"health": [], "tokenize": []}
    stop = asyncio.Event()
    poller = asyncio.create_task(poll(url, headers, args.interval, stop, lat))
    t_idle = time.monotonic()
    await asyncio.sleep(args.idle)
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=attack_process, args=(url, headers, args, queue))
    t_attack = time.monotonic()
    proc.start()
    results: list = await asyncio.to_thread(queue.get)
    await asyncio.to_thread(proc.join)
    t_end = time.monotonic()
    stop.set()
    await poller
    out = {"idle": {k: summary(v, t_idle, t_attack) for k, v in lat.items()},
           "attack": {k: summary(v, t_attack, t_end) for k, v in lat.items()},
           "attack_s": t_end - t_attack,
           "requests": {}}
    for _, status, kind, _s in results:
        key = f"{status} {kind}"
        out["requests"][key] = out["requests"].get(key, 0) + 1
    out["request_s_max"] = max((s for *_, s in results), default=float("nan"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=None, help="an already running server (else one is started)")
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--checkout", default=None, help="run the started server from this source tree")
    ap.add_argument("--label", default=None, help="name of this run in the output (default: the checkout's commit)")
    ap.add_argument("--attackers", type=int, default=8)
    ap.add_argument("--duration", type=float, default=30.0, help="seconds the attackers keep sending")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds of polling before the attack")
    ap.add_argument("--interval", type=float, default=0.05, help="poll interval (s)")
    ap.add_argument("--objects", type=int, default=20)
    ap.add_argument("--props", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--grammar-timeout", type=float, default=3.0)
    ap.add_argument("--grammar-workers", type=int, default=None, help="(servers that have the flag)")
    ap.add_argument("--server-log", default=str(RAW / "server_fairness-server.log"))
    ap.add_argument("--json", default=str(RAW / "server_fairness.jsonl"),
                    help="append the result as one JSON line here")
    args = ap.parse_args()
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    proc = None
    url = args.url
    if url is None:
        proc, url = start_server(args)
    try:
        res = asyncio.run(run(args, url, headers))
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
    tree = Path(args.checkout).resolve() if args.checkout else ROOT
    commit = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    res.update(label=args.label or commit, commit=commit, date=dt.datetime.now().isoformat(timespec="seconds"),
               machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
               loadavg_1m=round(os.getloadavg()[0], 2),
               config={k: getattr(args, k) for k in ("attackers", "duration", "interval", "objects", "props",
                                                       "grammar_timeout", "grammar_workers")})
    print(f"\n{res['label']} ({commit}), load {res['loadavg_1m']}, attack {res['attack_s']:.1f} s, "
          f"requests {res['requests']}, longest request {res['request_s_max']:.1f} s")
    print("| run | endpoint | phase | polls | p50 ms | p99 ms | max ms | > 100 ms | non-200 |")
    print("|:--|:--|:--|--:|--:|--:|--:|--:|--:|")
    for phase in ("idle", "attack"):
        for ep, s in res[phase].items():
            print(f"| {res['label']} | /{ep} | {phase} | {s['n']} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | "
                  f"{s['max_ms']:.1f} | {s['over_100ms']} | {s['non_200']} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "a") as f:
            f.write(json.dumps(res) + "\n")


if __name__ == "__main__":
    main()
