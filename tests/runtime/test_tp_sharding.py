"""One forward pass split over 2 and 4 ranks (furca/runtime/distributed) equals the whole
model's: every (architecture, KV heads) pair of tiny random Llama / Qwen2 / Qwen3 with 1,
2 and 4 KV heads (fewer KV heads than ranks: replicated), an odd vocabulary (the last
vocab shard padded), a prefill of two prompts and a decode step over their KV.

The ranks are spawned processes meeting over gloo on this CPU; no engine runs (the
engine-level comparison is tests/runtime/test_tensor_parallel.py). Logits within 1e-4:
the all-reduce sums the partial products in another order.
"""

from __future__ import annotations

import multiprocessing

import pytest
import torch

from furca.runtime.loader import load_model
from tests.runtime.conftest import build_tiny_hf_model

PROMPTS = [[5, 17, 42, 99, 7, 3, 250], [11, 12, 13]]
NEXT = [60, 61]


def _forward(model) -> torch.Tensor | None:
    """Prefill PROMPTS (logits at every row), then decode NEXT over their KV: the logits
    of every row of both passes (None on ranks other than 0)."""
    from furca.runtime.attention.torch_backend import TorchAttentionBackend
    from furca.runtime.forward_batch import ForwardBatch
    from furca.runtime.kv_cache import KVCache

    cfg = model.config
    kv = KVCache(64, cfg.num_hidden_layers, cfg.num_key_value_heads, cfg.head_dim, torch.float32)
    backend = TorchAttentionBackend()
    slots = [list(range(1, 1 + len(PROMPTS[0]))), list(range(20, 20 + len(PROMPTS[1])))]
    ids = sum(PROMPTS, [])
    pos = [p for prompt in PROMPTS for p in range(len(prompt))]
    prefill = ForwardBatch.build(prefix_lens=[0, 0], qo_lens=[len(p) for p in PROMPTS],
                                 kv_indices=torch.tensor(sum(slots, [])), out_cache_loc=torch.tensor(sum(slots, [])),
                                 logits_indices=torch.arange(len(ids)), kv_cache=kv, attn_backend=backend)
    first = model(torch.tensor(ids), torch.tensor(pos), prefill)
    new_slots = [40, 41]
    decode = ForwardBatch.build(prefix_lens=[len(p) for p in PROMPTS], qo_lens=[1, 1],
                                kv_indices=torch.tensor(slots[0] + [40] + slots[1] + [41]),
                                out_cache_loc=torch.tensor(new_slots), logits_indices=torch.arange(2),
                                kv_cache=kv, attn_backend=backend)
    second = model(torch.tensor(NEXT), torch.tensor([len(p) for p in PROMPTS]), decode)
    return None if first is None else torch.cat([first, second])


def _rank(rank: int, size: int, addr: str, paths: list[str], results) -> None:
    from furca.runtime.distributed import group
    from furca.runtime.distributed.sharding import TPShard

    torch.set_num_threads(1)
    group.init_groups(rank, size, addr, torch.device("cpu"))
    out = [_forward(load_model(p, dtype="float32", tp=TPShard(rank, size)).model) for p in paths]
    if rank == 0:  # as arrays, pickled by value: a tensor would travel as a shared-memory fd that
        results.put([None if t is None else t.numpy() for t in out])  # dies with this process
    group.destroy_groups()


def _sharded_logits(size: int, paths: list[str]) -> list[torch.Tensor]:
    from furca.runtime.distributed.group import free_init_address

    ctx = multiprocessing.get_context("spawn")
    results = ctx.Queue()
    addr = free_init_address()
    procs = [ctx.Process(target=_rank, args=(r, size, addr, paths, results), daemon=True) for r in range(size)]
    for p in procs:
        p.start()
    try:
        out = [None if a is None else torch.from_numpy(a) for a in results.get(timeout=300)]
    finally:
        for p in procs:
            p.join(60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    return out


@pytest.mark.parametrize("size,cases", [
    (2, [(arch, kv) for arch in ("llama", "qwen2", "qwen3") for kv in (1, 2, 4)]),
    (4, [("llama", 1), ("qwen2", 2), ("qwen3", 4)]),
])
def test_sharded_forward_equals_the_whole_model(size, cases, tmp_path, tiny_hf_tokenizer):
    paths = []
    for arch, kv in cases:
        path = tmp_path / f"{arch}-kv{kv}"
        build_tiny_hf_model(arch, len(tiny_hf_tokenizer) + 1, num_key_value_heads=kv).save_pretrained(path)
        tiny_hf_tokenizer.save_pretrained(path)
        paths.append(str(path))
    got = _sharded_logits(size, paths)
    for (arch, kv), path, logits in zip(cases, paths, got, strict=True):
        want = _forward(load_model(path, dtype="float32").model)
        assert logits.shape == want.shape == (len(sum(PROMPTS, [])) + 2, len(tiny_hf_tokenizer) + 1)
        assert (logits - want).abs().max() < 1e-4, (arch, kv)
        assert torch.equal(logits.argmax(-1), want.argmax(-1)), (arch, kv)
