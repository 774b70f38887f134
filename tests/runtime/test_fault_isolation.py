"""A request that raises inside a scheduler step fails alone (docs/runtime.md, "Failure
isolation"): a fault injected for one chosen request in each stage fails that request
with a clear error, every other request of the batch gets exactly the output of a
fault-free run, no KV slot or lock is left behind, and the engine serves the next
request. A fault in shared bookkeeping kills the scheduler: every caller gets
EngineClosedError and the engine reports why it died."""

from __future__ import annotations

import threading

import pytest

from furca.errors import EngineClosedError, RequestFailedError
from furca.runtime.engine import Engine
from furca.runtime.faults import FaultInjector, InjectedFault
from furca.runtime.output import StreamDelta

RIDS = ["ok-0", "ok-1", "victim", "ok-3"]
PROMPTS = [[5, 6, 7, 8], [9, 10, 11], [12, 13, 14, 15, 16], [20, 21, 22]]
GREEDY = {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True}
REGEX = {**GREEDY, "regex": "[a-z ]{1,12}"}
PARAMS = [GREEDY, REGEX, REGEX, GREEDY]  # the victim and one other are constrained

# stage -> (matching calls let through first, the stage named in the error)
STAGES = {
    "forward": (2, "model forward"),  # a decode step: the whole batch runs again one by one
    "sampler": (1, "sampler"),
    "grammar": (0, "grammar matcher"),
    "detokenizer": (2, "detokenizer"),  # the third token: text was streamed already
    "output": (0, "output"),
}


@pytest.fixture(scope="module")
def engine(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=2048, check_memory=True) as e:
        yield e


def _run_stream(engine) -> dict[str, dict]:
    """One streamed batch call; per rid its text, ids and final meta_info."""
    outs = {rid: {"text": "", "ids": [], "meta": None, "deltas": 0} for rid in RIDS}
    for delta in engine.generate(input_ids=PROMPTS, sampling_params=PARAMS, rid=RIDS, stream=True):
        assert isinstance(delta, StreamDelta)
        out = outs[delta.rid]
        out["text"] += delta.text
        delta.apply_ids(out["ids"])
        out["deltas"] += 1
        if delta.finished:
            out["meta"] = delta.meta_info
    return outs


@pytest.fixture(scope="module")
def reference(engine):
    engine.set_fault_injector(None)
    return _run_stream(engine)


def _assert_idle_and_serving(engine) -> None:
    counts = engine.check_memory(idle=True)
    assert counts["locked"] == 0 and counts["free"] + counts["tree"] == counts["capacity"]
    out = engine.generate(input_ids=[30, 31, 32], sampling_params={"max_new_tokens": 2, "temperature": 0.0})
    assert len(out.output_ids) == 2
    assert not engine.is_closed and engine.error is None


@pytest.mark.parametrize("stage", list(STAGES))
def test_a_fault_fails_only_its_request_in_a_stream(engine, reference, stage):
    skip, named = STAGES[stage]
    injector = FaultInjector(stage, "victim", skip=skip)
    engine.set_fault_injector(injector)
    try:
        outs = _run_stream(engine)
    finally:
        engine.set_fault_injector(None)
    assert injector.raised >= 1
    reason = outs["victim"]["meta"]["finish_reason"]
    assert reason["type"] == "abort", reason
    assert f"request victim failed in the {named}: InjectedFault" in reason["message"], reason
    for rid in RIDS:
        if rid != "victim":
            got, want = outs[rid], reference[rid]
            assert (got["text"], got["ids"], got["meta"]["finish_reason"]) == (
                want["text"], want["ids"], want["meta"]["finish_reason"]), rid
    # what the victim streamed before failing is a prefix of its fault-free output, and
    # its final meta_info counts exactly that
    assert reference["victim"]["ids"][: len(outs["victim"]["ids"])] == outs["victim"]["ids"]
    assert outs["victim"]["meta"]["completion_tokens"] == len(outs["victim"]["ids"])
    _assert_idle_and_serving(engine)
    assert engine.get_server_info()["stats"]["failed"] >= 1


@pytest.mark.parametrize("stage", ["forward", "sampler", "detokenizer"])
def test_a_failed_request_raises_request_failed_error(engine, reference, stage):
    skip, named = STAGES[stage]
    engine.set_fault_injector(FaultInjector(stage, "victim", skip=skip))
    results: dict[str, object] = {}

    def call(i: int) -> None:  # separate callers sharing the engine's batches
        try:
            results[RIDS[i]] = engine.generate(input_ids=PROMPTS[i], sampling_params=PARAMS[i], rid=RIDS[i])
        except Exception as e:  # noqa: BLE001 - checked below
            results[RIDS[i]] = e

    try:
        threads = [threading.Thread(target=call, args=(i,)) for i in range(len(RIDS))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=300)
    finally:
        engine.set_fault_injector(None)
    err = results["victim"]
    assert isinstance(err, RequestFailedError), err
    assert err.stage == named and isinstance(err.__cause__, InjectedFault)
    assert str(err).startswith(f"request victim failed in the {named}: InjectedFault")
    for rid in RIDS:
        if rid != "victim":
            assert results[rid].output_ids == reference[rid]["ids"], rid
    _assert_idle_and_serving(engine)


def test_a_fault_while_admitting_a_prefill_fails_the_prefill_alone(engine, reference):
    """The first forward pass (every request prefilling) fails for the victim: the step is
    rolled back and the others' prefill runs again without it."""
    engine.set_fault_injector(FaultInjector("forward", "victim"))
    try:
        outs = _run_stream(engine)
    finally:
        engine.set_fault_injector(None)
    assert outs["victim"]["ids"] == [] and "model forward" in outs["victim"]["meta"]["finish_reason"]["message"]
    for rid in ("ok-0", "ok-1", "ok-3"):
        assert outs[rid]["ids"] == reference[rid]["ids"]
    _assert_idle_and_serving(engine)


def test_a_fault_in_shared_state_kills_the_engine(tiny_engine_model):
    """The radix cache insert is shared bookkeeping: a fault there is not isolated; the
    scheduler dies, every pending caller gets EngineClosedError, so does every later call."""
    loaded, _ = tiny_engine_model
    engine = Engine(loaded, max_total_tokens=1024)
    try:
        engine.set_fault_injector(FaultInjector("cache", "victim"))
        with pytest.raises(EngineClosedError, match="the engine died: InjectedFault") as info:
            engine.generate(input_ids=PROMPTS, sampling_params=GREEDY, rid=RIDS)
        assert isinstance(info.value.__cause__, InjectedFault)
        assert engine.is_closed and isinstance(engine.error, InjectedFault)
        with pytest.raises(EngineClosedError, match="the engine died"):
            engine.generate(input_ids=[5, 6], sampling_params=GREEDY)
        with pytest.raises(EngineClosedError):
            engine.get_server_info()
    finally:
        engine.shutdown()
    assert isinstance(engine.error, InjectedFault)  # shutting a dead engine down keeps the cause


def test_a_forward_that_fails_for_every_request_alone_kills_the_engine(tiny_engine_model):
    """No request is to blame when each one fails alone: that is the engine's fault."""
    loaded, _ = tiny_engine_model
    engine = Engine(loaded, max_total_tokens=1024)
    try:
        engine.set_fault_injector(FaultInjector("forward", "x-"))
        with pytest.raises(EngineClosedError, match="raised for each of the 2 requests"):
            engine.generate(input_ids=PROMPTS[:2], sampling_params=GREEDY, rid=["x-0", "x-1"])
        assert isinstance(engine.error.__cause__, InjectedFault)
    finally:
        engine.shutdown()


def test_injector_spec_and_env(monkeypatch):
    from furca.errors import ConfigError

    f = FaultInjector.parse("detokenizer:abc:3")
    assert (f.stage, f.rid, f.skip) == ("detokenizer", "abc", 3)
    for bad in ("nope:abc", "sampler", "sampler::1", "sampler:abc:x"):
        with pytest.raises(ConfigError):
            FaultInjector.parse(bad)
    monkeypatch.delenv("FURCA_FAULT_INJECT", raising=False)
    assert FaultInjector.from_env() is None
    monkeypatch.setenv("FURCA_FAULT_INJECT", "cache:die")
    assert FaultInjector.from_env().stage == "cache"
