"""Tracing: the graph of a program with a fork, DOT export, where tracing stops, and
the constant prefix (roles rendered by the backend's template)."""

from __future__ import annotations

import furca as sgl

from .fakes import FakeBackend


@sgl.function
def branching(s, topic):
    s += "Give tips about " + topic + ".\n"
    s += "Plan:" + sgl.gen("plan", max_tokens=16, stop="\n")
    forks = s.fork(2)
    forks += lambda i: f"Tip {i + 1}:" + sgl.gen("tip", max_tokens=32)
    forks.join()
    s += "Best: " + forks[1]["tip"]
    s += sgl.select("verdict", ["good", "bad"])


def test_graph_of_a_program_with_a_fork():
    g = branching.trace()
    assert g.stopped is None
    assert g.kinds("s") == ["text", "arg", "text", "text", "gen", "fork", "join", "text", "var", "select"]
    assert g.kinds("s.0") == g.kinds("s.1") == ["text", "gen"]
    fork, join = g.of_kind("fork")[0], g.of_kind("join")[0]
    branch_gens = [n for n in g.of_kind("gen") if n.branch != "s"]
    # each branch starts at the fork; the join waits for both branches' last nodes
    assert {g.nodes[n.prev].prev for n in branch_gens} == {fork.id}
    assert set(join.deps) == {n.id for n in branch_gens} and join.prev == fork.id
    # reading forks[1]["tip"] depends on branch 1's gen
    var = g.of_kind("var")[0]
    assert var.deps == tuple(n.id for n in branch_gens if n.branch == "s.1")
    assert g.constant_prefix == "Give tips about "


def test_graph_prints_and_exports_dot():
    g = branching.trace()
    text = str(g)
    assert "fork(2)" in text and "gen 'plan'" in text and "[s.1]" in text
    dot = g.to_dot("branching")
    assert dot.startswith("digraph branching {") and dot.rstrip().endswith("}")
    assert dot.count("->") == sum(1 for n in g.nodes if n.prev is not None) + sum(len(n.deps) for n in g.nodes)
    assert "style=dashed" in dot


def test_tracing_stops_where_values_are_needed():
    @sgl.function
    def tool(s, lhs):
        s += "Compute "
        s += str(lhs)

    g = tool.trace()
    assert g.kinds() == ["text"] and "argument 'lhs'" in g.stopped

    @sgl.function
    def react(s):
        s += "Act: " + sgl.select("action", ["Search", "Finish"])
        if s["action"] == "Search":
            s += sgl.gen("query")

    g = react.trace()
    assert g.kinds() == ["text", "select"] and "variable 'action'" in g.stopped


def test_given_arguments_are_constant():
    g = branching.trace(topic="tea")
    assert g.constant_prefix == "Give tips about tea.\nPlan:"


def test_constant_prefix_renders_roles_with_the_backend_template():
    @sgl.function
    def chat(s, q):
        s += sgl.system("You are terse.")
        s += sgl.user("Question: " + q)
        s += sgl.assistant(sgl.gen("a"))

    g = chat.trace(backend=FakeBackend())
    assert g.constant_prefix == "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nQuestion: "
    # without a backend, roles cannot be rendered: the prefix stops before them
    assert chat.trace().constant_prefix == ""
