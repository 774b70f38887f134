"""The cyclic GC is paused while a compile or a new state's mask grows a grammar
(furca/constrain/gcpause.py): counted across threads, restored only if it was on."""

import gc
from contextlib import contextmanager
import sys
import threading

from furca.constrain import GrammarCompiler
from furca.constrain.gcpause import GcPause

from .conftest import byte_info


@contextmanager
def paused(p):
    p.enter()
    try:
        yield
    finally:
        p.exit()


def _restoring(fn):
    was = gc.isenabled()
    try:
        fn()
    finally:
        (gc.enable if was else gc.disable)()


def test_overlapping_pauses_keep_the_gc_off_until_the_last_ends():
    def run():
        gc.enable()
        p = GcPause()
        inside, release = threading.Event(), threading.Event()

        def other():
            with paused(p):
                inside.set()
                release.wait(30)

        t = threading.Thread(target=other)
        t.start()
        assert inside.wait(30)
        assert not gc.isenabled()
        with paused(p):
            assert not gc.isenabled()
        assert not gc.isenabled()  # the other thread's pause still runs
        release.set()
        t.join(30)
        assert gc.isenabled()

    _restoring(run)


def test_a_pause_leaves_a_disabled_gc_disabled():
    def run():
        gc.disable()
        p = GcPause()
        with paused(p):
            assert not gc.isenabled()
        assert not gc.isenabled()

    _restoring(run)


def test_a_new_mask_runs_without_collections():
    # with a threshold of one allocation, any unpaused growth of the automaton collects
    collections = []

    def count(phase, info):
        f = sys._getframe()
        while f is not None and f.f_code.co_name != "_compute_mask_ctx":
            f = f.f_back
        if phase == "start" and f is not None:  # a collection inside a mask's computation
            collections.append(info["generation"])

    def run():
        gc.enable()
        c = GrammarCompiler(byte_info())
        g = c.compile_json_schema({"type": "object", "properties": {"name": {"type": "string"}, "n": {"type": "integer"}}})
        m = g.matcher()
        old = gc.get_threshold()
        gc.callbacks.append(count)
        gc.set_threshold(1)
        computed = 0
        try:
            for b in b'{"name":"x","n":1':
                before = len(g.masks._store)
                m.get_allowed_tokens()
                computed += len(g.masks._store) > before
                assert m.accept_token(b), m.error
        finally:
            gc.callbacks.remove(count)
            gc.set_threshold(*old)
        assert computed > 10  # new masks were computed, with allocations enough to collect
        assert collections == [], "the GC collected while a new mask was computed"

    _restoring(run)


def test_a_pause_ends_with_a_young_collection_only():
    # left to the allocation counter, the collection after a pause escalates to the older
    # generations whenever their counters are due; the pause collects the young one itself
    seen = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    def run():
        gc.enable()
        gc.collect()
        p = GcPause()
        for _ in range(gc.get_threshold()[1] + 1):
            gc.collect(0)  # the middle generation's counter is now due
        gc.callbacks.append(record)
        try:
            with paused(p):
                keep = [[i] for i in range(5000)]  # tracked objects the pause leaves young
            junk = [[i] for i in range(100)]  # the next allocations after the pause
        finally:
            gc.callbacks.remove(record)
        assert seen and seen[0] == 0, seen  # the young generation, not an escalated collection
        assert gc.get_count()[0] < 1000
        del keep, junk

    _restoring(run)


def _young_collections(fn):
    seen = []

    def record(phase, info):
        if phase == "start":
            seen.append(info["generation"])

    was = gc.isenabled()
    gc.enable()
    gc.collect()
    gc.callbacks.append(record)
    try:
        fn()
    finally:
        gc.callbacks.remove(record)
        (gc.enable if was else gc.disable)()
    return seen


def test_every_pause_ends_with_a_young_collection():
    # even below the threshold: left to the allocation counter, the next collection would
    # start in a later step, outside any pause, escalated when the older counters are due
    p = GcPause()
    keep = []

    def small():
        with paused(p):
            keep.append([[i] for i in range(gc.get_threshold()[0] // 4)])

    assert _young_collections(small) == [0]
    assert gc.isenabled() and gc.get_count()[0] < gc.get_threshold()[0] // 4
