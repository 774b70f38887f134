"""A batch job: classify many reviews with one program, on a pool of threads with a
progress bar. The few-shot prefix is the same for every item: tracing finds it and
``run_batch`` caches it once before fanning out.

    .venv/bin/python examples/batch_job.py
"""

from __future__ import annotations

import time

import furca as sgl

FEW_SHOT = """Classify the sentiment of each review as positive, negative or mixed.

Review: The battery lasts all day and the screen is gorgeous.
Sentiment: positive

Review: Stopped working after a week and support never answered.
Sentiment: negative

Review: Great sound, but the ear cushions get uncomfortable quickly.
Sentiment: mixed

"""

REVIEWS = [
    "Fast shipping and it works exactly as described.",
    "The zipper broke on the first day.",
    "Tastes fine, though far too expensive for the size.",
    "Absolutely love it, I bought a second one for my sister.",
    "It does the job, but the app keeps crashing.",
    "Terrible fit, returned it immediately.",
    "Comfortable and warm, the colour faded after washing.",
    "Setup took two minutes and it has been flawless since.",
] * 4


@sgl.function
def classify(s, review):
    s += FEW_SHOT + "Review: " + review + "\nSentiment: "
    s += sgl.select("sentiment", ["positive", "negative", "mixed"])


def main() -> None:
    start = time.perf_counter()
    states = classify.run_batch([{"review": r} for r in REVIEWS], progress_bar=True)
    elapsed = time.perf_counter() - start
    counts: dict[str, int] = {}
    for state in states:
        counts[state["sentiment"]] = counts.get(state["sentiment"], 0) + 1
    print(f"{len(states)} reviews in {elapsed:.1f} s ({len(states) / elapsed:.1f} programs/s): {counts}")
    info = sgl.get_server_info()
    if info and "cache_hit_rate" in info:
        print(f"radix cache hit rate: {info['cache_hit_rate']:.0%}")


if __name__ == "__main__":
    if sgl.global_config.default_backend is not None:  # `furca run` set one
        main()
    else:
        with sgl.Engine() as engine:  # the default model, pulled on first use
            sgl.set_default_backend(engine)
            main()
