"""`furca serve` / `furca generate` flags: one per EngineConfig field, derived from the
fields, passed on whole to the engine; every ServerArgs option has a flag; the flag table
in docs/server.md is the parser's; a value the engine rejects stops `furca serve` with the
ConfigError's message and a non-zero status; what the flags did shows in /server_info."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import time
import typing
from pathlib import Path

import httpx
import pytest

from furca.cli import build_parser
from furca.cli_flags import flag_name, markdown_table, serve_parser
from furca.runtime.config import EngineConfig
from furca.server import create_app
from furca.server.args import ServerArgs
from tests.conftest import CLIENT_TIMEOUT, READY_TIMEOUT

REPO = Path(__file__).resolve().parents[2]
ENGINE_FIELDS = dataclasses.fields(EngineConfig)
_HINTS = typing.get_type_hints(EngineConfig)


_ADDR = "127.0.0.1:29500"
# fields that cannot leave their default alone: (value, the other fields it needs)
_COUPLED = {
    "dist_init_addr": (_ADDR, {}),
    "nnodes": (2, {"tp_size": 2, "dist_init_addr": _ADDR}),
    "node_rank": (1, {"nnodes": 2, "tp_size": 2, "dist_init_addr": _ADDR}),
}


def _companions(f: dataclasses.Field) -> dict:
    return _COUPLED[f.name][1] if f.name in _COUPLED else {}


def _other_value(f: dataclasses.Field):
    """A valid value of field `f` that is not its default, and its command-line text."""
    if f.name in _COUPLED:
        value = _COUPLED[f.name][0]
        return value, str(value)
    if isinstance(f.default, bool):
        return (not f.default), None
    choices = f.metadata.get("choices")
    if choices:
        value = [c for c in choices if c != f.default][-1]
    elif f.name == "device":
        value = "cpu"
    elif f.default is None:  # an optional number, or an optional string (a path, an address)
        value = 0.5 if "fraction" in f.name else "123" if str in typing.get_args(_HINTS[f.name]) else 123
    elif isinstance(f.default, float):
        value = f.default / 2
    else:
        value = f.default + 1
    return value, str(value)


def _parse(command: str, f: dataclasses.Field, *rest: str):
    value, text = _other_value(f)
    argv = [command, *rest, flag_name(f)] + ([text] if text is not None else [])
    fields = {g.name: g for g in ENGINE_FIELDS}
    for name, other in _companions(f).items():
        argv += [flag_name(fields[name]), str(other)]
    return value, build_parser().parse_args(argv)


@pytest.mark.parametrize("f", ENGINE_FIELDS, ids=[f.name for f in ENGINE_FIELDS])
def test_every_engine_option_is_a_serve_flag_passed_to_the_engine(f):
    value, ns = _parse("serve", f)
    names = set(ServerArgs.field_names())
    args = ServerArgs.from_kwargs(**{k: v for k, v in vars(ns).items() if k in names})
    kwargs = args.engine_kwargs()
    assert set(kwargs) == {g.name for g in ENGINE_FIELDS}  # every option reaches the engine
    assert kwargs[f.name] == value
    changed = {f.name, *_companions(f)}
    assert {k: v for k, v in kwargs.items() if k not in changed} == \
        {g.name: g.default for g in ENGINE_FIELDS if g.name not in changed}
    assert all(kwargs[k] == v for k, v in _companions(f).items())
    assert EngineConfig(**kwargs) == args.engine


@pytest.mark.parametrize("f", ENGINE_FIELDS, ids=[f.name for f in ENGINE_FIELDS])
def test_every_engine_option_is_a_generate_flag(f):
    from furca.cli_flags import config_kwargs

    value, ns = _parse("generate", f, "a prompt")
    assert config_kwargs(ns, EngineConfig)[f.name] == value


def test_sglang_names_and_switches():
    ns = build_parser().parse_args(["serve", "--disable-radix-cache", "--disable-jump-forward",
                                    "--attention-backend", "torch", "--random-seed", "7",
                                    "--chunked-prefill-size", "-1", "--max-prefill-tokens", "4096",
                                    "--schedule-policy", "fcfs", "--kv-cache-fraction", "0.25"])
    args = ServerArgs.from_kwargs(**{k: v for k, v in vars(ns).items() if k in set(ServerArgs.field_names())})
    e = args.engine
    assert (e.disable_radix_cache, e.enable_jump_forward, e.attention_backend, e.random_seed) == \
        (True, False, "torch", 7)
    assert (e.chunked_prefill_size, e.max_prefill_tokens, e.schedule_policy, e.kv_cache_fraction) == \
        (None, 4096, "fcfs", 0.25)


def test_every_server_option_has_a_flag_and_every_flag_an_option():
    from furca.cli import DP_FLAGS

    parser = serve_parser()
    dests = {a.dest for a in parser._actions if a.dest not in ("help", *DP_FLAGS)}
    options = set(ServerArgs.field_names())
    assert options <= dests, f"ServerArgs options without a serve flag: {sorted(options - dests)}"
    assert dests <= options, f"serve flags ServerArgs does not take: {sorted(dests - options)}"


def test_unknown_option_is_rejected_by_name():
    from furca.errors import ConfigError

    with pytest.raises(ConfigError, match="max_runing_requests"):
        ServerArgs.from_kwargs(max_runing_requests=3)


def test_docs_flag_table_is_the_parsers():
    doc = (REPO / "docs" / "server.md").read_text()
    begin, end = "<!-- serve-flags:begin -->\n", "\n<!-- serve-flags:end -->"
    assert begin in doc and end in doc
    table = doc[doc.index(begin) + len(begin):doc.index(end)]
    assert table == markdown_table(serve_parser()), \
        "docs/server.md's flag table is stale: paste `python -m furca.cli_flags` between the markers"


def _serve(*argv: str, timeout: float = CLIENT_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "furca.server", "--port", "0", "--log-level", "warning", *argv],
                          cwd=REPO, capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("argv, message", [
    (["--kv-cache-fraction", "1.5"], "kv_cache_fraction must be in (0, 1], got 1.5"),
    (["--max-running-requests", "0"], "max_running_requests must be a positive int, got 0"),
    (["--kv-cache-bytes", "1000", "--kv-cache-fraction", "0.5"], "give kv_cache_bytes or kv_cache_fraction"),
    (["--min-new-token-ratio", "0.9"], "min_new_token_ratio must not exceed init_new_token_ratio"),
])
def test_a_value_the_engine_rejects_stops_serve(argv, message):
    r = _serve(*argv)
    assert r.returncode == 1, r.stderr
    assert f"furca serve: ConfigError: {message}" in r.stderr


def test_a_choice_outside_the_list_is_a_usage_error():
    r = _serve("--attention-backend", "flashinfer")
    assert r.returncode == 2 and "--attention-backend" in r.stderr


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from tests.server.conftest import _runtime_fixtures

    fx = _runtime_fixtures()
    tok = fx.build_tiny_hf_tokenizer()
    out = tmp_path_factory.mktemp("serve-args") / "tiny-llama"
    fx.build_tiny_hf_model("llama", len(tok), seed=1).save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_a_value_rejected_at_load_stops_serve(tiny_dir):
    """The model's context (256) is known only once it is read: serve exits, not 503 forever."""
    r = _serve(str(tiny_dir), "--context-length", "100000", "--device", "cpu", "--dtype", "float32")
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "furca serve: ConfigError: context_length 100000 exceeds the model's 256" in r.stderr


def test_generate_takes_the_engine_flags(tiny_dir):
    r = subprocess.run([sys.executable, "-m", "furca.cli", "generate", "hello", "--model", str(tiny_dir),
                        "--max-new-tokens", "3", "--device", "cpu", "--dtype", "float32", "--max-total-tokens",
                        "300", "--disable-radix-cache", "-v"], cwd=REPO, capture_output=True, text=True,
                       timeout=CLIENT_TIMEOUT)
    assert r.returncode == 0, r.stderr
    assert '"completion_tokens": 3' in r.stderr
    r = subprocess.run([sys.executable, "-m", "furca.cli", "generate", "hello", "--model", str(tiny_dir),
                        "--device", "cpu", "--context-length", "100000"], cwd=REPO, capture_output=True, text=True,
                       timeout=CLIENT_TIMEOUT)
    assert r.returncode == 1 and "furca generate: ConfigError: context_length 100000 exceeds" in r.stderr


def test_server_info_shows_what_the_flags_did(tiny_dir):
    """An app that loads its own engine from flags: /server_info's config and
    effective_config carry every engine option, the radix cache is really off."""
    ns = build_parser().parse_args(["serve", str(tiny_dir), "--disable-radix-cache", "--max-total-tokens", "600",
                                    "--random-seed", "11", "--device", "cpu", "--dtype", "float32",
                                    "--decode-log-interval", "0", "--api-key", "secret-key"])
    args = ServerArgs.from_kwargs(**{k: v for k, v in vars(ns).items() if k in set(ServerArgs.field_names())})
    headers = {"Authorization": "Bearer secret-key"}
    body = {"input_ids": [5, 6, 7, 8, 9, 10], "sampling_params": {"max_new_tokens": 2, "temperature": 0}}

    async def main():
        app = create_app(args)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
                deadline = time.monotonic() + READY_TIMEOUT
                while (await c.get("/health")).status_code != 200 and time.monotonic() < deadline:
                    await asyncio.sleep(0.1)
                outs = [(await c.post("/generate", json=body, headers=headers)).json() for _ in range(2)]
                return outs, (await c.get("/server_info", headers=headers)).json()

    outs, info = asyncio.run(main())
    names = [f.name for f in ENGINE_FIELDS]
    assert list(info["config"]) == names and list(info["effective_config"]) == names
    assert info["config"]["disable_radix_cache"] is True and info["config"]["random_seed"] == 11
    assert info["config"]["device"] == "cpu" and info["effective_config"]["attention_backend"] == "torch"
    assert info["effective_config"]["max_total_tokens"] == info["max_total_tokens"] == 600
    assert [o["meta_info"]["cached_tokens"] for o in outs] == [0, 0]  # the same prompt twice: no cache
    assert info["server"]["args"]["api_key"] == "<set>" and "secret-key" not in str(info)
    assert info["server"]["args"]["allowed_origins"] == []


def test_serve_argv_round_trips_through_the_parser():
    """`serve_argv` (what `sgl.Runtime(**server_args)` launches) writes options that the
    serve parser reads back as the same values; switches in both directions."""
    from furca.cli import build_parser, serve_argv
    from furca.errors import ConfigError

    options = {"context_length": 512, "disable_radix_cache": True, "enable_jump_forward": False,
               "log_requests": True, "allowed_origins": ("http://a", "http://b"), "grammar_timeout": 2.5,
               "schedule_policy": "fcfs", "max_total_tokens": None, "check_memory": True}
    args = build_parser().parse_args(["serve", *serve_argv("some/model", **options)])
    assert args.model == "some/model"
    for name, value in options.items():
        if value is not None:
            assert getattr(args, name) == value, name
    assert args.max_total_tokens is None
    with pytest.raises(ConfigError, match="no option 'max_tokens'"):
        serve_argv(max_tokens=5)
