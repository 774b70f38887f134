"""The quickstart as a prompt program, on the default model (SmolLM2-135M-Instruct):
a chat turn, a follow-up that reuses the conversation (its prefix comes from the
radix cache), a choice scored by log-likelihood, and three samples that share a
prompt through fork.

    make run        # the model's own Q4_1 GGUF: furca run examples/quickstart.py --model default-gguf
    .venv/bin/python examples/quickstart.py          # Engine(): the converted fp32 directory
    furca run examples/quickstart.py --backend http://127.0.0.1:30000   # on a server
"""

from __future__ import annotations

import furca as sgl


@sgl.function
def lighthouse(s):
    s += sgl.system("You are a concise assistant.")
    s += sgl.user("Name one thing a lighthouse is for.")
    s += sgl.assistant(sgl.gen("first", max_tokens=48))
    s += sgl.user("Say that again in five words or fewer.")
    s += sgl.assistant(sgl.gen("second", max_tokens=24))


@sgl.function
def salty(s):
    s += sgl.user("Is the sea salty? Answer yes or no.")
    s += sgl.assistant(sgl.select("answer", ["Yes", "No"]))


@sgl.function
def cat_names(s):
    s += sgl.user("Give a name for a cat.")
    forks = s.fork(3)
    forks += sgl.assistant(sgl.gen("name", max_tokens=12, temperature=0.8))
    forks.join()


def main() -> None:
    state = lighthouse.run(temperature=0)
    print("assistant:", state["first"].strip())
    print("assistant:", state["second"].strip())
    meta = state.get_meta_info("second")
    print(f"  (prompt {meta['prompt_tokens']} tokens, {meta['cached_tokens']} of them from the radix cache)")

    state = salty.run()
    scores = state.get_meta_info("answer")["normalized_prompt_logprobs"]
    print("select:", state["answer"], {c: round(x, 3) for c, x in zip(["Yes", "No"], scores)})

    for i, name in enumerate(cat_names.run()["name"]):
        print(f"sample {i}:", name.strip().replace("\n", " "))


if __name__ == "__main__":
    if sgl.global_config.default_backend is not None:  # `furca run` set one
        main()
    else:
        with sgl.Engine() as engine:  # the default model, pulled on first use
            sgl.set_default_backend(engine)
            main()
