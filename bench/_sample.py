"""The schemas and tokenizer the constrain bench scripts share: the shared harness's
stratified sample of maskbench-dev (or a list of files) and the Llama-3.1 tokenizer,
loaded as the harness loads them (constrain_dup_masks.py, constrain_key_steps.py,
constrain_narrow_walks.py, constrain_new_states.py, constrain_tail.py, and the A/B
scripts through constrain_ab.py)."""

from __future__ import annotations

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HARNESS = os.path.join(ROOT, "..", "shared", "bench", "grammar")
DATA = os.path.join(ROOT, "..", "shared", "data", "maskbench-dev")


def add_args(ap, sample: int = 500) -> None:
    """--sample N (the harness's stratified sample of that size), --files F (schema file
    names, one a line, instead), --data DIR (maskbench-dev)."""
    ap.add_argument("--sample", type=int, default=sample)
    ap.add_argument("--files", help="schema file names, one a line (default: the harness's stratified sample)")
    ap.add_argument("--data", default=DATA)


def paths(root: str = ROOT) -> None:
    """furca (from root: this checkout, or another tree), the harness's modules and
    tests/ (the tokenizers' cache) on sys.path, the last first."""
    for p in (root, HARNESS, os.path.join(ROOT, "tests")):
        sys.path.insert(0, p)


def names(a) -> list[str]:
    """The schema file names of add_args' arguments (after paths())."""
    if a.files:
        with open(a.files, encoding="utf-8") as f:
            return [x.strip() for x in f if x.strip()]
    import schemas

    return schemas.stratified_sample(schemas.list_files(a.data), a.sample)


def valid_ids(d, hf) -> list[list[int]]:
    """The token ids of schema file d's valid instances, each as the harness writes it
    (compact JSON, keys in the schema's property order: schemas.instance_text), by the
    tokenizers library's Tokenizer hf (after paths())."""
    import schemas

    return [hf.encode(schemas.instance_text(t["data"], d["schema"]), add_special_tokens=False).ids
            for t in d["tests"] if t["valid"]]


def llama3():
    """(furca's TokenizerInfo, the tokenizers library's Tokenizer) of Llama-3.1, EOS
    `<|eot_id|>` (after paths())."""
    from constrain.tokenizers_cache import tokenizer_json
    from tokenizers import Tokenizer

    from furca.constrain import TokenizerInfo

    path, eos = tokenizer_json("llama3_1")
    return TokenizerInfo.from_tokenizer_json(path, eos_token=eos), Tokenizer.from_file(str(path))
