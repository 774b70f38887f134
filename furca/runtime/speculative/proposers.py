"""What proposes draft tokens: `NgramProposer` (the request's own tokens) or the draft
model's `DraftModelProposer` (draft_model.py), behind one interface the `Speculator`
calls on the scheduler thread:

- ``propose([(req, k), ...]) -> [draft, ...]``: up to ``k`` tokens per request;
- ``after_verify(req, start, accepted)``: the target kept ``accepted`` of the request's
  draft tokens (positions from ``start + 1``), or dropped its draft (0);
- ``release_stale(running)``, ``check_memory(running, idle=...)``: state of requests no
  longer running is given up; the proposer's own KV accounting is checked.
"""

from __future__ import annotations

from collections.abc import Sequence

from furca.errors import ConfigError
from furca.runtime.request import Req


class NgramProposer:
    """Drafts from each request's `NgramIndex` (``req.spec.index``); holds no KV."""

    def propose(self, wants: Sequence[tuple[Req, int]]) -> list[list[int]]:
        return [req.spec.index.propose(req.origin_input_ids + req.output_ids, k) for req, k in wants]

    def after_verify(self, req: Req, start: int, accepted: int) -> None:
        pass

    def release_stale(self, running: Sequence[Req]) -> None:
        pass

    def check_memory(self, running: Sequence[Req], *, idle: bool) -> None:
        pass


def make_proposer(config, runner, context: int):
    """The proposer ``config.speculative_algorithm`` names, for the target ``runner``'s
    model (the draft model is loaded here, on the target's device)."""
    if config.speculative_algorithm == "ngram":
        return NgramProposer()
    if not config.speculative_draft_model:
        raise ConfigError("speculative_algorithm 'draft' needs speculative_draft_model (the draft model's directory)")
    from furca.runtime.engine import resolve_dtypes
    from furca.runtime.loader import load_model
    from furca.runtime.speculative.draft_model import DraftModelProposer

    device = runner.device
    dtype, linear_dtype = resolve_dtypes(config.dtype, config.linear_dtype, str(device))
    loaded = load_model(config.speculative_draft_model, device=device, dtype=dtype, linear_dtype=linear_dtype)
    backend = "torch" if config.attention_backend == "invariant" else config.attention_backend
    return DraftModelProposer(loaded, runner.capacity, config.max_running_requests, context, runner.vocab_size,
                              backend, device)
