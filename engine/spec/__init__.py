"""Speculative decoding, the sans-IO half: proposers, the draft-length controller, the per-step driver."""

from engine.spec.proposer import Draft, DraftRequest, Proposer
from engine.spec.spec_config import SpecDecodeConfig
from engine.spec.speculator import Speculator

__all__ = ["Draft", "DraftRequest", "Proposer", "SpecDecodeConfig", "Speculator"]
