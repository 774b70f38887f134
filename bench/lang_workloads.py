"""The prompt programs `bench/lang_programs.py` runs, and each one's batch of arguments.

  few_shot           5-shot multiple choice (MMLU-style, questions generated locally), select A-D
  few_shot_branches  the same 5-shot prompt forked: one branch answers at once, one reasons first
  tree_of_thought    2 plans, each expanded into 2 steps, each step judged with select
  agent_loop         a ReAct-style loop: 3 rounds of thought (gen), action (select over tools),
                     observation (fixed text), after a long tool description with an example
  json_extraction    two extraction templates (person, place), items interleaved, each answer
                     a regex-constrained JSON object
  branching          fork 4 ideas, then each branch judges its idea with select
  multi_turn         a 4-turn chat (short answers)
"""

from __future__ import annotations

import random

import furca as sgl

SUBJECTS = ["arithmetic", "geography", "units"]
LETTERS = [" A", " B", " C", " D"]


def make_questions(num: int, seed: int = 0) -> list[dict]:
    """Deterministic MMLU-style questions: a stem, four options, the answer letter."""
    rng = random.Random(seed)
    out = []
    for i in range(num):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        right = a + b
        options = [right, right + rng.randint(1, 9), right - rng.randint(1, 9), right + 10]
        rng.shuffle(options)
        out.append({"subject": SUBJECTS[i % len(SUBJECTS)], "question": f"What is {a} + {b}?",
                    "options": [str(o) for o in options], "answer": "ABCD"[options.index(right)]})
    return out


def format_question(q: dict, with_answer: bool) -> str:
    text = q["question"] + "\n" + "".join(f"{letter}. {opt}\n" for letter, opt in zip("ABCD", q["options"]))
    return text + "Answer:" + (f" {q['answer']}\n\n" if with_answer else "")


SHOTS = make_questions(5, seed=1)
FEW_SHOT = "The following are multiple choice questions (with answers) about arithmetic.\n\n" + "".join(
    format_question(q, True) for q in SHOTS)


@sgl.function
def few_shot(s, question):
    s += FEW_SHOT + question
    s += sgl.select("answer", LETTERS)


@sgl.function
def few_shot_branches(s, question):
    s += FEW_SHOT + question
    forks = s.fork(2)
    forks[0] += sgl.select("answer", LETTERS)
    forks[1] += " (checking the sum first)" + sgl.gen("why", max_tokens=8, stop="\n") + "\nAnswer:"
    forks[1] += sgl.select("answer", LETTERS)
    forks.join()


TOT_INTRO = ("Solve the problem by exploring several plans. For each plan, write the next step, then judge "
             "whether the step is correct. Keep every plan and step to one short line.\n\n")


@sgl.function
def tree_of_thought(s, question):
    s += TOT_INTRO + "Problem: " + question + "\n"
    plans = s.fork(2)
    plans += lambda i: f"Plan {i + 1}:" + sgl.gen("plan", max_tokens=8, stop="\n") + "\n"
    for plan in plans:
        steps = plan.fork(2)
        steps += lambda j: f"Step {j + 1}:" + sgl.gen("step", max_tokens=6, stop="\n") + "\nCorrect?"
        steps += sgl.select("ok", [" yes", " no"])
        steps.join()
    plans.join()


AGENT_INTRO = (
    "Answer the question by interleaving Thought, Action and Observation steps. Thought reasons about the "
    "situation. Action is one of three tools: search (looks up a fact in an encyclopedia), calculate (evaluates "
    "an arithmetic expression) or finish (returns the answer and ends the task).\n\n"
    "Question: How tall is the tower that is twice as tall as a 150 metre tower?\n"
    "Thought 1: I need the height of the first tower.\nAction 1: search\nObservation 1: It is 150 metres.\n"
    "Thought 2: Twice that is 2 * 150.\nAction 2: calculate\nObservation 2: 300\n"
    "Thought 3: The answer is 300 metres.\nAction 3: finish\n\n")
OBSERVATIONS = ["The encyclopedia has an entry on it.", "The result is 42.", "Done."]


@sgl.function
def agent_loop(s, question):
    s += AGENT_INTRO + "Question: " + question + "\n"
    for step in range(3):
        s += f"Thought {step + 1}:" + sgl.gen(f"thought_{step}", max_tokens=10, stop="\n") + "\n"
        s += f"Action {step + 1}:" + sgl.select(f"action_{step}", [" search", " calculate", " finish"])
        s += f"\nObservation {step + 1}: {OBSERVATIONS[step]}\n"


JSON_TEMPLATES = {
    "person": ("Extract the person named in the document as a JSON object with the keys name and age. "
               "Copy the name exactly; the age is a whole number. Reply with the JSON object only.\n",
               r'\{"name": "[A-Za-z ]{1,16}", "age": [0-9]{1,2}\}'),
    "place": ("Extract the place the document is about as a JSON object with the keys city and country. "
              "Copy both names exactly as written. Reply with the JSON object only.\n",
              r'\{"city": "[A-Za-z ]{1,16}", "country": "[A-Za-z ]{1,16}"\}'),
}
NAMES = ["Ada", "Bruno", "Chiara", "Dmitri", "Eva", "Farid", "Greta", "Hiro"]
PLACES = [("Lyon", "France"), ("Porto", "Portugal"), ("Graz", "Austria"), ("Turku", "Finland")]


@sgl.function
def json_extraction(s, kind, document):
    instructions, regex = JSON_TEMPLATES[kind]
    s += instructions + "Document: " + document + "\nJSON: "
    s += sgl.gen("json", max_tokens=32, regex=regex)


@sgl.function
def branching(s, topic):
    s += "You are brainstorming. Topic: " + topic + "\n"
    forks = s.fork(4)
    forks += lambda i: f"Idea {i + 1}:" + sgl.gen("idea", max_tokens=16, stop="\n") + "\n"
    forks += "Is this idea practical? Answer:" + sgl.select("judge", [" yes", " no"])
    forks.join()


@sgl.function
def multi_turn(s, questions):
    s += sgl.system("You answer in one short sentence.")
    for q in questions:
        s += sgl.user(q)
        s += sgl.assistant(sgl.gen(max_tokens=12))


def _json_items(num: int) -> list[dict]:
    items = []
    for i in range(num):  # the two templates alternate: the batch's DFS order groups them
        if i % 2 == 0:
            name = NAMES[(i // 2) % len(NAMES)]
            items.append({"kind": "person", "document": f"{name} turned {20 + i} this spring and works as a baker."})
        else:
            city, country = PLACES[(i // 2) % len(PLACES)]
            items.append({"kind": "place", "document": f"We spent a week in {city}, {country}, visiting markets."})
    return items


def workload_args(name: str, num: int) -> list[dict]:
    if name in ("few_shot", "few_shot_branches"):
        return [{"question": format_question(q, False)} for q in make_questions(num, seed=2)]
    if name == "tree_of_thought":
        return [{"question": f"A train travels {30 + i} km in half an hour. What is its speed?"} for i in range(num)]
    if name == "agent_loop":
        return [{"question": f"What is the population of the city number {i} on the list?"} for i in range(num)]
    if name == "json_extraction":
        return _json_items(num)
    if name == "branching":
        topics = ["saving water", "quieter streets", "learning a language", "city gardens"]
        return [{"topic": topics[i % len(topics)] + f" (case {i})"} for i in range(num)]
    return [{"questions": [f"Name a {kind} (round {i})." for kind in ("fruit", "colour", "city", "animal")]}
            for i in range(num)]


PROGRAMS = {"few_shot": few_shot, "few_shot_branches": few_shot_branches, "tree_of_thought": tree_of_thought,
            "agent_loop": agent_loop, "json_extraction": json_extraction, "branching": branching,
            "multi_turn": multi_turn}

