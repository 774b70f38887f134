"""A tool-using agent loop: at each step the model picks an action with ``select``
(scored exactly over the options, never free text), writes the action's input with a
stopped ``gen``, and the program runs the tool and appends its observation.

    .venv/bin/python examples/agent_loop.py
"""

from __future__ import annotations

import ast
import operator

import furca as sgl

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def calculator(expression: str) -> str:
    """Evaluate + - * / over numbers (no eval)."""
    def ev(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError("unsupported expression")
    try:
        return str(ev(ast.parse(expression.strip(), mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError) as e:
        return f"error: {e}"


FACTS = {"eiffel tower height": "330 metres", "speed of sound": "343 metres per second"}


def lookup(query: str) -> str:
    key = query.strip().lower()
    return next((v for k, v in FACTS.items() if k in key or key in k), "no result")


TOOLS = {"calculate": calculator, "lookup": lookup}

INSTRUCTIONS = """You answer questions using tools. Each step is one of:
Action: calculate[<arithmetic expression>]
Action: lookup[<topic>]
Action: finish[<final answer>]
Example:
Question: What is 12 times 3?
Action: calculate[12*3]
Observation: 36
Action: finish[36]

"""


@sgl.function
def agent(s, question, max_steps=4):
    s += INSTRUCTIONS + "Question: " + question + "\n"
    for step in range(max_steps):
        s += "Action: " + sgl.select(f"action_{step}", ["calculate", "lookup", "finish"]) + "["
        s += sgl.gen(f"input_{step}", stop="]", max_tokens=24) + "]\n"
        action, argument = s[f"action_{step}"], s[f"input_{step}"]
        if action == "finish":
            s["answer"] = argument
            return
        s += "Observation: " + TOOLS[action](argument) + "\n"
    s["answer"] = None


def main() -> None:
    state = agent.run(question="How tall is the Eiffel Tower, in metres, times two?", temperature=0)
    print(state.text())
    print("answer:", state["answer"])


if __name__ == "__main__":
    if sgl.global_config.default_backend is not None:  # `furca run` set one
        main()
    else:
        with sgl.Engine() as engine:  # the default model, pulled on first use
            sgl.set_default_backend(engine)
            main()
