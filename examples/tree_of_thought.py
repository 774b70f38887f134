"""Tree of thought with fork and join: propose several first steps in parallel
branches (they share the question's KV through the radix cache), let each branch
judge its own step with ``select``, then continue from the best one.

    .venv/bin/python examples/tree_of_thought.py
    .venv/bin/python -c "import examples.tree_of_thought as t; print(t.solve.trace())"   # the graph
"""

from __future__ import annotations

import furca as sgl

NUM_BRANCHES = 3


@sgl.function
def solve(s, question):
    s += "Question: " + question + "\n"
    branches = s.fork(NUM_BRANCHES)
    branches += lambda i: f"Idea {i + 1}:" + sgl.gen("idea", max_tokens=32, stop="\n", temperature=0.9) + "\n"
    branches += "Is this idea useful for answering the question? " + sgl.select("verdict", ["Yes", "No"])
    branches.join()

    ranked = sorted(
        range(NUM_BRANCHES),
        key=lambda i: (s["verdict"][i] == "Yes", branches[i].get_meta_info("verdict")["normalized_prompt_logprobs"][0]),
        reverse=True,
    )
    s["best_idea"] = s["idea"][ranked[0]]
    s += "Best idea:" + s["best_idea"] + "\nAnswer:" + sgl.gen("answer", max_tokens=48, stop="\n\n")


def main() -> None:
    state = solve.run(question="How can a small town reduce traffic near its school?")
    for i, (idea, verdict) in enumerate(zip(state["idea"], state["verdict"])):
        print(f"idea {i + 1} [{verdict}]:{idea}")
    print("answer:", state["answer"].strip())
    print()
    print(solve.trace())


if __name__ == "__main__":
    if sgl.global_config.default_backend is not None:  # `furca run` set one
        main()
    else:
        with sgl.Engine() as engine:  # the default model, pulled on first use
            sgl.set_default_backend(engine)
            main()
