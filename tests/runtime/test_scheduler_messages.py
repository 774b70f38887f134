"""The scheduler thread's one inbox: callers' requests, aborts and commands queue as typed
messages in arrival order and are handled in that order between steps. The scheduler is
held by a step observer while they queue, so nothing depends on the machine's speed."""

from __future__ import annotations

import threading
import time

from furca.runtime.engine import Engine
from furca.runtime.messages import AbortRequest, NewRequest, RunCommand
from tests.runtime.test_queue_time import LONG, SHORT, Hold


def wait_inbox(engine: Engine, n: int, deadline: float = 120.0) -> list:
    end = time.monotonic() + deadline
    while len(engine._loop.inbox) < n:  # noqa: SLF001 - the test holds the scheduler
        assert time.monotonic() < end, "the messages never reached the engine"
        time.sleep(0.01)
    return list(engine._loop.inbox)  # noqa: SLF001


def test_messages_queue_in_arrival_order_and_run_in_it(tiny_engine_model):
    loaded, _ = tiny_engine_model
    with Engine(loaded, max_total_tokens=1024, check_memory=True) as engine:
        hold = Hold()
        engine.add_step_observer(hold)
        first = engine.generate(input_ids=[5, 6, 7], sampling_params=LONG, stream=True)
        assert hold.held.wait(120)
        queued = engine.generate(input_ids=[[8, 9], [10, 11]], sampling_params=SHORT, rid=["x", "y"], stream=True)
        engine.abort("x")
        info: dict = {}
        asker = threading.Thread(target=lambda: info.setdefault("info", engine.get_server_info()))
        asker.start()
        inbox = wait_inbox(engine, 4)
        assert [type(m) for m in inbox] == [NewRequest, NewRequest, AbortRequest, RunCommand]
        assert [m.req.rid for m in inbox[:2]] == ["x", "y"] and inbox[2].rid == "x"
        hold.release.set()
        asker.join(120)
        # the command ran after both requests were queued and the abort was handled
        assert info["info"]["stats"]["aborted"] == 1 and info["info"]["num_waiting"] + info["info"]["num_running"] == 2
        finals = {d.rid: d for d in queued if d.finished}
        assert finals["x"].meta_info["finish_reason"]["type"] == "abort"
        assert finals["x"].meta_info["completion_tokens"] == 0
        assert finals["y"].meta_info["completion_tokens"] == 2
        assert list(first)[-1].meta_info["completion_tokens"] == 8
        engine.check_memory(idle=True)
