"""Without numba (FURCA_NO_NUMBA=1, or numba missing) the masks come from the numpy
level-by-level walk, and every state's mask must be what the compiled walks give. The key
tries' masks are recording walks, which only numba runs: such a state was handed to them
anyway and the first mask at a key position raised a TypeError."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from furca.constrain import GrammarCompiler, _walk

from .conftest import allowed_set, byte_info

EXTRA = ["ab", "abc", '"a', '":', '",', "12", '"}', "al", "pha", '{"', "xy"]
SCHEMA = {"type": "object", "properties": {"alpha": {"type": "integer"}, "beta": {"enum": ["xy", "xz"]},
                                           "name": {"type": "string", "maxLength": 4}},
          "additionalProperties": {"type": "string"}}
TEXT = '{"alpha":12,"beta":"xz","name":"ab","other":"abc","al":"x"}'

PROBE = f"""
import json, sys
sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})
from constrain.test_no_numba import masks_along
print(json.dumps(masks_along()))
"""


def masks_along():
    info = byte_info(EXTRA)
    g = GrammarCompiler(info).compile_json_schema(SCHEMA)
    m = g.matcher()
    out = []
    for b in TEXT.encode():
        out.append([int(t) for t in allowed_set(m, info)[: info.vocab_size].nonzero()[0]])
        assert m.accept_token(b), m.error
    return out


@pytest.mark.skipif(_walk.get_walk() is None, reason="compares with the compiled walks")
def test_masks_without_numba_equal_the_compiled_walks():
    env = dict(os.environ, FURCA_NO_NUMBA="1")
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == masks_along()
