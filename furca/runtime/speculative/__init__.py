"""Speculative decoding: drafts verified by the target model in one extend pass.

- `ngram.py`: `NgramIndex`, drafts from the longest suffix match of a request's tokens;
- `state.py`: `SpecState` (``req.spec``), the adaptive draft length and the counts;
- `rejection.py`: `verify_row`, one draft token against one row of target logits;
- `proposers.py`: `NgramProposer`, `make_proposer`; `draft_model.py`:
  `DraftModelProposer`, greedy drafts of a smaller model with its own KV pool and radix
  cache;
- `speculator.py`: `Speculator`, the scheduler's ``propose`` and the postprocessor's
  ``verify`` hooks (KV of rejected tokens rolled back).

See docs/runtime.md, "Speculative decoding".
"""

from furca.runtime.speculative.proposers import make_proposer
from furca.runtime.speculative.speculator import Speculator

__all__ = ["Speculator", "make_proposer"]
