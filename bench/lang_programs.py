"""Program-level throughput (as in the SGLang paper), on the default model through the
in-process engine: programs per second with the radix cache on vs off, and the cache
hit rate against the optimum. The programs are in `bench/lang_workloads.py`
(few_shot, few_shot_branches, tree_of_thought, agent_loop, json_extraction, branching,
multi_turn); every batch runs through ``run_batch`` (prefix-tree order, shared
prefixes warmed once).

The optimum is what an unbounded radix cache could serve: every prompt position some
earlier request computed (a prompt position, or an output token that was fed back; the
last sampled token never is), except the request's last prompt position, which is
always computed for its logits. Prompts are taken as the engine ran them (token healing
backs up a prompt's last token and regenerates it). Hit rate = cached prompt tokens / prompt tokens sent,
warming requests included on both sides.

    .venv/bin/python bench/lang_programs.py [--programs 16] [--workloads few_shot,agent_loop]
"""

from __future__ import annotations

import argparse
import threading
import time

from _util import save
from lang_workloads import PROGRAMS, workload_args

from furca.lang.backends.local import LocalBackend
from furca.runtime.engine import Engine


class RecordingEngine:
    """Forwards to the engine and keeps every request's prompt and output ids."""

    def __init__(self, engine):
        self._engine = engine
        self.tokenizer = engine.tokenizer
        self.requests: list[tuple[list[int], list[int]]] = []
        self._lock = threading.Lock()

    def generate(self, *args, **kwargs):
        ids = kwargs.get("input_ids")
        prompts = ids if ids and isinstance(ids[0], list) else [ids]
        outs = self._engine.generate(*args, **kwargs)
        outputs = outs if isinstance(outs, list) else [outs]
        if len(outputs) == len(prompts):  # (n > 1 samples are not recorded)
            with self._lock:
                # the prompt as the engine ran it: token healing backs up its last token(s),
                # which the output then regenerates
                self.requests.extend((p[:o.meta_info["prompt_tokens"]], list(o.output_ids))
                                     for p, o in zip(prompts, outputs))
        return outs

    def __getattr__(self, name):
        return getattr(self._engine, name)


def optimum_hit_rate(requests: list[tuple[list[int], list[int]]]) -> float:
    """Servable / sent prompt tokens for an unbounded cache (see the module docstring)."""
    root: dict = {}
    counter = iter(range(1 << 62))
    computed: set[int] = set()  # trie nodes whose KV some request computed
    servable = 0
    for prompt, output in requests:
        node, path = root, []
        for t in prompt + output[:-1]:  # the last output token is sampled, never fed back
            if t not in node:
                node[t] = {"#": next(counter)}
            node = node[t]
            path.append(node["#"])
        hit = 0
        while hit < len(prompt) - 1 and path[hit] in computed:
            hit += 1
        servable += hit
        computed.update(path)
    total = sum(len(p) for p, _ in requests)
    return servable / total if total else 0.0


def measure(engine, name: str, num: int) -> dict:
    recorder = RecordingEngine(engine)
    backend = LocalBackend(recorder)
    args = workload_args(name, num)
    PROGRAMS[name].run_batch(args[:1], backend=backend, progress_bar=False, temperature=0)  # warm-up
    engine.flush_cache()
    recorder.requests.clear()
    before = engine.get_server_info()["stats"]
    t0 = time.perf_counter()
    states = PROGRAMS[name].run_batch(args, backend=backend, progress_bar=False, temperature=0)
    secs = time.perf_counter() - t0
    errors = [st.error() for st in states if st.error() is not None]
    after = engine.get_server_info()["stats"]
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    cached = after["cached_tokens"] - before["cached_tokens"]
    return {"secs": secs, "programs_per_s": num / secs, "hit_rate": cached / prompt if prompt else 0.0,
            "optimum": optimum_hit_rate(recorder.requests), "errors": len(errors)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--programs", type=int, default=16)
    ap.add_argument("--workloads", default=",".join(PROGRAMS))
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    names = args.workloads.split(",")

    results: dict[str, dict] = {}
    for cache_on in (True, False):
        with Engine(model=args.model, disable_radix_cache=not cache_on) as engine:
            for name in names:
                r = measure(engine, name, args.programs)
                results.setdefault(name, {})["on" if cache_on else "off"] = r
                print(f"{name:17s} cache {'on ' if cache_on else 'off'}: {r['programs_per_s']:6.2f} programs/s, "
                      f"hit rate {r['hit_rate']:.0%} (optimum {r['optimum']:.0%}), errors {r['errors']}")
    for name in names:
        on, off = results[name]["on"], results[name]["off"]
        speedup = on["programs_per_s"] / off["programs_per_s"]
        of_optimum = on["hit_rate"] / on["optimum"] if on["optimum"] else 0.0
        print(f"{name:17s} speedup {speedup:.2f}x, hit rate {of_optimum:.0%} of optimum")
        save("lang_programs", {"workload": name, "programs": args.programs, "speedup": speedup,
                               "hit_rate_of_optimum": of_optimum, "cache_on": on, "cache_off": off})


if __name__ == "__main__":
    main()
