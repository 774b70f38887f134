"""Per-request speculative state (``req.spec``): the n-gram index, the adaptive draft
length, and the counts ``meta_info`` reports.

Adaptive draft length: a request drafts at most ``length`` tokens (``1 <= length <=
max_length``, starting at ``max_length``). A verification that accepts the whole draft
grows it by one; one that rejects part of it sets it to the accepted count + 1. A round
that accepts nothing also starts a cooldown: the request's next ``cooldown`` decode steps
draft nothing (1, 2, 4, ... steps after consecutive fruitless rounds, at most
``MAX_COOLDOWN``), so a request whose text does not repeat itself (open chat) soon
decodes one token per step, as without speculation, and tries again now and then.
"""

from __future__ import annotations

from dataclasses import dataclass

from furca.runtime.speculative.ngram import NgramIndex

MAX_COOLDOWN = 32


@dataclass(eq=False)
class SpecState:
    index: NgramIndex | None  # n-gram drafting only
    max_length: int
    length: int = 0  # this request's current draft limit; set from max_length
    cooldown: int = 0  # decode steps left without drafting
    misses: int = 0  # consecutive rounds that accepted nothing
    dropped_seen: int = 0  # req.jump.dropped_tokens when the index last saw the tokens
    verify_ct: int = 0  # verification rounds (steps with a draft)
    proposed: int = 0  # draft tokens verified
    accepted: int = 0  # draft tokens accepted

    def __post_init__(self) -> None:
        self.length = self.length or self.max_length

    def record(self, drafted: int, accepted: int) -> None:
        """One verification round: ``accepted`` of ``drafted`` tokens kept."""
        self.verify_ct += 1
        self.proposed += drafted
        self.accepted += accepted
        if accepted == drafted:
            self.length = min(self.max_length, self.length + 1)
            self.misses = 0
        else:
            self.length = max(1, min(self.max_length, accepted + 1))
            if accepted == 0:
                self.misses += 1
                self.cooldown = min(2 ** (self.misses - 1), MAX_COOLDOWN)
            else:
                self.misses = 0

    def meta_info(self) -> dict:
        """The request's ``meta_info`` entries (SGLang's names)."""
        meta = {"spec_verify_ct": self.verify_ct, "spec_num_proposed_drafts": self.proposed,
                "spec_num_correct_drafts": self.accepted}
        if self.proposed:
            meta["spec_accept_rate"] = self.accepted / self.proposed
        return meta
