import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from furca.runtime.detokenizer import IncrementalDetokenizer, OutputTextState, StopChecker
from furca.runtime.output import finish_abort, finish_length
from furca.runtime.sampling_params import SamplingParams as SP

CORPUS = [
    "héllo wörld 日本語 🙂 stop here",
    "the quick brown fox jumps over the lazy dog",
    "naïve café Größe 東京 😀🙂 hello world, hello there",
] * 20
TEXTS = [
    "héllo wörld 日本語 🙂 東京",
    "the quick brown fox. STOP now 😀 Größe",
    "🙂🙂🙂 naïve 日本 café",
    "plain ascii text only",
]
EOS, PAD = 0, 1


@pytest.fixture(scope="module")
def tok():
    """A small byte-level BPE: multi-byte characters really are split across tokens."""
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    t.decoder = decoders.ByteLevel()
    t.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(vocab_size=300, special_tokens=["<eos>", "<pad>"],
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()),
    )
    ids = t.encode(TEXTS[0]).ids
    assert any("\ufffd" in t.decode([i]) for i in ids), "corpus too easy: no split characters"
    return t


class CountingTokenizer:
    """Wraps a tokenizer; records how many ids each decode call saw."""

    def __init__(self, tok):
        self.tok, self.sizes = tok, []

    def decode(self, ids, skip_special_tokens=True):
        self.sizes.append(len(ids))
        return self.tok.decode(ids, skip_special_tokens=skip_special_tokens)


def stream(det, ids):
    deltas = [det.add(i) for i in ids]
    return deltas, det.flush()


@pytest.mark.parametrize("text", TEXTS)
def test_deltas_concatenate_to_full_decode_and_never_split_chars(tok, text):
    ids = tok.encode(text).ids
    deltas, rest = stream(IncrementalDetokenizer(tok), ids)
    assert not any("\ufffd" in d for d in deltas)
    assert "".join(deltas) + rest == tok.decode(ids) == text
    assert rest == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 299), max_size=40), st.booleans())
def test_random_ids_concatenation_matches_decode(tok, ids, skip):
    det = IncrementalDetokenizer(tok, skip_special_tokens=skip)
    deltas, rest = stream(det, ids)
    assert not any(d.endswith("\ufffd") for d in deltas)
    assert "".join(deltas) + rest == tok.decode(ids, skip_special_tokens=skip)


def test_prompt_context_gives_continuation(tok):
    prompt = tok.encode("héllo wörld 日本語").ids
    out = tok.encode(" 🙂 東京 café").ids
    deltas, rest = stream(IncrementalDetokenizer(tok, prompt), out)
    full = tok.decode(prompt + out)
    assert "".join(deltas) + rest == full[len(tok.decode(prompt)):] == " 🙂 東京 café"


def test_work_per_token_is_bounded(tok):
    counting = CountingTokenizer(tok)
    ids = tok.encode(" ".join(TEXTS) * 5).ids
    deltas, rest = stream(IncrementalDetokenizer(counting, tok.encode("héllo").ids), ids)
    assert "".join(deltas) + rest == tok.decode(ids)
    assert max(counting.sizes) <= 12  # a window, not the whole output


def test_skip_special_tokens_and_hf_wrapper(tok):
    from transformers import PreTrainedTokenizerFast

    hf = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    ids = tok.encode("日本 ").ids + [EOS] + tok.encode("café").ids
    for skip in (True, False):
        deltas, rest = stream(IncrementalDetokenizer(hf, skip_special_tokens=skip,
                                                     spaces_between_special_tokens=False), ids)
        assert "".join(deltas) + rest == hf.decode(ids, skip_special_tokens=skip)
    assert "<eos>" not in hf.decode(ids, skip_special_tokens=True)


def test_flush_returns_trailing_partial_character(tok):
    ids = tok.encode("日").ids
    assert len(ids) > 1
    det = IncrementalDetokenizer(tok)
    assert [det.add(i) for i in ids[:-1]] == [""] * (len(ids) - 1)
    assert det.flush() == tok.decode(ids[:-1]) and det.flush() == ""


# -- stop checking -------------------------------------------------------------------------


def run_state(tok, text, params, extra_ids=(), eos_ids=(EOS,)):
    state = OutputTextState(tok, params, eos_ids=eos_ids)
    deltas, finished = [], None
    for i in tok.encode(text).ids + list(extra_ids):
        delta, finished = state.append(i)
        deltas.append(delta)
        if finished:
            break
    return state, deltas, finished


def test_stop_string_across_tokens_is_trimmed_and_never_streamed(tok):
    text = "the quick brown fox. STOP now 😀"
    stop = "own fox."
    state, deltas, finished = run_state(tok, text, SP(stop=["zzz", stop]))
    assert finished == {"type": "stop", "matched": stop}
    assert state.text == "the quick br" == "".join(deltas)
    streamed = ""
    for d in deltas:  # at no point did the client see a piece of the stop string
        streamed += d
        assert not any(streamed.endswith(stop[:k]) for k in range(1, len(stop)))


def test_hold_back_released_when_not_a_stop(tok):
    state = OutputTextState(tok, SP(stop=["hello thx"]), eos_ids=[EOS])
    streamed = "".join(state.append(i)[0] for i in tok.encode("hello world, hello th").ids)
    assert streamed == "hello world, "  # "hello th" may still become "hello thx": held back
    for i in tok.encode("ere").ids:
        delta, finished = state.append(i)
        streamed += delta
    assert finished is None and streamed == "hello world, hello there"  # released
    assert state.finish(finish_length(6)) == ""
    assert state.finish_reason == {"type": "length", "length": 6} and state.text == streamed


def test_finish_releases_held_text(tok):
    state, deltas, finished = run_state(tok, "hello world, hello", SP(stop=["hello thx"]))
    assert finished is None and "".join(deltas) == "hello world, "
    assert state.finish(finish_length(5)) == "hello"


def test_stop_string_with_multibyte_chars_and_no_stop_trim(tok):
    text = "héllo wörld 日本語 🙂"
    state, deltas, finished = run_state(tok, text, SP(stop="本語"))
    assert finished["matched"] == "本語" and state.text == "".join(deltas) == "héllo wörld 日"
    state, deltas, finished = run_state(tok, text, SP(stop="本語", no_stop_trim=True))
    assert state.text == "".join(deltas) == "héllo wörld 日本語"


def test_earliest_stop_string_wins(tok):
    state, _, finished = run_state(tok, "the quick brown fox jumps", SP(stop=["fox", "quick"]))
    assert finished["matched"] == "quick" and state.text == "the "


def test_stop_token_and_eos(tok):
    body = tok.encode("café").ids
    state, deltas, finished = run_state(tok, "café", SP(skip_special_tokens=False), extra_ids=[EOS] + body)
    assert finished == {"type": "stop", "matched": EOS}
    assert state.text == "café" == "".join(deltas) and state.num_tokens == len(body) + 1
    state, _, finished = run_state(tok, "café", SP(skip_special_tokens=False, no_stop_trim=True), [EOS])
    assert state.text == "café<eos>"
    state, _, finished = run_state(tok, "café", SP(stop_token_ids=[PAD]), extra_ids=[PAD])
    assert finished == {"type": "stop", "matched": PAD}


def test_ignore_eos_keeps_going_but_stop_token_ids_still_stop(tok):
    state, _, finished = run_state(tok, "café", SP(ignore_eos=True, stop_token_ids=[PAD]), [EOS, 50, PAD, 51])
    assert finished == {"type": "stop", "matched": PAD}
    assert state.num_tokens == len(tok.encode("café").ids) + 3


def test_min_new_tokens_delays_stops(tok):
    state = OutputTextState(tok, SP(min_new_tokens=2, stop="x"), eos_ids=[EOS])
    assert state.append(EOS) == ("", None)  # token 1 < min: EOS does not stop
    x = tok.encode("x").ids[0]
    assert state.append(x) == ("", {"type": "stop", "matched": "x"})  # 2 tokens out: strings count
    state = OutputTextState(tok, SP(min_new_tokens=2), eos_ids=[EOS])
    assert state.append(x)[1] is None and state.append(EOS)[1] is None  # EOS as token 2: still early
    assert state.append(EOS)[1] == {"type": "stop", "matched": EOS}


def test_finish_and_misuse(tok):
    state = OutputTextState(tok, SP(), eos_ids=[EOS])
    ids = tok.encode("日").ids
    assert state.append(ids[0]) == ("", None)
    assert state.finish(finish_abort("client gone")) == tok.decode(ids[:1])
    assert state.finish(finish_length(1)) == "" and state.finish_reason["type"] == "abort"
    with pytest.raises(RuntimeError):
        state.append(ids[1])


def test_stop_checker_helpers():
    c = StopChecker(stop=("abc", "b"), stop_token_ids=[7], eos_ids=[2], ignore_eos=True, min_new_tokens=1)
    assert c.check_token(2, 5) is None and c.check_token(7, 1) is None
    assert c.check_token(7, 2) == {"type": "stop", "matched": 7}
    assert c.find_stop_string("xxabcb", 0) == (2, "abc") and c.find_stop_string("xxabcb", 3) == (3, "b")
    assert c.holdback_len("zzab", 0) == 2 and c.holdback_len("zzab", 3) == 0 and c.holdback_len("zza", 2) == 1 and c.holdback_len("zz", 0) == 0


@settings(max_examples=100, deadline=None)
@given(
    st.text(alphabet="ab日🙂 é", max_size=30),
    st.lists(st.text(alphabet="ab日🙂 é", min_size=1, max_size=4), max_size=3),
)
def test_stop_strings_property(tok, text, stops):
    state = OutputTextState(tok, SP(stop=stops), eos_ids=[EOS])
    streamed, finished = "", None
    for i in tok.encode(text).ids:
        delta, finished = state.append(i)
        streamed += delta
        # nothing streamed so far contains a stop string, or ends in the start of one
        assert not any(s in streamed for s in stops)
        if finished:
            break
    if finished is None:
        streamed += state.finish(finish_length(state.num_tokens))
        assert state.text == text
    else:
        assert text.startswith(state.text + finished["matched"])
    assert streamed == state.text and not any(s in state.text for s in stops)


# -- stop_regex ----------------------------------------------------------------------------


def assert_never_streamed(deltas, final_text):
    """Every prefix the client saw is a prefix of the final text (nothing taken back)."""
    streamed = ""
    for d in deltas:
        streamed += d
        assert final_text.startswith(streamed), (streamed, final_text)
    assert streamed == final_text


def test_stop_regex_across_tokens_is_trimmed_and_never_streamed(tok):
    text = "the quick brown fox. STOP now 😀"
    state, deltas, finished = run_state(tok, text, SP(stop_regex=[r"zz+", r"b\w+n f[aeiou]x"]))
    assert finished == {"type": "stop", "matched": r"b\w+n f[aeiou]x"}
    assert state.text == "the quick " == "".join(deltas)
    assert_never_streamed(deltas, state.text)
    state, deltas, _ = run_state(tok, text, SP(stop_regex=r"b\w+n f[aeiou]x", no_stop_trim=True))
    assert state.text == "the quick brown fox" == "".join(deltas)


def test_stop_regex_holds_back_only_what_could_still_match(tok):
    state = OutputTextState(tok, SP(stop_regex=r"hello t\w*x"), eos_ids=[EOS])
    streamed = "".join(state.append(i)[0] for i in tok.encode("hello world, hello th").ids)
    assert streamed == "hello world, "  # "hello th" may still become "hello thx"
    for i in tok.encode("ere").ids:
        streamed += state.append(i)[0]
    assert streamed == "hello world, "  # "hello there" too (\w* then x)
    for i in tok.encode(" now").ids:
        delta, finished = state.append(i)
        streamed += delta
    assert finished is None and streamed == "hello world, hello there now"  # resolved: released
    assert state.finish(finish_length(9)) == ""


def test_stop_regex_finish_releases_held_text_and_multibyte(tok):
    state, deltas, finished = run_state(tok, "héllo wörld 日本", SP(stop_regex="日本語"))
    assert finished is None and "".join(deltas) == "héllo wörld "
    assert state.finish(finish_length(5)) == "日本" and state.text == "héllo wörld 日本"
    state, deltas, finished = run_state(tok, "héllo wörld 日本語 🙂", SP(stop_regex=r"[日本]+語"))
    assert finished["matched"] == r"[日本]+語" and state.text == "".join(deltas) == "héllo wörld "


def test_stop_regex_earliest_of_strings_and_patterns_wins(tok):
    text = "the quick brown fox jumps"
    state, _, finished = run_state(tok, text, SP(stop="fox", stop_regex=r"q\w+k"))
    assert finished == {"type": "stop", "matched": r"q\w+k"} and state.text == "the "
    state, _, finished = run_state(tok, text, SP(stop="quick", stop_regex=r"b.own"))
    assert finished == {"type": "stop", "matched": "quick"} and state.text == "the "
    # a pattern matching later text does not move the cut of one that matched first
    state, _, finished = run_state(tok, text, SP(stop_regex=[r"j\w+s", r"o"]))
    assert finished["matched"] == "o" and state.text == "the quick br"


def test_stop_regex_is_searched_step_by_step(tok):
    # re.search at every step: a greedy pattern stops at its first (shortest) possible match
    ids = [tok.encode(c).ids[0] for c in "ab12345"]
    state = OutputTextState(tok, SP(stop_regex=r"\d+", no_stop_trim=True), eos_ids=[EOS])
    results = [state.append(i) for i in ids[:3]]
    assert results[-1][1] == {"type": "stop", "matched": r"\d+"} and state.text == "ab1"
    # anchors see the text as it is now: "$" is the end of the output so far
    state = OutputTextState(tok, SP(stop_regex=r"b$"), eos_ids=[EOS])
    assert state.append(ids[0]) == ("a", None)
    assert state.append(ids[1]) == ("", {"type": "stop", "matched": "b$"}) and state.text == "a"


def test_stop_regex_and_min_new_tokens(tok):
    ids = [tok.encode(c).ids[0] for c in "xaxbx"]
    state = OutputTextState(tok, SP(min_new_tokens=3, stop_regex="x"), eos_ids=[EOS])
    assert [state.append(i) for i in ids[:2]] == [("x", None), ("a", None)]  # early: no stop, no hold
    delta, finished = state.append(ids[2])  # 3 tokens out: the x it brings stops; earlier ones never count
    assert finished == {"type": "stop", "matched": "x"} and state.text == "xa" and delta == ""
    # a match that begins in text streamed before min_new_tokens does not count
    state = OutputTextState(tok, SP(min_new_tokens=2, stop_regex="ab"), eos_ids=[EOS])
    assert state.append(ids[1])[1] is None  # "a" (1 token)
    assert state.append(ids[3])[1] is None  # "ab": begins in streamed text
    assert state.text == "ab"


def test_stop_regex_inside_jump_forward_text(tok):
    state = OutputTextState(tok, SP(stop_regex=r"STOP\d"), eos_ids=[EOS])
    for i in tok.encode("the quick ").ids:
        state.append(i)
    ctx = tok.encode("the quick ").ids
    delta, finished = state.append_forced("brown ST", 3, ctx)
    assert finished is None and delta == "brown "  # "ST" may begin the match: held back
    delta, finished = state.append_forced("OP7 and more", 4, ctx)
    assert finished == {"type": "stop", "matched": r"STOP\d"} and delta == ""
    assert state.text == "the quick brown "


def test_stop_regex_pathological_pattern_aborts_only_the_request(tok):
    a = tok.encode("a").ids[0]
    assert tok.decode([a]) == "a"
    state = OutputTextState(tok, SP(stop_regex=[r"q", r"(a|a)+b"]), eos_ids=[EOS])
    finished = None
    for n in range(1, 200):
        delta, finished = state.append(a)
        if finished:
            break
    assert finished["type"] == "abort" and "(a|a)+b" in finished["message"], finished
    assert "simplify the pattern" in finished["message"] or "budget" in finished["message"]
    assert state.text == "a" * n and state.is_finished


def test_stop_regex_total_budget_per_request(tok, monkeypatch):
    import furca.runtime.stop_regex as stop_regex

    state = OutputTextState(tok, SP(stop_regex=r"zq"), eos_ids=[EOS])
    assert state.append(tok.encode("a").ids[0]) == ("a", None)
    assert state.checker.regex.seconds > 0  # spent some (under STEP_TIMEOUT: the append did not abort)
    monkeypatch.setattr(stop_regex, "TOTAL_TIMEOUT", state.checker.regex.seconds)  # spent
    delta, finished = state.append(tok.encode("b").ids[0])
    assert finished["type"] == "abort" and "the request's" in finished["message"] and "'zq'" in finished["message"]
    assert state.text == "ab" and delta == "b"


def test_stop_checker_regex_helper():
    c = StopChecker(stop_regex=[r"\d{2}"], min_new_tokens=2)
    assert c.regex is not None and not c.can_stop_on_string(1) and c.can_stop_on_string(2)
    m, could_begin = c.regex.search("ab1")
    assert m is None and could_begin == 2
    m, could_begin = c.regex.search("ab12c")
    assert (m.start, m.end, m.pattern) == (2, 4, r"\d{2}")
    assert StopChecker().regex is None


PATTERNS = [r"b+日", r"日🙂", r"a\s", r"é+b", r"(ab|ba)", r"🙂{2}", r"[ab]日", r"🙂 é"]


@settings(max_examples=100, deadline=None)
@given(st.text(alphabet="ab日🙂 é", max_size=30), st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=3),
       st.booleans())
def test_stop_regex_property_matches_re_search_at_each_step(tok, text, patterns, trim):
    import re

    ids = tok.encode(text).ids
    det, seen, expected = IncrementalDetokenizer(tok), "", None  # reference: re.search after each token
    for i in ids:
        seen += det.add(i)
        found = [m for m in (re.search(p, seen) for p in patterns) if m]
        if found:
            m = min(found, key=lambda m: (m.start(), -m.end()))
            expected = seen[:m.start()] if trim else seen[:m.end()]
            break
    state = OutputTextState(tok, SP(stop_regex=patterns, no_stop_trim=not trim), eos_ids=[EOS])
    deltas, finished = [], None
    for i in ids:
        delta, finished = state.append(i)
        deltas.append(delta)
        if finished:
            break
    if finished is None:
        deltas.append(state.finish(finish_length(state.num_tokens)))
        assert expected is None and state.text == text
    else:
        assert finished["matched"] in patterns and state.text == expected
    assert_never_streamed(deltas, state.text)
