"""Counters of a decoding run (passes, drafts, acceptance), kept free of torch.

Results and job records carry these counters, and writing a transcript must not need torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SpeculativeStats:
    """Counters of one decoding run (or the sum over several)."""

    target_passes: int = 0
    draft_rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    generated: int = 0
    proposed_at: list[int] = field(default_factory=list)
    accepted_at: list[int] = field(default_factory=list)
    decoder_seconds: float = 0.0

    def record_round(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        self.draft_rounds += 1
        self.drafted += drafted
        self.accepted += accepted
        while len(self.proposed_at) < drafted:
            self.proposed_at.append(0)
            self.accepted_at.append(0)
        for i in range(drafted):
            self.proposed_at[i] += 1
            if i < accepted:
                self.accepted_at[i] += 1

    @property
    def mean_acceptance_length(self) -> float:
        """Tokens emitted per verification pass that carried a draft: 1 + accepted / rounds."""
        return 1.0 + self.accepted / self.draft_rounds if self.draft_rounds else 1.0

    @property
    def acceptance_rate_at(self) -> list[float]:
        """Fraction of drafts whose token at position ``i`` was accepted, given it was proposed."""
        return [a / p if p else 0.0 for a, p in zip(self.accepted_at, self.proposed_at)]

    def merge(self, other: "SpeculativeStats") -> None:
        self.target_passes += other.target_passes
        self.generated += other.generated
        self.decoder_seconds += other.decoder_seconds
        for i in range(len(other.proposed_at)):
            while len(self.proposed_at) <= i:
                self.proposed_at.append(0)
                self.accepted_at.append(0)
            self.proposed_at[i] += other.proposed_at[i]
            self.accepted_at[i] += other.accepted_at[i]
        self.draft_rounds += other.draft_rounds
        self.drafted += other.drafted
        self.accepted += other.accepted

    def as_dict(self) -> dict:
        return {
            "target_passes": self.target_passes,
            "draft_rounds": self.draft_rounds,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "generated": self.generated,
            "mean_acceptance_length": self.mean_acceptance_length,
            "acceptance_rate_at": self.acceptance_rate_at,
            "decoder_seconds": self.decoder_seconds,
        }
