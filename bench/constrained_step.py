"""Decode-step time with 32 concurrent json_schema requests against the same 32 requests
unconstrained, in one engine (the default model), alternating, greedy.

The schemas are the first 32 MaskBench schemas (sorted by file name) of ``--data`` that
compile and whose greedy output runs all ``--steps`` tokens (so no request finishes early
and every timed step has 32 rows); each prompt asks for a JSON object and shows the
schema. Every step whose batch
is 32 decode rows (no prefill, nobody finished yet) is timed with the engine's step
observer (`StepStats.duration_s`: scheduling, forward, masks, sampling); the process CPU
time between consecutive observer calls is reported beside it (other processes load the
machine; CPU time is less skewed by them). The forward passes are timed too (wall clock
around `ModelRunner.forward`), so the step less its forward, what constrained decoding
adds, is reported per side, and the ratio with one forward time for both (pooled median):
the load of other processes moves whole steps by more than the masks cost. For the
constrained steps, `StepStats.masks`
(`MaskTimes`) says where the extra time goes: mask fill (summed over the rows, on the
worker threads with overlap on), the scheduler thread's wait for masks after the forward,
applying the masks to the logits, accepting the tokens.

    .venv/bin/python bench/constrained_step.py [--steps 24] [--rounds 3] [--threads N]
        [--jump-forward] [--disable-overlap-masks] [--disable-early-masks] [--mask-wait-ms 2]
        [--random-weights MODEL_DIR]

``--random-weights MODEL_DIR``: the config and tokenizer of MODEL_DIR (an HF-format
directory: ``furca pull`` writes the default model's to ~/.cache/furca/models/) with random
weights, bf16 on CUDA where there is one: for the GPU check (bench/gpu_check.sh), whose
machine the default model's weights do not reach. The greedy outputs, so the grammar paths
walked, are then not the real model's; the schemas and prompts are the same. On CUDA the
forward timer sees kernel launches only (the masks overlap the GPU's work, so nothing
syncs there): the step ratio is the figure, not "the rest of the step".

Jump-forward is off by default, so that every step of both sides computes one token per
request (forced tokens would make the constrained steps heavier forwards, not slower
masks).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from _util import add_threads_arg, save, set_threads, time_full_decode_steps

from furca.runtime.engine import Engine
from furca.runtime.sampling_params import SamplingParams

ROOT = Path(__file__).resolve().parent.parent
BATCH = 32


def prompt_of(name: str, schema: dict) -> str:
    return f"Write one JSON object that fits this JSON schema ({name}):\n{json.dumps(schema)[:300]}\nJSON:"


def pick_schemas(engine: Engine, data: Path, n: int, steps: int) -> list[tuple[str, dict]]:
    """The first ``n`` schemas of ``data`` (sorted by name), of the first 3n that compile, whose greedy
    output runs the whole ``steps`` tokens (so every timed step has all ``n`` rows)."""
    compiled = []
    for path in sorted(data.glob("*.json")):
        schema = json.loads(path.read_text())["schema"]
        try:
            engine.grammar_backend.compile(SamplingParams(json_schema=json.dumps(schema)),
                                           deadline=time.monotonic() + 10.0, limit_s=10.0)
        except Exception:  # noqa: BLE001 - a schema furca does not compile is skipped
            continue
        compiled.append((path.stem, schema))
        if len(compiled) == 3 * n:
            break
    outs = engine.generate([prompt_of(*c) for c in compiled],
                           sampling_params=[{"max_new_tokens": steps, "temperature": 0.0,
                                             "json_schema": json.dumps(s)} for _, s in compiled])
    picked = [c for c, o in zip(compiled, outs) if o.meta_info["finish_reason"]["type"] == "length"][:n]
    if len(picked) < n:
        raise SystemExit(f"only {len(picked)} schemas of {data} compile and run {steps} tokens; {n} needed")
    return picked


class Recorder:
    """A step observer: (wall s, process CPU s, MaskTimes) of every all-decode step of
    ``BATCH`` rows, while ``on``."""

    def __init__(self):
        self.on, self.rows, self._cpu = False, [], time.process_time()

    def __call__(self, s) -> None:
        cpu, self._cpu = self._cpu, time.process_time()
        if self.on and s.num_prefill_reqs == 0 and s.num_decode_reqs == BATCH:
            self.rows.append((s.duration_s, self._cpu - cpu, getattr(s, "masks", None)))


def median_ms(values) -> float:
    return statistics.median(values) * 1e3 if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=24, help="max_new_tokens of every request")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--data", default=str(ROOT / "tests" / "data" / "maskbench-sample"))
    ap.add_argument("--jump-forward", action="store_true")
    ap.add_argument("--disable-overlap-masks", action="store_true")
    ap.add_argument("--disable-early-masks", action="store_true")
    ap.add_argument("--mask-wait-ms", type=float, default=None)
    ap.add_argument("--random-weights", metavar="MODEL_DIR", default=None,
                    help="MODEL_DIR's config and tokenizer with random weights (the GPU check)")
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    opts = {"enable_jump_forward": args.jump_forward, "decode_log_interval": 0}
    if args.disable_overlap_masks:
        opts["overlap_masks"] = False
    if args.disable_early_masks:
        opts["early_masks"] = False
    if args.mask_wait_ms is not None:
        opts["mask_wait_ms"] = args.mask_wait_ms
    model = None
    if args.random_weights:
        import torch

        from _util import random_weights_model

        from furca.runtime.loader.hf import read_json
        from furca.runtime.tokenizer import Tokenizer

        cuda = torch.cuda.is_available()
        model_dir = Path(args.random_weights)
        model = random_weights_model(read_json(model_dir / "config.json"), Tokenizer.from_pretrained(model_dir),
                                     device="cuda" if cuda else "cpu",
                                     dtype=torch.bfloat16 if cuda else torch.float32)
    with Engine(model, **opts) as engine:
        device = str(engine.scheduler.runner.device)
        schemas = pick_schemas(engine, Path(args.data), BATCH, args.steps)  # also the warm-up
        prompts = [prompt_of(*c) for c in schemas]
        base = {"max_new_tokens": args.steps, "temperature": 0.0}
        sides = {"plain": [dict(base, ignore_eos=True)] * BATCH,
                 "json_schema": [dict(base, json_schema=json.dumps(s)) for _, s in schemas]}
        rec = Recorder()
        engine.add_step_observer(rec)
        forwards = time_full_decode_steps(engine.scheduler.runner, BATCH)
        per_forward: dict[str, list] = {k: [] for k in sides}
        per_side: dict[str, list] = {k: [] for k in sides}
        for _ in range(args.rounds):
            for name, params in sides.items():
                engine.flush_cache()
                rec.rows, rec.on = [], True
                forwards.clear()
                engine.generate(prompts, sampling_params=params)
                rec.on = False
                per_side[name].extend(rec.rows)
                per_forward[name].extend(forwards)

    plain, cons = per_side["plain"], per_side["json_schema"]
    wall = {k: median_ms([r[0] for r in v]) for k, v in per_side.items()}
    cpu = {k: median_ms([r[1] for r in v]) for k, v in per_side.items()}
    for k in sides:
        print(f"{k:11s}: 32-row decode step median {wall[k]:6.1f} ms wall, {cpu[k]:6.1f} ms CPU "
              f"({len(per_side[k])} steps)")
    ratio, cpu_ratio = wall["json_schema"] / wall["plain"], cpu["json_schema"] / cpu["plain"]
    print(f"constrained / plain (median): {ratio:.3f}x wall, {cpu_ratio:.3f}x CPU")
    # the step less its forward pass: what constrained decoding adds, far less exposed to
    # other processes' load than whole steps (the forward is ~95% of a step here)
    fwd = {k: median_ms(v) for k, v in per_forward.items()}
    rest = {k: wall[k] - fwd[k] for k in sides}
    pooled = median_ms(per_forward["plain"] + per_forward["json_schema"])
    model_ratio = (pooled + rest["json_schema"]) / (pooled + rest["plain"])
    print(f"forward median {fwd['plain']:.1f} / {fwd['json_schema']:.1f} ms (plain / constrained), rest of the "
          f"step {rest['plain']:.2f} / {rest['json_schema']:.2f} ms; with one forward time ({pooled:.1f} ms, "
          f"both sides pooled): {model_ratio:.3f}x")
    masks = [r[2] for r in cons if r[2] is not None]
    parts = {}
    if masks:
        for f in ("fill_s", "wait_s", "apply_s", "accept_s"):
            parts[f[:-2] + "_ms"] = round(median_ms([getattr(m, f) for m in masks]), 3)
        parts["late_per_step"] = round(sum(m.num_late for m in masks) / len(masks), 3)
        parts["early_per_step"] = round(sum(m.num_early for m in masks) / len(masks), 3)
        print("constrained step, median per step: " + ", ".join(f"{k} {v}" for k, v in parts.items()))
    record = dict(bench="constrained_step", steps=args.steps, rounds=args.rounds, jump_forward=args.jump_forward,
                  random_weights=bool(args.random_weights), device=device, overlap=not args.disable_overlap_masks,
                  early=not args.disable_early_masks, mask_wait_ms=args.mask_wait_ms,
                  plain_ms=round(wall["plain"], 2), constrained_ms=round(wall["json_schema"], 2),
                  ratio=round(ratio, 3), cpu_ratio=round(cpu_ratio, 3), plain_forward_ms=round(fwd["plain"], 2),
                  constrained_forward_ms=round(fwd["json_schema"], 2), plain_rest_ms=round(rest["plain"], 3),
                  constrained_rest_ms=round(rest["json_schema"], 3), pooled_ratio=round(model_ratio, 4),
                  plain_steps=len(plain),
                  constrained_steps=len(cons), pid=os.getpid(), **parts)
    print(f"appended to {save('constrained_step', record)}")


if __name__ == "__main__":
    main()
