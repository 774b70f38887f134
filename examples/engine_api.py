"""The Engine API without the language, on the default model (SmolLM2-135M-Instruct):
a chat turn, a follow-up that reuses the conversation (its prefix
comes from the radix cache), a choice scored by log-likelihood, and three samples
of one prompt that share its KV.

    .venv/bin/python examples/engine_api.py
"""

from __future__ import annotations

from furca.runtime.engine import Engine


def chat(tokenizer, messages):
    return tokenizer.apply_chat_template(messages, add_generation_prompt=True)


def main() -> None:
    with Engine() as engine:  # no model: the default model, pulled on first use
        tok = engine.tokenizer
        messages = [
            {"role": "system", "content": "You are a concise assistant."},
            {"role": "user", "content": "Name one thing a lighthouse is for."},
        ]
        first = engine.generate(chat(tok, messages), sampling_params={"max_new_tokens": 48, "temperature": 0})
        print("assistant:", first.text.strip())

        messages += [
            {"role": "assistant", "content": first.text.strip()},
            {"role": "user", "content": "Say that again in five words or fewer."},
        ]
        second = engine.generate(chat(tok, messages), sampling_params={"max_new_tokens": 24, "temperature": 0})
        print("assistant:", second.text.strip())
        print(f"  (prompt {second.meta_info['prompt_tokens']} tokens, "
              f"{second.meta_info['cached_tokens']} of them from the radix cache)")

        # select: score each continuation of one prefix; the prefix is computed once
        question = chat(tok, [{"role": "user", "content": "Is the sea salty? Answer yes or no."}])
        choices = ["Yes", "No"]
        prefix_len = len(tok.encode(question, add_special_tokens=True))
        scored = engine.generate(
            [question + c for c in choices],
            sampling_params={"max_new_tokens": 0, "return_logprob": True, "logprob_start_len": prefix_len - 1},
        )
        scores = []
        for out in scored:
            lps = [lp for lp, _, _ in out.meta_info["input_token_logprobs"] if lp is not None]
            scores.append(sum(lps) / max(1, len(lps)))
        best = max(range(len(choices)), key=scores.__getitem__)
        print("select:", choices[best], {c: round(s, 3) for c, s in zip(choices, scores)})

        # three samples of one prompt, sharing its prefill
        story = chat(tok, [{"role": "user", "content": "Give a name for a cat."}])
        samples = engine.generate(
            story, sampling_params={"max_new_tokens": 12, "temperature": 0.8, "n": 3, "seed": 7}
        )
        for i, s in enumerate(samples):
            print(f"sample {i}:", s.text.strip().replace("\n", " "))


if __name__ == "__main__":
    main()
