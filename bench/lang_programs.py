"""Program-level throughput (as in the SGLang paper), on the default model through the
in-process engine: programs per second with the radix cache on vs off, and the cache
hit rate against the optimum.

Workloads:
  few_shot     5-shot multiple-choice prompts (MMLU-style, built from a local,
               generated set of questions), answered with select over A-D
  branching    fork 4 ideas, then each branch judges its idea with select
  multi_turn   a 4-turn chat (short answers)

The optimum hit rate counts every prompt token an infinite cache could have served
(a prefix some request computed before, as prompt or as output): 1 - (prompt
positions nobody computed before / prompt tokens sent).

    .venv/bin/python bench/lang_programs.py [--programs 16] [--workloads few_shot,branching,multi_turn]
"""

from __future__ import annotations

import argparse
import random
import threading
import time

from _util import save

import furca as sgl
from furca.lang.backends.local import LocalBackend
from furca.runtime.engine import Engine

SUBJECTS = ["arithmetic", "geography", "units"]


def make_questions(num: int, seed: int = 0) -> list[dict]:
    """Deterministic MMLU-style questions: a stem, four options, the answer letter."""
    rng = random.Random(seed)
    out = []
    for i in range(num):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        right = a + b
        options = [right, right + rng.randint(1, 9), right - rng.randint(1, 9), right + 10]
        rng.shuffle(options)
        out.append({"subject": SUBJECTS[i % len(SUBJECTS)], "question": f"What is {a} + {b}?",
                    "options": [str(o) for o in options], "answer": "ABCD"[options.index(right)]})
    return out


def format_question(q: dict, with_answer: bool) -> str:
    text = q["question"] + "\n" + "".join(f"{letter}. {opt}\n" for letter, opt in zip("ABCD", q["options"]))
    return text + "Answer:" + (f" {q['answer']}\n\n" if with_answer else "")


SHOTS = make_questions(5, seed=1)
FEW_SHOT = "The following are multiple choice questions (with answers) about arithmetic.\n\n" + "".join(
    format_question(q, True) for q in SHOTS)


@sgl.function
def few_shot(s, question):
    s += FEW_SHOT + question
    s += sgl.select("answer", [" A", " B", " C", " D"])


@sgl.function
def branching(s, topic):
    s += "You are brainstorming. Topic: " + topic + "\n"
    forks = s.fork(4)
    forks += lambda i: f"Idea {i + 1}:" + sgl.gen("idea", max_tokens=16, stop="\n") + "\n"
    forks += "Is this idea practical? Answer:" + sgl.select("judge", [" yes", " no"])
    forks.join()


@sgl.function
def multi_turn(s, questions):
    s += sgl.system("You answer in one short sentence.")
    for q in questions:
        s += sgl.user(q)
        s += sgl.assistant(sgl.gen(max_tokens=12))


def workload_args(name: str, num: int) -> list[dict]:
    if name == "few_shot":
        return [{"question": format_question(q, False)} for q in make_questions(num, seed=2)]
    if name == "branching":
        topics = ["saving water", "quieter streets", "learning a language", "city gardens"]
        return [{"topic": topics[i % len(topics)] + f" (case {i})"} for i in range(num)]
    return [{"questions": [f"Name a {kind} (round {i})." for kind in ("fruit", "colour", "city", "animal")]}
            for i in range(num)]


PROGRAMS = {"few_shot": few_shot, "branching": branching, "multi_turn": multi_turn}


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
                self.requests.extend((p, list(o.output_ids)) for p, o in zip(prompts, outputs))
        return outs

    def __getattr__(self, name):
        return getattr(self._engine, name)


def optimum_hit_rate(requests: list[tuple[list[int], list[int]]]) -> float:
    """1 - (prompt positions no cache could serve) / (prompt tokens sent). A position can
    be served if any request computed it before: as a prompt token or as output."""
    root: dict = {}
    prompt_only: set[int] = set()  # ids of trie nodes only ever seen as prompt positions
    generated: set[int] = set()
    counter = iter(range(1 << 62))
    for prompt, output in requests:
        node = root
        for i, t in enumerate(prompt + output):
            if t not in node:
                node[t] = {"#": next(counter)}
            node = node[t]
            (prompt_only if i < len(prompt) else generated).add(node["#"])
    total = sum(len(p) for p, _ in requests)
    required = len(prompt_only - generated)
    return 1 - required / total if total else 0.0


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
    ap.add_argument("--workloads", default="few_shot,branching,multi_turn")
    ap.add_argument("--model", default=None)
    args = ap.parse_args()
    names = args.workloads.split(",")

    results: dict[str, dict] = {}
    for cache_on in (True, False):
        with Engine(model=args.model, disable_radix_cache=not cache_on) as engine:
            for name in names:
                r = measure(engine, name, args.programs)
                results.setdefault(name, {})["on" if cache_on else "off"] = r
                print(f"{name:11s} cache {'on ' if cache_on else 'off'}: {r['programs_per_s']:6.2f} programs/s, "
                      f"hit rate {r['hit_rate']:.0%} (optimum {r['optimum']:.0%}), errors {r['errors']}")
    for name in names:
        on, off = results[name]["on"], results[name]["off"]
        speedup = on["programs_per_s"] / off["programs_per_s"]
        of_optimum = on["hit_rate"] / on["optimum"] if on["optimum"] else 0.0
        print(f"{name:11s} speedup {speedup:.2f}x, hit rate {of_optimum:.0%} of optimum")
        save("lang_programs", {"workload": name, "programs": args.programs, "speedup": speedup,
                               "hit_rate_of_optimum": of_optimum, "cache_on": on, "cache_off": off})


if __name__ == "__main__":
    main()
