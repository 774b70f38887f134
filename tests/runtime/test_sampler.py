import math

import pytest
import torch

from furca.runtime.logprobs import compute_logprobs
from furca.runtime.sampler import (
    SamplingBatch,
    make_generator,
    sample,
    terminating_token_ids,
)
from furca.runtime.sampling_params import SamplingParams as SP

NEG_INF = float("-inf")


def build(params, output_ids=None, generators=None, eos_ids=None, vocab_size=None, prompt_ids=None):
    n = len(params)
    return SamplingBatch.build(
        params,
        output_ids if output_ids is not None else [[] for _ in range(n)],
        generators if generators is not None else [None] * n,
        eos_ids if eos_ids is not None else [[] for _ in range(n)],
        vocab_size,
        "cpu",
        prompt_ids=prompt_ids,
    )


def draw_many(probs, params, num=2000, seed=0):
    """``num`` draws from one distribution: ``num`` identical rows sampled in one call."""
    torch.manual_seed(seed)
    logits = torch.tensor(probs, dtype=torch.float32).log().expand(num, -1).clone()
    out = sample(logits, build([params] * num, vocab_size=len(probs)))
    return torch.bincount(out.next_token_ids, minlength=len(probs)).double() / num


def test_all_greedy_fast_path():
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    b = build([SP(temperature=0), SP(top_k=1), SP(temperature=0, top_p=0.5), SP(temperature=1e-8)], vocab_size=50)
    assert b.is_all_greedy and b.sample_rows is None and not b.modifies_logits
    out = sample(logits.clone(), b)
    assert out.next_token_ids.tolist() == logits.argmax(-1).tolist()
    assert out.next_token_ids.dtype == torch.int64 and out.logprobs.dtype == torch.float32
    expected = torch.log_softmax(logits, -1).gather(1, logits.argmax(-1, keepdim=True)).squeeze(1)
    torch.testing.assert_close(out.logprobs, expected)
    assert out.top_logprobs is None and not out.is_dead_end.any()


def test_top_k_never_samples_outside_and_matches_renormalised():
    probs = [0.05, 0.3, 0.1, 0.25, 0.2, 0.1]
    freq = draw_many(probs, SP(top_k=3))
    top3 = [1, 3, 4]
    assert freq[[0, 2, 5]].sum() == 0
    expected = torch.tensor([probs[i] for i in top3], dtype=torch.float64) / 0.75
    assert torch.allclose(freq[top3], expected, atol=0.035)


def test_top_p_keeps_smallest_set_reaching_p():
    probs = [0.5, 0.3, 0.1, 0.06, 0.04]
    freq = draw_many(probs, SP(top_p=0.75))
    assert freq[2:].sum() == 0
    assert abs(freq[0] - 0.625) < 0.035
    freq = draw_many(probs, SP(top_p=0.85))
    assert freq[3:].sum() == 0 and freq[2] > 0
    assert abs(freq[2] - 0.1 / 0.9) < 0.03


def test_top_k_then_top_p_is_renormalised_after_top_k():
    # top-k=2 leaves [0.4, 0.35] -> renormalised [0.533, 0.467]; top_p=0.5 then keeps token 0 only.
    # Without renormalisation (SGLang's torch path) token 1 would survive (mass before = 0.4 < 0.5).
    freq = draw_many([0.4, 0.35, 0.25], SP(top_k=2, top_p=0.5))
    assert freq[0] == 1.0


def test_min_p_drops_tokens_below_fraction_of_top():
    probs = [0.5, 0.2, 0.15, 0.1, 0.05]
    freq = draw_many(probs, SP(min_p=0.25))  # threshold 0.125
    assert freq[3:].sum() == 0
    assert torch.allclose(freq[:3], torch.tensor([0.5, 0.2, 0.15], dtype=torch.float64) / 0.85, atol=0.035)


def test_temperature_scales_distribution():
    probs = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
    freq = draw_many(probs.tolist(), SP(temperature=2.0))
    expected = probs.sqrt() / probs.sqrt().sum()
    assert torch.allclose(freq, expected, atol=0.035)
    freq = draw_many(probs.tolist(), SP())  # plain sampling keeps the distribution
    assert torch.allclose(freq, probs, atol=0.035)


def test_penalties_match_hand_computation():
    logits = torch.tensor([[2.0, -1.0, 0.5, 1.0, 3.0]])
    p = SP(temperature=0, repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    b = build([p], output_ids=[[1, 1, 2]], prompt_ids=[[0, 4]], vocab_size=5)
    out = sample(logits, b)  # logits are modified in place: they show the penalised values
    # repetition (prompt+output: 0,1,2,4): 2/2, -1*2, 0.5/2, 1 (unseen), 3/2
    # frequency/presence (output only: 1 twice, 2 once): -1.0-0.25 on 1, -0.5-0.25 on 2
    expected = torch.tensor([[1.0, -3.25, -0.5, 1.0, 1.5]])
    torch.testing.assert_close(logits, expected)
    assert out.next_token_ids.item() == 4
    # logprobs come from the raw logits, not the penalised ones
    raw = torch.tensor([2.0, -1.0, 0.5, 1.0, 3.0])
    assert math.isclose(out.logprobs.item(), torch.log_softmax(raw, -1)[4].item(), rel_tol=1e-6)


def test_penalties_only_touch_their_rows_and_flip_greedy_choice():
    logits = torch.tensor([[1.0, 0.9], [1.0, 0.9]])
    b = build([SP(temperature=0, presence_penalty=0.5), SP(temperature=0)], output_ids=[[0], [0]], vocab_size=2)
    out = sample(logits, b)
    assert out.next_token_ids.tolist() == [1, 0]
    assert logits[1].tolist() == [1.0, pytest.approx(0.9)]


def test_repetition_penalty_requires_prompt_ids_and_ignores_out_of_vocab_ids():
    with pytest.raises(ValueError, match="prompt_ids"):
        build([SP(repetition_penalty=1.2)], vocab_size=4)
    logits = torch.tensor([[1.0, 1.0, 1.0, 1.0]])
    b = build([SP(temperature=0, repetition_penalty=2.0)], output_ids=[[99, 3]], prompt_ids=[[-1, 7]], vocab_size=4)
    sample(logits, b)
    assert logits.tolist() == [[1.0, 1.0, 1.0, 0.5]]


def test_min_new_tokens_blocks_eos_and_stop_ids_then_allows_them():
    eos = 0
    p = SP(temperature=0, min_new_tokens=2, stop_token_ids=[3])
    ids = list(terminating_token_ids(p, [eos]))
    assert sorted(ids) == [0, 3]
    logits = torch.tensor([[5.0, 1.0, 0.0, 4.0]])
    out = sample(logits.clone(), build([p], output_ids=[[1]], eos_ids=[ids], vocab_size=4))
    assert out.next_token_ids.item() == 1  # EOS and the stop id are blocked
    out = sample(logits.clone(), build([p], output_ids=[[1, 1]], eos_ids=[ids], vocab_size=4))
    assert out.next_token_ids.item() == eos
    assert terminating_token_ids(SP(ignore_eos=True, stop_token_ids=[3]), [eos]) == (3,)


def test_dead_end_rows_do_not_crash():
    logits = torch.tensor([[NEG_INF] * 4, [NEG_INF, NEG_INF, 2.0, NEG_INF], [0.0, 1.0, 2.0, 3.0]])
    params = [SP(), SP(min_new_tokens=5), SP(temperature=0)]
    b = build(params, output_ids=[[], [], []], eos_ids=[[2], [2], [2]], vocab_size=4)
    out = sample(logits, b)
    assert out.is_dead_end.tolist() == [True, True, False]
    # row 0: constraint allowed nothing -> token 0, logprob -inf; row 1: only the blocked EOS
    # was allowed -> the model's allowed token (the EOS) is returned, logprob 0
    assert out.next_token_ids.tolist() == [0, 2, 3]
    assert out.logprobs[0].item() == NEG_INF and out.logprobs[1].item() == 0.0
    assert not torch.isnan(out.logprobs).any()


def test_constraint_mask_respected_when_sampling():
    torch.manual_seed(1)
    logits = torch.zeros(500, 10)
    logits[:, 5:] = NEG_INF
    out = sample(logits, build([SP(temperature=1.5)] * 500, vocab_size=10))
    assert out.next_token_ids.max().item() < 5 and len(set(out.next_token_ids.tolist())) == 5


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


def _run_seeded(position, others, target=None, steps=15, seed=1234, vocab=64, device="cpu"):
    """Decode ``steps`` tokens for a seeded request placed at ``position`` among ``others``."""
    torch.manual_seed(99 + position)  # unseeded neighbours consume the global generator
    target = (target or SP(temperature=0.9, top_p=0.95)).replace(seed=seed)
    params = list(others)
    params.insert(position, target)
    gens = [make_generator(p.seed, device) if i == position else None for i, p in enumerate(params)]
    base = torch.randn(vocab, generator=torch.Generator().manual_seed(5))
    out_ids, tokens = [[] for _ in params], []
    for step in range(steps):
        logits = torch.stack([base.roll(step) + 0.1 * i for i in range(len(params))])
        logits[position] = base.roll(step)
        b = SamplingBatch.build(params, out_ids, gens, [[] for _ in params], vocab, device)
        ids = sample(logits.to(device), b).next_token_ids.tolist()
        for o, t in zip(out_ids, ids):
            o.append(t)
        tokens.append(ids[position])
    return tokens


@pytest.mark.parametrize("device", DEVICES)
def test_seed_reproducible_regardless_of_batch_composition(device):
    alone = _run_seeded(0, [], device=device)
    mixed = [SP(temperature=0), SP(top_k=5), SP(min_p=0.2, seed=7), SP()]
    assert _run_seeded(3, mixed, device=device) == alone
    assert _run_seeded(1, mixed[:2], device=device) == alone
    assert _run_seeded(0, [SP(), SP()], seed=4321, device=device) != alone
    # a top-k row: alone (topk fast path) and beside a top-p-only row (full sort path)
    target = SP(temperature=1.3, top_k=20, top_p=0.9)
    assert _run_seeded(0, [], target, device=device) == _run_seeded(1, [SP(top_p=0.5)], target, device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_mixed_batch_on_device(device):
    torch.manual_seed(0)
    logits = torch.randn(6, 1000)
    logits[5] = float("-inf")
    params = [SP(temperature=0), SP(top_k=3), SP(top_p=0.5, seed=1), SP(min_p=0.5, presence_penalty=1.0),
              SP(repetition_penalty=1.5, min_new_tokens=4, top_logprobs_num=3), SP()]
    b = SamplingBatch.build(params, [[1, 2]] * 6, [make_generator(p.seed, device) for p in params],
                            [[0]] * 6, 1000, device, prompt_ids=[[3]] * 6)
    out = sample(logits.to(device), b)
    assert out.next_token_ids.device.type == device and out.next_token_ids.shape == (6,)
    ids = out.next_token_ids.cpu()
    assert ids[0] == logits[0].argmax() and ids[1] in logits[1].topk(3).indices and ids[4] != 0
    assert out.is_dead_end.cpu().tolist() == [False] * 5 + [True] and len(out.top_logprobs[4]) == 3


def test_top_logprobs_and_compute_logprobs():
    logits = torch.tensor([[1.0, 3.0, 2.0, 0.0], [0.0, 0.0, 0.0, 5.0]])
    params = [SP(temperature=0, top_logprobs_num=2), SP(temperature=0)]
    out = sample(logits.clone(), build(params, vocab_size=4))
    ls = torch.log_softmax(logits, -1)
    assert out.top_logprobs[1] == []
    (lp0, id0), (lp1, id1) = out.top_logprobs[0]
    assert (id0, id1) == (1, 2) and lp0 == pytest.approx(ls[0, 1].item()) and lp1 == pytest.approx(ls[0, 2].item())
    chosen, top = compute_logprobs(logits, torch.tensor([0, 3]), [0, 3])
    torch.testing.assert_close(chosen, ls[[0, 1], [0, 3]])
    assert top[0] == [] and [t for _, t in top[1]][0] == 3 and len(top[1]) == 3
    chosen, top = compute_logprobs(torch.full((1, 3), NEG_INF), torch.tensor([1]), [0])
    assert chosen.item() == NEG_INF and top is None


def test_logprobs_of_sampled_rows_use_raw_logits():
    torch.manual_seed(3)
    logits = torch.randn(8, 30)
    out = sample(logits.clone(), build([SP(temperature=0.3, top_k=4)] * 8, vocab_size=30))
    expected = torch.log_softmax(logits, -1).gather(1, out.next_token_ids[:, None]).squeeze(1)
    torch.testing.assert_close(out.logprobs, expected)


def test_empty_batch():
    out = sample(torch.zeros(0, 7), build([], vocab_size=7))
    assert out.next_token_ids.shape == (0,) and out.top_logprobs is None


def test_logits_shape_checked():
    with pytest.raises(ValueError, match="B=2"):
        sample(torch.zeros(3, 5), build([SP(), SP()], vocab_size=5))


# -- logit_bias -----------------------------------------------------------------------------


def test_logit_bias_added_after_penalties_logprobs_stay_raw():
    logits = torch.tensor([[2.0, -1.0, 0.5, 1.0, 3.0]])
    p = SP(temperature=0, frequency_penalty=0.5, logit_bias={"1": 5, 3: -2})
    b = build([p], output_ids=[[1]], vocab_size=5)
    assert b.modifies_logits
    out = sample(logits, b)
    # token 1: -1 - 0.5 (frequency) + 5 = 3.5 beats token 4 (3.0); token 3: 1 - 2
    torch.testing.assert_close(logits, torch.tensor([[2.0, 3.5, 0.5, -1.0, 3.0]]))
    assert out.next_token_ids.item() == 1
    raw = torch.tensor([2.0, -1.0, 0.5, 1.0, 3.0])
    assert math.isclose(out.logprobs.item(), torch.log_softmax(raw, -1)[1].item(), rel_tol=1e-6)


def test_logit_bias_plus_100_forces_minus_100_bans_per_row():
    torch.manual_seed(0)
    logits = torch.randn(3, 40) * 5
    low = int(logits[0].argmin())
    top = int(logits[1].argmax())
    params = [SP(temperature=0, logit_bias={low: 100}), SP(temperature=0, logit_bias={top: -100}), SP(temperature=0)]
    out = sample(logits.clone(), build(params, vocab_size=40))
    assert out.next_token_ids[0].item() == low
    assert out.next_token_ids[1].item() != top and out.next_token_ids[1].item() == int(logits[1].topk(2).indices[1])
    assert out.next_token_ids[2].item() == int(logits[2].argmax())  # an unbiased row is untouched
    # sampled rows too: +100 wins every draw, -100 never drawn (top-k and top-p on)
    logits = torch.zeros(500, 10)
    params = ([SP(temperature=1.0, top_k=5, logit_bias={7: 100})] * 250
              + [SP(temperature=1.5, top_p=0.9, logit_bias={3: -100})] * 250)
    ids = sample(logits, build(params, vocab_size=10)).next_token_ids
    assert set(ids[:250].tolist()) == {7} and 3 not in ids[250:].tolist() and len(set(ids[250:].tolist())) > 5


def test_logit_bias_never_unmasks_a_constrained_token():
    torch.manual_seed(2)
    logits = torch.zeros(400, 8)
    logits[:, 4:] = NEG_INF  # the grammar mask allows 0..3
    p = [SP(temperature=0, logit_bias={6: 100})] * 200 + [SP(temperature=1.0, logit_bias={5: 100, 1: -100})] * 200
    out = sample(logits, build(p, vocab_size=8))
    ids = out.next_token_ids.tolist()
    assert max(ids) < 4 and not out.is_dead_end.any()
    assert set(ids[200:]) == {0, 2, 3}  # 1 is banned by the bias, 4.. by the mask


def test_logit_bias_ids_beyond_the_logits_width_are_ignored():
    logits = torch.tensor([[1.0, 2.0, 0.0]])
    out = sample(logits, build([SP(temperature=0, logit_bias={2: 5.0, 9: 100})], vocab_size=3))
    assert out.next_token_ids.item() == 2


@pytest.mark.parametrize("device", DEVICES)
def test_logit_bias_on_device_with_penalties_and_mask(device):
    logits = torch.tensor([[0.0, 1.0, 2.0, NEG_INF], [3.0, 2.0, 1.0, 0.0]], device=device)
    params = [SP(temperature=0, presence_penalty=1.0, logit_bias={0: 2.5, 3: 100}),
              SP(temperature=0.7, seed=5, top_k=2, logit_bias={"3": 100})]
    b = SamplingBatch.build(params, [[2], []], [None, make_generator(5, device)], [[], []], 4, device)
    out = sample(logits, b)
    # row 0: 2 loses 1 to the presence penalty, 0 gains 2.5 and wins; 3 is masked (-inf stays)
    assert out.next_token_ids.tolist() == [0, 3] and not out.is_dead_end.any()
    assert logits[0, 3].item() == NEG_INF


def test_requested_logprobs_only_is_the_same_sampling_with_logprobs_of_the_asking_rows():
    # a constrained greedy batch: most of each row masked, one row with nothing allowed,
    # one blocked by min_new_tokens (a dead end with finite raw logits), some rows asking
    gen = torch.Generator().manual_seed(3)
    logits = torch.randn(6, 300, generator=gen)
    allowed = torch.rand(6, 300, generator=gen) < 0.05
    allowed[5, :] = False
    allowed[4, :] = False
    allowed[4, 7] = True
    logits = logits.masked_fill(~allowed, NEG_INF)
    params = [SP(temperature=0.0, return_logprob=i in (1, 4), top_logprobs_num=3 if i == 1 else 0,
                 min_new_tokens=2 if i == 4 else 0) for i in range(5)] + [SP(temperature=0.0)]
    args = dict(output_ids=[[] for _ in params], generators=[None] * 6, eos_ids=[[], [], [], [], [7], []],
                vocab_size=300, device="cpu")
    full = sample(logits.clone(), SamplingBatch.build(params, **args))
    part_batch = SamplingBatch.build(params, **args, requested_logprobs_only=True)
    assert part_batch.logprob_rows == [1, 4]
    part = sample(logits.clone(), part_batch)
    assert torch.equal(full.next_token_ids, part.next_token_ids)
    assert torch.equal(full.is_dead_end, part.is_dead_end)
    assert part.is_dead_end.tolist() == [False, False, False, False, True, True]
    assert torch.equal(part.logprobs[[1, 4]], full.logprobs[[1, 4]])
    assert part.top_logprobs[1] == full.top_logprobs[1] and part.top_logprobs[0] == []
    assert math.isinf(part.logprobs[5]) and part.logprobs[5] < 0  # nothing allowed: -inf, as with logprobs
    assert all(math.isnan(part.logprobs[i]) for i in (0, 2, 3))
    none = SamplingBatch.build([SP(temperature=0.0)] * 2, [[], []], [None, None], [[], []], 300, "cpu",
                               requested_logprobs_only=True)
    out = sample(logits[:2].clone(), none)
    assert out.top_logprobs is None and torch.equal(out.next_token_ids, full.next_token_ids[:2])


def test_argmax_rows_is_torch_argmax():
    from furca.runtime.sampler import argmax_rows

    gen = torch.Generator().manual_seed(5)
    x = torch.randint(-3, 3, (8, 70), generator=gen).float()  # many ties: the first maximum wins
    x[1] = NEG_INF  # nothing allowed
    x[2, ::3] = NEG_INF
    x[3, 40] = float("nan")  # NaN counts as the maximum, as in torch
    x[4, :] = float("inf")
    for t in (x, x[:, 5:], x.t().contiguous().t(), x[::2]):  # strided views too
        got = argmax_rows(t)
        assert got.dtype == torch.int64 and torch.equal(got, t.argmax(dim=-1)), t.stride()
    assert torch.equal(argmax_rows(x.double()), x.double().argmax(dim=-1))  # other dtypes: torch's
