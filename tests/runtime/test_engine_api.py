"""Engine API: n > 1, stop conditions, streaming, abort, prompt scoring, seeds, asyncio,
the logits hook, flush_cache, crash handling."""

from __future__ import annotations

import asyncio
import random
import threading

import pytest
import torch

from furca.errors import EngineClosedError, InvalidRequestError
from furca.runtime.engine import Engine
from furca.runtime.output import Output, StreamDelta
from tests.conftest import CLIENT_TIMEOUT, async_wait_until, wait_until


@pytest.fixture(scope="module")
def engine(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, chunked_prefill_size=16, check_memory=True) as e:
        yield e


def rand_ids(n: int, seed: int, vocab: int = 250) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, vocab) for _ in range(n)]


def test_generate_shapes_and_meta_info(engine):
    out = engine.generate("Hello world", sampling_params={"temperature": 0, "max_new_tokens": 5, "ignore_eos": True})
    assert isinstance(out, Output) and len(out.output_ids) == 5
    meta = out.meta_info
    assert meta["id"] == out.rid and meta["prompt_tokens"] == len(engine.tokenizer.encode("Hello world", True))
    assert meta["completion_tokens"] == 5 and meta["finish_reason"] == {"type": "length", "length": 5}
    assert meta["e2e_latency"] > 0 and "cached_tokens" in meta
    assert out.text == engine.tokenizer.decode(out.output_ids)
    outs = engine.generate(["a b", "c d"], sampling_params={"max_new_tokens": 2}, rid=["x", "y"])
    assert [o.rid for o in outs] == ["x", "y"]
    assert engine.generate(input_ids=[[5, 6], [7]], sampling_params={"max_new_tokens": 1})[1].meta_info["prompt_tokens"] == 1
    engine.check_memory(idle=True)


def test_n_samples_share_the_prompt_kv(engine):
    ids = rand_ids(30, seed=11)
    outs = engine.generate(input_ids=ids, sampling_params={"n": 4, "temperature": 1.0, "max_new_tokens": 6,
                                                            "seed": 3, "ignore_eos": True}, rid="par")
    assert isinstance(outs, list) and len(outs) == 4
    assert [o.rid for o in outs] == ["par-0", "par-1", "par-2", "par-3"]
    cached = sorted(o.meta_info["cached_tokens"] for o in outs)
    assert cached[0] == 0 and cached[1:] == [29, 29, 29]  # the prompt was prefilled once
    assert len({tuple(o.output_ids) for o in outs}) > 1  # seed + i per sample: they differ
    # batch: samples adjacent, in input order
    two = engine.generate(input_ids=[rand_ids(5, 1), rand_ids(6, 2)], sampling_params={"n": 2, "max_new_tokens": 1})
    assert [o.meta_info["prompt_tokens"] for o in two] == [5, 5, 6, 6]
    engine.check_memory(idle=True)


def test_stop_string_and_stop_token(engine):
    ids = rand_ids(12, seed=21)
    base = engine.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 24, "ignore_eos": True})
    text = base.text
    cut = next(i for i in range(4, len(text)) if text[i:i + 2].strip() and "\ufffd" not in text[i:i + 2])
    stop = text[cut:cut + 2]
    first = text.find(stop)
    out = engine.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 24,
                                                           "ignore_eos": True, "stop": [stop]})
    assert out.meta_info["finish_reason"] == {"type": "stop", "matched": stop}
    assert out.text == text[:first]
    tok = base.output_ids[5]
    k = base.output_ids.index(tok)
    out = engine.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 24,
                                                           "ignore_eos": True, "stop_token_ids": [tok]})
    assert out.meta_info["finish_reason"] == {"type": "stop", "matched": tok}
    assert out.output_ids == base.output_ids[: k + 1]
    # min_new_tokens blocks the stop token before it
    out = engine.generate(input_ids=ids, sampling_params={"temperature": 0, "max_new_tokens": 24, "ignore_eos": True,
                                                           "stop_token_ids": [tok], "min_new_tokens": k + 2})
    assert len(out.output_ids) >= k + 2
    engine.check_memory(idle=True)


def test_streaming_deltas_concatenate_to_text(engine):
    params = {"temperature": 0, "max_new_tokens": 30, "ignore_eos": True}
    full = engine.generate("Paris is the capital", sampling_params=params)
    deltas = list(engine.generate("Paris is the capital", sampling_params=params, stream=True))
    assert all(isinstance(d, StreamDelta) for d in deltas)
    assert deltas[-1].finished and not any(d.finished for d in deltas[:-1])
    assert "".join(d.text for d in deltas) == full.text
    assert [t for d in deltas for t in d.token_ids] == full.output_ids
    assert deltas[-1].meta_info["finish_reason"]["type"] == "length"
    engine.check_memory(idle=True)


def test_abort_running_and_waiting(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=4096, max_running_requests=1, check_memory=True) as engine:
        params = {"temperature": 0, "max_new_tokens": 200, "ignore_eos": True}
        stream = engine.generate(input_ids=rand_ids(20, 1), sampling_params=params, rid="long", stream=True)
        next(stream)  # running
        waiting: dict = {}
        t = threading.Thread(target=lambda: waiting.setdefault(
            "out", engine.generate(input_ids=rand_ids(10, 2), sampling_params=params, rid="queued")))
        t.start()
        wait_until(lambda: engine.get_server_info()["num_waiting"], "the second request waits")
        engine.abort("queued")
        t.join(CLIENT_TIMEOUT)
        assert not t.is_alive()
        assert waiting["out"].meta_info["finish_reason"]["type"] == "abort"
        engine.abort("long")
        last = list(stream)[-1]
        assert last.finished and last.meta_info["finish_reason"]["type"] == "abort"
        assert last.meta_info["completion_tokens"] < 200
        counts = engine.check_memory(idle=True)
        assert counts["locked"] == 0 and counts["free"] + counts["tree"] == counts["capacity"]
        engine.abort("no-such-rid")  # ignored
        # an abandoned stream aborts its request
        s = engine.generate(input_ids=rand_ids(8, 3), sampling_params=params, stream=True)
        next(s)
        s.close()
        while engine.get_server_info()["num_running"]:
            pass
        engine.check_memory(idle=True)


def test_prompt_scoring_equals_manual_log_softmax(engine, tiny_engine_model):
    _, hf_model = tiny_engine_model
    prefix = rand_ids(25, seed=31)
    choices = [rand_ids(k, seed=40 + k) for k in (3, 5, 1)]
    start = len(prefix) - 2
    engine.flush_cache()
    outs = engine.generate(
        input_ids=[prefix + c for c in choices],
        sampling_params={"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": start,
                         "top_logprobs_num": 2, "return_text_in_logprobs": True},
    )
    for c, out in zip(choices, outs):
        ids = prefix + c
        with torch.no_grad():
            logp = torch.log_softmax(hf_model(torch.tensor([ids])).logits[0].float(), -1)
        entries = out.meta_info["input_token_logprobs"]
        assert [e[1] for e in entries] == ids[start:]
        want = [float(logp[p - 1, ids[p]]) for p in range(start, len(ids))]
        assert [e[0] for e in entries] == pytest.approx(want, abs=1e-4)
        assert entries[0][2] == engine.tokenizer.decode([ids[start]], skip_special_tokens=False)
        tops = out.meta_info["input_top_logprobs"]
        assert [t[0][1] for t in tops] == [int(logp[p - 1].argmax()) for p in range(start, len(ids))]
        assert out.output_ids == [] and out.meta_info["finish_reason"]["type"] == "length"
        assert out.meta_info["output_token_logprobs"] == []
    # the shared prefix (up to logprob_start_len - 1) was computed once
    assert sorted(o.meta_info["cached_tokens"] for o in outs)[1:] == [start - 1, start - 1]
    # logprob_start_len 0: the first entry has no logprob
    out = engine.generate(input_ids=prefix[:4], sampling_params={"max_new_tokens": 1, "temperature": 0,
                                                                  "return_logprob": True, "logprob_start_len": 0})
    first = out.meta_info["input_token_logprobs"]
    assert first[0][0] is None and len(first) == 4
    one = engine.generate(input_ids=prefix[:1], sampling_params={"max_new_tokens": 0, "return_logprob": True,
                                                                  "logprob_start_len": 0})
    assert one.meta_info["input_token_logprobs"] == [[None, prefix[0], None]]
    with torch.no_grad():
        logp = torch.log_softmax(hf_model(torch.tensor([prefix[:4]])).logits[0, -1].float(), -1)
    chosen = out.meta_info["output_token_logprobs"][0]
    assert chosen[1] == out.output_ids[0] and chosen[0] == pytest.approx(float(logp.max()), abs=1e-4)
    engine.check_memory(idle=True)


def test_seeds_are_reproducible(engine):
    params = {"temperature": 1.0, "top_p": 0.9, "max_new_tokens": 12, "seed": 1234, "ignore_eos": True}
    a = engine.generate(input_ids=rand_ids(10, 7), sampling_params=params)
    others = engine.generate(input_ids=[rand_ids(9, k) for k in range(3)], sampling_params={"max_new_tokens": 12})
    b, _ = engine.generate(input_ids=[rand_ids(10, 7), rand_ids(50, 8)], sampling_params=[params, {"max_new_tokens": 5}])
    assert a.output_ids == b.output_ids and len(others) == 3
    c = engine.generate(input_ids=rand_ids(10, 7), sampling_params={**params, "seed": 99})
    assert c.output_ids != a.output_ids


def test_async_generate_from_an_event_loop(engine):
    async def main():
        params = {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True}
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        tick_task = asyncio.create_task(ticker())
        outs = await asyncio.gather(*(engine.async_generate(input_ids=rand_ids(12, k), sampling_params=params)
                                      for k in range(4)))
        stream = await engine.async_generate(input_ids=rand_ids(12, 0), sampling_params=params, stream=True)
        deltas = [d async for d in stream]
        tick_task.cancel()
        return outs, deltas, ticks

    outs, deltas, ticks = asyncio.run(main())
    sync = engine.generate(input_ids=rand_ids(12, 0), sampling_params={"temperature": 0, "max_new_tokens": 8,
                                                                         "ignore_eos": True})
    assert outs[0].output_ids == sync.output_ids
    assert "".join(d.text for d in deltas) == sync.text
    assert ticks > 5  # the loop kept running while the engine worked
    engine.check_memory(idle=True)


class AllowOnly:
    """A fake matcher: only `allowed` token ids, terminated after `limit` tokens."""

    def __init__(self, allowed, limit):
        self.allowed, self.limit, self.count = allowed, limit, 0

    def fill_bitmask(self, bitmask, row):
        bitmask[row] = 0
        for t in self.allowed:
            bitmask[row, t // 32] |= torch.tensor(1 << (t % 32), dtype=torch.int64).to(torch.int32)

    def accept_token(self, token_id):
        self.count += 1
        return token_id in self.allowed

    def is_terminated(self):
        return self.count >= self.limit

    def jump_forward(self):
        return ""


def test_logits_hook_masks_tokens(tiny_engine_model):
    loaded, _ = tiny_engine_model
    allowed = [7, 40, 63, 64, 200]

    class Backend:
        def create_matcher(self, params):
            return AllowOnly(allowed, limit=5)

    with Engine(loaded, max_total_tokens=1024, grammar_backend=Backend(), check_memory=True) as engine:
        outs = engine.generate(input_ids=[rand_ids(9, 1), rand_ids(9, 2)],
                               sampling_params=[{"regex": "[a-z]+", "temperature": 1.0, "max_new_tokens": 20},
                                                {"max_new_tokens": 20, "temperature": 0, "ignore_eos": True}])
        assert set(outs[0].output_ids) <= set(allowed) and len(outs[0].output_ids) == 5
        assert outs[0].meta_info["finish_reason"]["type"] == "stop"
        assert len(outs[1].output_ids) == 20
        engine.check_memory(idle=True)
    with Engine(loaded, max_total_tokens=512, grammar_backend=False) as engine:
        with pytest.raises(InvalidRequestError, match="constrained decoding not available"):
            engine.generate("x", sampling_params={"regex": "a"})
        engine.check_memory(idle=True)


def test_flush_cache(engine):
    engine.generate(input_ids=rand_ids(20, 9), sampling_params={"max_new_tokens": 2})
    assert engine.get_server_info()["cached_tokens_in_tree"] > 0
    assert engine.flush_cache() is True
    info = engine.get_server_info()
    assert info["cached_tokens_in_tree"] == 0 and info["free"] == info["capacity"]
    for key in ("max_total_tokens", "used_tokens", "cache_hit_rate", "num_running", "num_waiting", "context_length"):
        assert key in info
    stream = engine.generate(input_ids=rand_ids(8, 1), sampling_params={"max_new_tokens": 30, "ignore_eos": True},
                             stream=True)
    next(stream)
    assert engine.flush_cache() is False  # busy
    assert engine.get_server_info()["used_tokens"] > 0
    list(stream)
    engine.check_memory(idle=True)


def test_cancelling_async_generate_aborts(engine):
    async def main():
        task = asyncio.create_task(engine.async_generate(
            input_ids=rand_ids(8, 2), sampling_params={"max_new_tokens": 200, "ignore_eos": True}, rid="cancel-me"))
        # cancel once it runs (a fixed sleep could cancel it before the engine had it)
        await async_wait_until(lambda: engine.get_server_info()["num_running"], "the request runs")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    aborted = engine.get_server_info()["stats"]["aborted"]
    asyncio.run(main())
    wait_until(lambda: not engine.get_server_info()["num_running"], "the cancelled request leaves the batch")
    engine.check_memory(idle=True)
    assert engine.get_server_info()["stats"]["aborted"] == aborted + 1


def test_scheduler_crash_fails_pending_requests(tiny_engine_model):
    from furca.errors import RequestFailedError
    from furca.runtime.memory import MemoryAccountingError

    loaded, _ = tiny_engine_model
    engine = Engine(loaded, max_total_tokens=512)
    forward = engine.scheduler.runner.forward

    def boom(step):
        raise RuntimeError("kernel exploded")

    # an ordinary exception fails the request it was raised for; the engine goes on
    engine.scheduler.runner.forward = boom
    with pytest.raises(RequestFailedError, match="model forward: RuntimeError: kernel exploded"):
        engine.generate("hello", sampling_params={"max_new_tokens": 3})
    engine.scheduler.runner.forward = forward
    assert len(engine.generate("hello", sampling_params={"max_new_tokens": 3}).output_ids) == 3

    def corrupt(step):  # one that may have corrupted shared state kills the scheduler
        raise MemoryAccountingError("kernel exploded")

    engine.scheduler.runner.forward = corrupt
    with pytest.raises(EngineClosedError) as info:
        engine.generate("hello", sampling_params={"max_new_tokens": 3})
    assert isinstance(info.value.__cause__, MemoryAccountingError)
    with pytest.raises(EngineClosedError):
        engine.generate("hello")
    engine.shutdown()


def test_shutdown_is_idempotent_and_rejects_new_requests(tiny_engine_model):
    loaded, _ = tiny_engine_model
    engine = Engine(loaded, max_total_tokens=128)
    engine.shutdown()
    engine.shutdown()
    assert engine.is_closed
    with pytest.raises(EngineClosedError):
        engine.generate("hello")


class ForceSequence:
    """A fake matcher that allows exactly the next token of `target`, then EOS."""

    def __init__(self, target, eos):
        self.seq, self.eos, self.pos, self.done = list(target), eos, 0, False

    def fill_bitmask(self, bitmask, row):
        t = self.seq[self.pos] if self.pos < len(self.seq) else self.eos
        bitmask[row] = 0
        bitmask[row, t // 32] = torch.tensor(1 << (t % 32), dtype=torch.int64).to(torch.int32)

    def accept_token(self, token_id):
        if self.pos == len(self.seq):
            self.done = token_id == self.eos
            return self.done
        ok = token_id == self.seq[self.pos]
        self.pos += 1
        return ok

    def is_terminated(self):
        return self.done

    def jump_forward(self):
        return ""


def test_stream_never_splits_a_utf8_character(tiny_engine_model):
    loaded, _ = tiny_engine_model
    text = "caf\u00e9 \u20ac5 \U0001f600!"
    tok = loaded.tokenizer
    target = tok.encode(text)
    assert len(target) > len(text)  # multi-byte characters span several byte tokens
    eos = tok.eos_token_ids[0]

    class Backend:
        def create_matcher(self, params):
            return ForceSequence(target, eos)

    with Engine(loaded, max_total_tokens=1024, grammar_backend=Backend(), check_memory=True) as engine:
        params = {"regex": ".*", "max_new_tokens": 40, "temperature": 1.0}
        deltas = list(engine.generate(input_ids=rand_ids(6, 4), sampling_params=params, stream=True))
        assert all("\ufffd" not in d.text for d in deltas)
        assert "".join(d.text for d in deltas) == text
        assert deltas[-1].meta_info["finish_reason"] == {"type": "stop", "matched": eos}
        out = engine.generate(input_ids=rand_ids(6, 4), sampling_params=params)
        assert out.text == text and out.output_ids == target + [eos]
        engine.check_memory(idle=True)


def test_all_sampling_knobs_run_in_one_batch(engine):
    knobs = [
        {"temperature": 0.7, "top_k": 5},
        {"temperature": 1.0, "top_p": 0.5, "min_p": 0.1},
        {"temperature": 0, "repetition_penalty": 1.3},
        {"temperature": 0.9, "frequency_penalty": 0.5, "presence_penalty": 0.5, "seed": 1},
        {"temperature": 0, "return_logprob": True, "top_logprobs_num": 3},
    ]
    params = [{**k, "max_new_tokens": 6, "ignore_eos": True} for k in knobs]
    outs = engine.generate(input_ids=[rand_ids(7, i) for i in range(len(knobs))], sampling_params=params)
    assert [len(o.output_ids) for o in outs] == [6] * len(knobs)
    top = outs[-1].meta_info["output_top_logprobs"]
    assert len(top) == 6 and all(len(t) == 3 and t[0][1] == o for t, o in zip(top, outs[-1].output_ids))
    engine.check_memory(idle=True)


def test_unreferenced_engine_stops_its_thread(tiny_engine_model):
    import gc

    loaded, _ = tiny_engine_model
    engine = Engine(loaded, max_total_tokens=128)
    engine.generate("hi", sampling_params={"max_new_tokens": 1})
    thread = engine._loop.thread
    del engine
    gc.collect()
    thread.join(timeout=CLIENT_TIMEOUT)
    assert not thread.is_alive()


def test_stream_deltas_carry_their_sample_index(engine):
    deltas = list(engine.generate(input_ids=[rand_ids(5, 61), rand_ids(4, 62)], rid=["pa", "pb"], stream=True,
                                  sampling_params=[{"max_new_tokens": 3, "n": 2, "temperature": 1.0, "seed": 5,
                                                    "ignore_eos": True},
                                                   {"max_new_tokens": 2, "ignore_eos": True}]))
    finals = {(d.group_rid, d.index): d for d in deltas if d.finished}
    assert sorted(finals) == [("pa", 0), ("pa", 1), ("pb", 0)]
    assert all(d.index == int(d.rid.rsplit("-", 1)[1]) for d in deltas if d.group_rid == "pa")
    assert all(d.rid == "pb" and d.index == 0 for d in deltas if d.group_rid == "pb")
    assert deltas[0]["index"] in (0, 1) and "group_rid" in deltas[0]
    plain = StreamDelta("x", "", [])
    assert plain.index == 0 and plain.group_rid == "x" and plain.retract == 0


def test_stream_delta_apply_ids_takes_back_then_appends():
    ids = [5, 6, 7]
    assert StreamDelta("x", "a", [8], retract=2).apply_ids(ids) == [5, 8] and ids == [5, 8]
    assert StreamDelta("x", "", [9]).apply_ids(ids) == [5, 8, 9]
    assert StreamDelta("x", "", [], retract=3).apply_ids(ids) == []
    with pytest.raises(ValueError, match="retract 1 exceeds the 0 ids"):
        StreamDelta("x", "", [1], retract=1).apply_ids([])
    assert StreamDelta("x", "", [], retract=1)["retract"] == 1


def test_exit_without_shutdown_is_clean(tiny_engine_model, tmp_path):
    """A process that leaves its engine running (even mid-generation, its waiter a daemon
    thread) exits 0, without "terminate called without an active exception"."""
    import subprocess
    import sys
    from pathlib import Path

    loaded, _ = tiny_engine_model
    script = tmp_path / "leave_engine_running.py"
    script.write_text(
        "import sys, threading, time\n"
        "from furca.runtime.engine import Engine\n"
        "engine = Engine(sys.argv[1], max_total_tokens=256, device='cpu')\n"
        "print(engine.generate('hi', sampling_params={'max_new_tokens': 2}).meta_info['completion_tokens'])\n"
        "stream = engine.generate('hi', sampling_params={'max_new_tokens': 200, 'ignore_eos': True}, stream=True)\n"
        "next(stream)\n"
        "threading.Thread(target=lambda: engine.generate('yo', sampling_params={'max_new_tokens': 200,\n"
        "                 'ignore_eos': True}), daemon=True).start()\n"
        "time.sleep(0.2)\n"
        "print('bye')\n"
    )
    repo = Path(__file__).resolve().parents[2]
    for _ in range(2):
        done = subprocess.run([sys.executable, str(script), str(loaded.model_path)], cwd=repo, capture_output=True,
                              text=True, timeout=CLIENT_TIMEOUT)
        assert "terminate called" not in done.stderr, done.stderr
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == ["2", "bye"]
        assert "Traceback" not in done.stderr, done.stderr
