"""Programs compiled ahead: the batch's prefix-tree order (pure), select options and
fork branches sharing one prefill, run_batch submitting in DFS order and warming the
shared prefixes (default model), and the traced graph as SVG."""

from __future__ import annotations

import threading
import xml.etree.ElementTree as ET

import pytest

import furca as sgl
from furca.lang.backends.local import LocalBackend
from furca.lang.errors import ProgramError
from furca.lang.prefix_tree import plan_batch

SVG = "{http://www.w3.org/2000/svg}"
A = "Topic A: the history of bridges, their materials and the people who built them across the ages. "
B = "Topic B: the chemistry of baking bread, flour, water, yeast and the heat of an oven at home. "


# -- the plan (no model) ------------------------------------------------------------------------

def test_plan_is_the_dfs_of_the_prefix_tree():
    prefixes = [A + "Q1", B + "Q1", "alone", A + "Q2", B + "Q2", A + "Q3"]
    plan = plan_batch(prefixes, min_chars=64)
    assert plan.order == (0, 3, 5, 1, 4, 2)  # each group together, first-seen group first
    # the shared prefixes, cut at a word boundary, once each, in DFS order
    assert plan.warm == (A.rstrip(), B.rstrip())


def test_plan_keeps_the_order_of_unrelated_prompts_and_skips_short_prefixes():
    assert plan_batch(["b", "a", "c"]).order == (0, 1, 2)
    plan = plan_batch(["short shared x", "short shared y"], min_chars=64)
    assert plan.order == (0, 1) and plan.warm == ()


def test_plan_warms_only_the_deepest_shared_prefix_on_a_path():
    deeper = A + "Subtopic: arches and their keystones in old stone bridges. "
    plan = plan_batch([deeper + "x", A + "other", deeper + "y"], min_chars=64)
    assert plan.order == (0, 2, 1)
    assert plan.warm == (deeper.rstrip(),)  # warming it computes A as well


# -- the graph as a picture (no model) -----------------------------------------------------------

@sgl.function
def judged_ideas(s, topic):
    s += A + "Ideas about " + topic + ".\n"
    forks = s.fork(2)
    forks += lambda i: f"Idea {i + 1}:" + sgl.gen("idea", max_tokens=3)
    forks += " Good?" + sgl.select("ok", [" yes", " no"])
    forks.join()


def test_svg_parses_and_names_every_node():
    graph = judged_ideas.trace()
    root = ET.fromstring(graph.to_svg(name="judged_ideas"))
    assert root.tag == SVG + "svg"
    groups = {g.get("id"): g for g in root.iter(SVG + "g")}
    assert set(groups) == {f"node{n.id}" for n in graph.nodes}
    for n in graph.nodes:
        assert groups[f"node{n.id}"].find(SVG + "title").text == n.label
    classes = {n.id: groups[f"node{n.id}"].get("class").split() for n in graph.nodes}
    first_text = graph.nodes[0]
    assert "constant" in classes[first_text.id]  # the program starts with constant text
    # the argument is no longer constant, but every fork branch shares it
    arg = graph.of_kind("arg")[0]
    assert "fork_shared" in classes[arg.id]
    assert all("other" in classes[n.id] for n in graph.nodes if n.branch != "s")
    assert "<html>" in graph.to_html() and "judged_ideas" in graph.to_html(name="judged_ideas")


# -- on the default model ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def engine():
    from furca.runtime.engine import Engine

    with Engine(dtype="float32") as eng:
        yield eng


class RecordingEngine:
    """Forwards to the engine and records every request's prompts and max_new_tokens."""

    def __init__(self, engine):
        self._engine = engine
        self.tokenizer = engine.tokenizer
        self.requests: list[tuple[list[int], int]] = []
        self._lock = threading.Lock()

    def generate(self, *args, **kwargs):
        ids = kwargs.get("input_ids")
        params = kwargs.get("sampling_params") or {}
        first = params[0] if isinstance(params, list) else params
        with self._lock:
            for prompt in ids if ids and isinstance(ids[0], list) else [ids]:
                self.requests.append((prompt, first.get("max_new_tokens")))
        return self._engine.generate(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._engine, name)


@pytest.mark.default_model
def test_select_options_and_fork_branches_share_one_prefill(engine):
    engine.flush_cache()
    backend = LocalBackend(engine)
    state = judged_ideas.run(topic="rivers", backend=backend, temperature=0)
    prefix = len(backend.encode(A + "Ideas about rivers.\n"))
    ideas = state.get_meta_info("idea")  # one meta info per branch (gathered by join)
    assert len(ideas) == 2 and all(m["cached_tokens"] >= prefix - 2 for m in ideas), (ideas, prefix)
    for meta in state.get_meta_info("ok"):  # each branch's select: both options in one batch
        computed = sorted(p - c for p, c in zip(meta["prompt_tokens"], meta["cached_tokens"]))
        # the branch's text is cached by its gen: one option computes the gen's last token
        # and " Good?" (whose KV nobody had), the other finds them cached
        assert computed[-1] <= 5 and computed[0] <= 2, computed
    svg = state_graph_svg(state)
    assert svg.count("cache ") >= 4  # both gens and both selects show their hits


def state_graph_svg(state) -> str:
    svg = judged_ideas.trace().to_svg(state=state)
    ET.fromstring(svg)
    return svg


@pytest.mark.default_model
def test_select_options_alone_share_the_prefix_computed_once(engine):
    engine.flush_cache()
    backend = LocalBackend(engine)

    @sgl.function
    def pick(s):
        s += B + "The best part is the"
        s += sgl.select("part", [" crust", " smell", " first slice"])

    meta = pick.run(backend=backend).get_meta_info("part")
    prefix = len(backend.encode(B + "The best part is the"))
    computed = [p - c for p, c in zip(meta["prompt_tokens"], meta["cached_tokens"])]
    # one option computes the prefix; the others find it cached and compute only their tail
    assert sorted(computed)[-1] >= prefix - 2 and all(c <= 4 for c in sorted(computed)[:-1]), (computed, prefix)


@pytest.mark.default_model
def test_run_batch_warms_shared_prefixes_and_submits_in_dfs_order(engine):
    @sgl.function
    def answer(s, topic, q):
        s += topic + "Question " + q + ":" + sgl.gen("a", max_tokens=2, temperature=0)

    items = [{"topic": A, "q": "one"}, {"topic": B, "q": "two"}, {"topic": "", "q": "three"},
             {"topic": A, "q": "four"}, {"topic": B, "q": "five"}, {"topic": A, "q": "six"}]
    engine.flush_cache()
    recorder = RecordingEngine(engine)
    backend = LocalBackend(recorder)
    states = answer.run_batch(items, backend=backend, num_threads=1, progress_bar=False)
    assert [st.error() for st in states] == [None] * len(items)
    warms = [backend.tokenizer.decode(p, skip_special_tokens=True) for p, m in recorder.requests if m == 0]
    assert sorted(warms) == sorted([(A + "Question").rstrip(), (B + "Question").rstrip()])
    programs = [backend.tokenizer.decode(p, skip_special_tokens=True) for p, m in recorder.requests if m != 0]
    expected = [items[i]["topic"] + "Question " + items[i]["q"] + ":" for i in (0, 3, 5, 1, 4, 2)]
    assert programs == expected
    # every grouped program, the first of its group included, found its group's prefix cached
    for i in (0, 1, 3, 4, 5):
        shared = len(backend.encode(items[i]["topic"] + "Question"))
        assert states[i].get_meta_info("a")["cached_tokens"] >= shared - 1, (i, shared)
    assert [st["a"] for st in states] == [answer.run(**item, backend=backend)["a"] for item in items]


def test_run_batch_order_input_runs_each_body_once(engine):
    """The prefix-tree order traces each item: its body runs once more, up to its first
    read of a generated value; ``order="input"`` skips the trace and keeps the input order."""
    calls: list[str] = []

    @sgl.function
    def note(s, q):
        calls.append(q)  # a side effect before the first gen
        s += A + "Question " + q + ":" + sgl.gen("a", max_tokens=1, temperature=0)

    items = [{"q": "one"}, {"q": "two"}, {"q": "three"}]
    backend = LocalBackend(engine)
    note.run_batch(items, backend=backend, num_threads=1, progress_bar=False)
    assert sorted(calls) == sorted(["one", "two", "three"] * 2)
    calls.clear()
    states = note.run_batch(items, backend=backend, num_threads=1, progress_bar=False, order="input")
    assert calls == ["one", "two", "three"] and all(st.error() is None for st in states)
    with pytest.raises(ProgramError, match="order"):
        note.run_batch(items, backend=backend, order="random")
