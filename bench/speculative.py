"""Batch-1 decode speed with n-gram speculative decoding vs without, in one process.

    .venv/bin/python bench/speculative.py [--repeats 2] [--max-new-tokens 96] [--draft 6] [--threads N]

Two engines share the default model's weights (``Engine()``, default dtypes): one plain,
one with ``speculative_algorithm="ngram"``. Workloads (chat template, greedy):

- ``copy-extract``: a given document's fields extracted as JSON (no constraint);
- ``copy-rewrite``: a given paragraph rewritten with one name changed;
- ``json-schema``: the same extraction under a JSON schema (jump-forward on, both sides);
- ``chat``: open questions whose answers do not repeat the prompt.

Each (workload, engine) pair runs once as warm-up (its prompt is then in that engine's
radix cache, so the timed runs are decode plus a one-token prefill), then ``--repeats``
times alternating plain / speculative. tokens/s = completion tokens / wall time of the
request (and, less sensitive to other processes' load, / the process's CPU time);
acceptance = accepted / proposed draft tokens (meta_info). Outputs of the two
engines are compared token by token (greedy; bf16 projections may differ at near ties).
Prints a table and appends a JSON line to bench/results/raw/speculative.jsonl. CPU is
shared: the 1-minute load average is printed beside the figures; on a crowded machine
``--threads 1`` keeps torch's thread team from waiting on descheduled threads at every
op (which penalises the side with more forward passes).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench._util import add_threads_arg, save, set_threads  # noqa: E402

DOC = ("INVOICE 2024-0871\nIssued: March 3, 2024\nCustomer: Maria Lopez, Lopez Garden Design LLC\n"
       "Address: 12 Harbor Street, Portland, OR 97209\nItems: 14 ceramic planters (large), 6 bags of potting soil, "
       "2 drip irrigation kits\nSubtotal: 1,180.00 USD\nShipping: 70.00 USD\nTotal due: 1,250.00 USD\n"
       "Payment terms: net 30 days, bank transfer to Northwind Supplies, account 4471-2290-18.")
PARAGRAPH = ("The Portland community garden opened its new greenhouse on Saturday morning. Volunteers spent "
             "three months building the frame from recycled timber, and the city donated the glass panels. "
             "Maria Lopez, who led the project, said the greenhouse will grow seedlings for twelve school "
             "gardens across the city. Visitors can tour the greenhouse every Sunday from ten until noon.")
SCHEMA = {"type": "object", "properties": {
    "invoice": {"type": "string"}, "date": {"type": "string"}, "customer": {"type": "string"},
    "address": {"type": "string"}, "total": {"type": "string"}},
    "required": ["invoice", "date", "customer", "address", "total"], "additionalProperties": False}

WORKLOADS = {
    "copy-extract": (f"{DOC}\n\nExtract the invoice number, date, customer, full address and total due from "
                     "this invoice as a JSON object, copying the values exactly.", {}),
    "copy-rewrite": (f"{PARAGRAPH}\n\nRewrite this paragraph exactly as it is, but replace the name Maria Lopez "
                     "with Ann Smith.", {}),
    "json-schema": (f"{DOC}\n\nExtract the invoice number, date, customer, full address and total due from "
                    "this invoice as a JSON object.", {"json_schema": json.dumps(SCHEMA)}),
    "chat": ("Write a short story about a lighthouse keeper who finds a message in a bottle.", {}),
}


def run(engine, ids, params) -> tuple[float, float, dict, list[int]]:
    """(wall s, process CPU s, meta_info, output ids) of one request."""
    began, cpu = time.perf_counter(), time.process_time()
    out = engine.generate(input_ids=ids, sampling_params=params)
    return time.perf_counter() - began, time.process_time() - cpu, out.meta_info, out.output_ids


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--draft", type=int, default=6, help="speculative_num_draft_tokens")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    add_threads_arg(ap)
    args = ap.parse_args()
    set_threads(args)

    from furca.runtime.engine import Engine

    rows = []
    with Engine() as plain, Engine(plain.loaded, speculative_algorithm="ngram",
                                   speculative_num_draft_tokens=args.draft) as spec:
        tok = plain.tokenizer
        for name in args.workloads.split(","):
            text, extra = WORKLOADS[name]
            ids = tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))
            params = {"max_new_tokens": args.max_new_tokens, "temperature": 0, **extra}
            outs = {"plain": run(plain, ids, params)[3], "ngram": run(spec, ids, params)[3]}  # warm-up
            secs = {"plain": 0.0, "ngram": 0.0}
            cpu = {"plain": 0.0, "ngram": 0.0}
            toks = {"plain": 0, "ngram": 0}
            proposed = accepted = 0
            for _ in range(args.repeats):
                for side, engine in (("plain", plain), ("ngram", spec)):
                    s, c, meta, _ = run(engine, ids, params)
                    secs[side] += s
                    cpu[side] += c
                    toks[side] += meta["completion_tokens"]
                    if side == "ngram":
                        proposed += meta.get("spec_num_proposed_drafts", 0)
                        accepted += meta.get("spec_num_correct_drafts", 0)
            same = next((i for i, (a, b) in enumerate(zip(outs["plain"], outs["ngram"])) if a != b), None)
            row = {"workload": name, "prompt_tokens": len(ids), "tokens": toks["plain"] // args.repeats,
                   "plain_tok_s": toks["plain"] / secs["plain"], "ngram_tok_s": toks["ngram"] / secs["ngram"],
                   "acceptance": accepted / proposed if proposed else 0.0,
                   "accepted_per_step": None, "first_difference": same, "load_1m": round(os.getloadavg()[0], 2)}
            row["speedup"] = row["ngram_tok_s"] / row["plain_tok_s"]
            row["cpu_speedup"] = (toks["ngram"] / cpu["ngram"]) / (toks["plain"] / cpu["plain"])
            rows.append(row)
            print(f"{name:13s} {row['tokens']:4d} tok  plain {row['plain_tok_s']:6.1f} tok/s  ngram "
                  f"{row['ngram_tok_s']:6.1f} tok/s  x{row['speedup']:.2f} (CPU time x{row['cpu_speedup']:.2f})  acceptance {row['acceptance']:.2f}  "
                  f"outputs differ at {same}  load {row['load_1m']}", flush=True)
    path = save("speculative", {"draft": args.draft, "repeats": args.repeats, "threads": args.threads, "rows": rows})
    print(f"appended to {path}")


if __name__ == "__main__":
    main()
