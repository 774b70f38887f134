"""Value checks and normalisers behind `SamplingParams` (every failure a
``SamplingParamsError`` naming the field, the value and what is allowed), and the checks
of SGLang keys that are not `SamplingParams` fields (``beam_width``, ``watermark``,
``custom_params``: accepted only where they change nothing furca does).
"""

from __future__ import annotations

import json
import math
from typing import Any

from furca.errors import SamplingParamsError

LOGIT_BIAS_MAX = 100.0  # OpenAI's range: [-100, 100]
INT32_MAX = 2**31 - 1  # the largest count or length a request may carry (tensors hold them)
TOKEN_ID_LIMIT = 2**31  # token ids lie in [0, 2**31) before the engine checks them against its vocabulary
N_MAX = 1024  # samples per prompt


# -- keys that are not fields ---------------------------------------------------------------


def _check_beam_width(value: Any) -> None:
    if value is None or value == 1 and not isinstance(value, bool):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        fail("beam_width", value, "None or an integer >= 1")
    raise SamplingParamsError(f"sampling parameter beam_width={value!r} is not supported: furca has no beam "
                              "search (use n for independent samples); send null or 1")


def _check_watermark(value: Any) -> None:
    if value is not None:
        raise SamplingParamsError(f"sampling parameter watermark={value!r} is not supported: furca does not "
                                  "watermark output; send null")


def _check_custom_params(value: Any) -> None:
    if value is not None and not isinstance(value, dict):
        fail("custom_params", value, "a dict or None (furca has no custom logit processors: it is ignored)")


# from_dict's checks for SGLang keys that change nothing here (or are refused unless neutral)
NOT_FIELDS = {"beam_width": _check_beam_width, "watermark": _check_watermark, "custom_params": _check_custom_params}


# -- helpers ------------------------------------------------------------------------------


def fail(name: str, value: Any, allowed: str):
    raise SamplingParamsError(f"sampling parameter {name}={value!r} is invalid: must be {allowed}",
                              param=name.split("[", 1)[0])


def is_set(value: Any) -> bool:
    return value is not None and value is not False


def number(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        fail(name, value, "a number")
    if not math.isfinite(value):
        fail(name, value, "a finite number")
    return float(value)


def integer(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        fail(name, value, "an integer")


def token_ids(name: str, ids: tuple[int, ...]) -> None:
    """Every id in [0, 2**31) (the engine checks its vocabulary later)."""
    bad = [t for t in ids if not 0 <= t < TOKEN_ID_LIMIT]
    if bad:
        fail(name, bad[0], "token ids in [0, 2**31) (and below the vocabulary size)")


def str_tuple(name: str, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    fail(name, value, "a string or a list of strings")


def int_tuple(name: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple, set, frozenset)) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        return tuple(value)
    fail(name, value, "an int or a list of ints")


def json_text(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, dict):
        return json.dumps(value)  # keep key order: property order matters for generation
    if not isinstance(value, str):
        fail(name, value, "a JSON string, a dict, or None")
    try:
        json.loads(value)
    except json.JSONDecodeError as e:
        fail(name, value, f"valid JSON ({e.msg} at position {e.pos})")
    return value


def logit_bias_pairs(value: Any) -> tuple[tuple[int, float], ...]:
    """``{token_id (int or decimal str): bias}`` or ``(token_id, bias)`` pairs -> sorted pairs."""
    if value is None:
        return ()
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, (list, tuple)) and all(isinstance(x, (list, tuple)) and len(x) == 2 for x in value):
        items = [tuple(x) for x in value]
    else:
        fail("logit_bias", value, "a {token_id: bias} object or None")
    out: dict[int, float] = {}
    for key, bias in items:
        if isinstance(key, str) and key.strip().lstrip("+").isdigit():
            token = int(key)
        elif isinstance(key, int) and not isinstance(key, bool):
            token = key
        else:
            fail("logit_bias", value, f"keys that are token ids (ints or decimal strings), not {key!r}")
        if not 0 <= token < TOKEN_ID_LIMIT:
            fail("logit_bias", value, f"keys that are token ids in [0, 2**31), not {key!r}")
        if token in out:
            fail("logit_bias", value, f"each token id once ({token} is given twice)")
        bias = number(f"logit_bias[{key!r}]", bias)
        if not -LOGIT_BIAS_MAX <= bias <= LOGIT_BIAS_MAX:
            fail(f"logit_bias[{key!r}]", bias, f"in [-{LOGIT_BIAS_MAX:g}, {LOGIT_BIAS_MAX:g}]")
        out[token] = bias
    return tuple(sorted(out.items()))
