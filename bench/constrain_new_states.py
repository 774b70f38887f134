"""Where the automaton states of the slow steps come from: by the walk that made them and
by what they are.

    .venv/bin/python bench/constrain_new_states.py [--sample 500 | --files LIST] [--min-new 16]

Per schema of the harness's stratified sample (Llama-3.1): a cold compile and first
mask, then every instance token by token (fill_bitmask + accept_token), as the shared
harness walks them. For the steps that make at least --min-new new states (the slow
steps: a step of 16-31 new states has a median of ~240 µs), each new state is counted

- by origin: the chain of the mask's parts that interned it (the innermost four of
  _compute_mask_ctx, _abstract_part, words (a key trie's "any key" walk),
  _recorded_split, walk_compiled, walk_recording, walk_continue, resume, _step_byte,
  ...; `resume` is a row the trie walk stopped for, `_accept_cold` the matcher's step);
- by where its NFA nodes lie: all in the closed layout of lasting rules (the JSON
  lexemes and any value, shared by grammars: nfa._Layout), some, or none ("own");
- by shape: a literal position (one configuration on a node with one single-byte
  edge: a key's or an enum's next byte), another single configuration, or several.

It counts the states Python interns (LazyAutomaton.intern), so it runs with FURCA_CORE=0
(rows.py's rows): the row kernel (core_rows.py, on by default since session 28) makes its
states without that call, and with it on this tool counted ~0 (session 48 found it so).

Also the masks: how many new states the masks of narrow and wide states made (masks.
TokenMasks._wide: only wide ones go through their abstract states). Figures:
bench/results/constrain.md (session 26); the design question they answer:
furca/constrain/DESIGN.md, "Known limits".
"""

from __future__ import annotations

import argparse
import json
import os
import traceback
from collections import Counter

import numpy as np

import _sample  # this script's folder is on the path

PARTS = {"abstract_part", "long_part", "walk_continue", "walk_recording", "walk_compiled", "words", "_literal_walks",
         "_accept_cold", "_step_byte", "_step_abstract", "map_short", "_tiered_mask", "_slice_level",
         "recorded_split", "abstract", "context", "contexts", "after_return", "cont_of", "canonical_short",
         "full_canonical", "resume", "_compute_mask_ctx"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    _sample.add_args(ap)
    ap.add_argument("--min-new", type=int, default=16, help="count the steps that make at least this many states")
    a = ap.parse_args(argv)
    os.environ["FURCA_CORE"] = "0"  # the kernel's states bypass the intern this tool counts
    _sample.paths()
    import schemas

    import furca.constrain as fc
    from furca.constrain import automaton, masks

    info, tok = _sample.llama3()
    made = []  # (origin, layout, shape) of each state interned since the step began

    intern = automaton.LazyAutomaton.intern

    def counted_intern(self, configs, accept):
        n = len(self.configs)
        sid = intern(self, configs, accept)
        if sid == n:
            chain = [f.name for f in traceback.extract_stack(limit=40)[:-1] if f.name in PARTS]
            cf, edges = self.configs[sid], self.nfa.edges
            size = self.nfa.layout.size if self.nfa.layout is not None else 0
            lasting = sum(1 for node, _st in cf if node < size)
            where = "lasting" if cf and lasting == len(cf) else ("some lasting" if lasting else "own")
            if len(cf) == 1:
                e = edges[cf[0][0]]
                shape = "literal" if len(e) == 1 and e[0][0] == e[0][1] else "single"
            else:
                shape = "several"
            made.append((">".join(chain[-4:]) or "(compile)", where, shape))
        return sid

    automaton.LazyAutomaton.intern = counted_intern
    by_mask = Counter()
    mask_ctx = masks.TokenMasks._compute_mask_ctx

    def counted_mask(self, s):
        n0 = len(made)
        out = mask_ctx(self, s)
        by_mask["wide" if self._wide(s) else "narrow"] += len(made) - n0
        return out

    masks.TokenMasks._compute_mask_ctx = counted_mask

    names = _sample.names(a)
    origin, where, shape = Counter(), Counter(), Counter()
    total = steps = slow = 0
    bm = np.zeros((1, info.num_words), dtype=np.int32)
    for name in names:
        with open(os.path.join(a.data, name), encoding="utf-8") as f:
            d = json.load(f)
        try:
            g = fc.GrammarCompiler(info).compile_json_schema(d["schema"])
            g.matcher().fill_bitmask(bm)
        except Exception:  # noqa: BLE001 (a compile error: nothing to walk)
            continue
        for test in d.get("tests") or []:
            ids = tok.encode(schemas.instance_text(test["data"], d["schema"]), add_special_tokens=False).ids
            m = g.matcher()
            for t in ids + [info.eos_token_id]:
                made.clear()
                m.fill_bitmask(bm)
                ok = bool((int(bm[0, t >> 5]) >> (t & 31)) & 1) and m.accept_token(t)
                steps += 1
                if len(made) >= a.min_new:
                    slow += 1
                    total += len(made)
                    for o, w, sh in made:
                        origin[o] += 1
                        where[w] += 1
                        shape[sh] += 1
                if not ok:
                    break
    print(f"{len(names)} schemas, {steps} steps; {slow} made >= {a.min_new} new states, {total} states in all")
    for title, c in (("where their NFA nodes lie", where), ("shape", shape), ("origin (innermost parts)", origin)):
        print(title + ":")
        for k, v in c.most_common(15):
            print(f"  {v / max(total, 1):6.1%}  {k}")
    print("new states made by the masks of narrow / wide states (every step): "
          f"{by_mask['narrow']} / {by_mask['wide']}")


if __name__ == "__main__":
    main()
