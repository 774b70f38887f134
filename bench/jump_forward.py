"""How many forward passes jump-forward saves on MaskBench's valid instances.

    .venv/bin/python bench/jump_forward.py [--sample 200] [--data DIR] [--timeout-s 20]

For each schema of the harness's fixed stratified sample of maskbench-dev
(../shared/bench/grammar/schemas.py: the same sample and the same compact instance
text, keys in the schema's `properties` order) and each of its valid instances, with
the default model's tokenizer (SmolLM2, 49k byte-level BPE):

- ``static``: tokenize the instance, walk the tokens through a matcher; a token is free
  when it lies wholly inside the text jump-forward forces at that point (the engine's
  rule: `forced_text`, computed after each sampled token). Passes without jump-forward:
  tokens + 1 (EOS); with it: tokens - free + 1.
- ``engine``: the engine's own loop (furca/runtime/jump_forward.py), with a model that
  always writes the instance: sample the next token of the remaining text's own
  tokenization, then append the forced text re-tokenized at the boundary (`plan_jump`).
  Passes = sampled tokens + 1 (EOS); also the tokens appended and re-tokenized.

Prints the totals and appends a JSON line to bench/results/raw/jump_forward.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")
sys.path.insert(0, ROOT)


class Timeout(Exception):
    pass


def _alarm(_sig, _frame):
    raise Timeout()


def static_walk(matcher, ids, token_bytes, forced_text):
    """-> free tokens (wholly inside forced text), or None if the matcher rejects."""
    free = 0
    left = forced_text(matcher).encode()
    for t in ids:
        b = token_bytes[t] or b""
        if left and b and left.startswith(b):
            free += 1
            left = left[len(b):]
            if not matcher.accept_token(t):
                return None
            continue
        if not matcher.accept_token(t):
            return None
        left = forced_text(matcher).encode()
    return free


def _char_boundary(data: bytes, pos: int) -> bool:
    return pos >= len(data) or (data[pos] & 0xC0) != 0x80


def engine_walk(matcher, text: str, tok, vocab: int, forced_text, plan_jump):
    """-> (sampled tokens, appended, re-tokenized, final ids) or None (rejected)."""
    target = text.encode()
    out: list[int] = []
    done = 0  # bytes of target written
    sampled = appended = dropped = 0

    def jump():
        nonlocal done, appended, dropped
        s = forced_text(matcher)
        if not s:
            return True
        plan = plan_jump(tok, [], out, s, vocab)
        if plan is None:
            return True
        matcher.rollback(plan.drop)
        del out[len(out) - plan.drop:]
        for t in plan.new_ids:
            if not matcher.accept_token(t):
                return False
        out.extend(plan.new_ids)
        done += len(s.encode())
        appended += len(plan.new_ids)
        dropped += plan.drop
        return True

    if not jump():
        return None
    while done < len(target):
        # the model writes the next token(s) of the rest's own tokenization, up to a
        # character boundary (a byte-fallback character takes several passes)
        rest = target[done:].decode("utf-8")
        ids = tok.encode(rest, add_special_tokens=False)
        pos = done
        for t in ids:
            b = tok_bytes(tok, t)
            if not matcher.accept_token(t):
                return None
            out.append(t)
            sampled += 1
            pos += len(b)
            if _char_boundary(target, pos):
                break
        done = pos
        if done < len(target) and not jump():
            return None
    return sampled, appended, dropped, out


_BYTES: dict = {}


def tok_bytes(tok, t: int) -> bytes:
    b = _BYTES.get(t)
    if b is None:
        b = _BYTES[t] = tok.token_bytes[t] or b""
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sample", type=int, default=200)
    ap.add_argument("--data", default=os.path.join(ROOT, "..", "shared", "data", "maskbench-dev"))
    ap.add_argument("--timeout-s", type=int, default=20)
    a = ap.parse_args()
    sys.path.insert(0, HARNESS)
    import schemas

    from furca.constrain import GrammarCompiler, TokenizerInfo
    from furca.errors import CompileError
    from furca.runtime.jump_forward import forced_text, plan_jump
    from furca.runtime.pull import pull_default_model
    from furca.runtime.tokenizer import Tokenizer

    model_dir = pull_default_model(progress=False)
    tok = Tokenizer.from_pretrained(model_dir)
    vocab = tok.vocab_size
    info = TokenizerInfo.from_huggingface(tok.hf, vocab_size=vocab, eos_token_ids=tok.eos_token_ids)
    tok.token_bytes = info.token_bytes  # for engine_walk's byte accounting
    compiler = GrammarCompiler(info)

    names = schemas.stratified_sample(schemas.list_files(a.data), a.sample)
    signal.signal(signal.SIGALRM, _alarm)
    counts = {"schemas": len(names), "compile_error": 0, "timeout": 0, "rejected": 0, "instances": 0}
    tot = {"tokens": 0, "free": 0, "sampled": 0, "appended": 0, "retokenized": 0, "eng_tokens": 0,
           "passes_base": 0, "passes_static": 0, "passes_engine": 0}
    per_schema = []
    rejected: list[str] = []
    t0 = time.time()
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            doc = json.load(f)
        schema = doc["schema"]
        signal.alarm(a.timeout_s)
        try:
            g = compiler.compile_json_schema(schema)
            mine = {"tokens": 0, "free": 0, "sampled": 0}
            for case in doc.get("tests", []):
                if not case.get("valid"):
                    continue
                text = schemas.instance_text(case["data"], schema)
                ids = tok.encode(text)
                free = static_walk(g.matcher(), ids, info.token_bytes, forced_text)
                eng = engine_walk(g.matcher(), text, tok, vocab, forced_text, plan_jump)
                if free is None or eng is None:
                    counts["rejected"] += 1
                    rejected.append(name)
                    continue
                sampled, appended, dropped, final = eng
                counts["instances"] += 1
                tot["tokens"] += len(ids)
                tot["free"] += free
                tot["sampled"] += sampled
                tot["appended"] += appended
                tot["retokenized"] += dropped
                tot["eng_tokens"] += len(final)
                tot["passes_base"] += len(ids) + 1
                tot["passes_static"] += len(ids) - free + 1
                tot["passes_engine"] += sampled + 1
                mine["tokens"] += len(ids)
                mine["free"] += free
                mine["sampled"] += sampled
            per_schema.append((name, mine))
        except CompileError:
            counts["compile_error"] += 1
        except Timeout:
            counts["timeout"] += 1
        finally:
            signal.alarm(0)
    elapsed = time.time() - t0

    def pct(x, y):
        return round(100.0 * x / y, 2) if y else 0.0

    record = {
        "bench": "jump_forward", "tokenizer": "SmolLM2-135M-Instruct", "sample": a.sample,
        **counts, **tot,
        "free_token_pct": pct(tot["free"], tot["tokens"]),
        "passes_saved_static_pct": pct(tot["passes_base"] - tot["passes_static"], tot["passes_base"]),
        "passes_saved_engine_pct": pct(tot["passes_base"] - tot["passes_engine"], tot["passes_base"]),
        "per_schema_median_free_pct": _median([pct(m["free"], m["tokens"]) for _, m in per_schema if m["tokens"]]),
        "elapsed_s": round(elapsed, 1),
        "rejected_files": sorted(set(rejected)),
    }
    print(f"schemas {counts['schemas']}: compile_error {counts['compile_error']}, timeout {counts['timeout']}, "
          f"instances walked {counts['instances']} (rejected {counts['rejected']}: {sorted(set(rejected))})")
    print(f"tokens {tot['tokens']}: free (inside forced text) {tot['free']} = {record['free_token_pct']}%")
    print(f"forward passes (tokens + EOS): without jump-forward {tot['passes_base']}, "
          f"static {tot['passes_static']} (-{record['passes_saved_static_pct']}%), "
          f"engine rule {tot['passes_engine']} (-{record['passes_saved_engine_pct']}%)")
    print(f"engine rule: appended {tot['appended']} tokens without sampling, re-tokenized {tot['retokenized']} "
          f"earlier ones; output {tot['eng_tokens']} tokens vs {tot['tokens']} for the instance's own tokenization")
    print(f"per-schema median free-token share {record['per_schema_median_free_pct']}%; {elapsed:.0f} s")
    from bench._util import save

    print("appended to", save("jump_forward", record))


def _median(xs):
    xs = sorted(xs)
    if not xs:
        return 0.0
    k = len(xs) // 2
    return xs[k] if len(xs) % 2 else round((xs[k - 1] + xs[k]) / 2, 2)


if __name__ == "__main__":
    main()
