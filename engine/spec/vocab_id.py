"""A tokenizer's identity in one short string, so two nodes can tell whether their token ids mean the same text.

``vocab_id(tok) = "<vocab_size>:<first 12 hex digits of sha1>"`` over the EOS id and the text of a fixed sample
of ids (every ``vocab_size // 512``-th id, special tokens kept). A draft model must share its verifier's
vocabulary (the drafts are token ids); the control plane pairs only nodes whose ids are equal
(controlplane/spec_pairs.py) and names both ids when it refuses. The same sampling idea as ``check_vocab``
(backends/torch/draft_proposer.py), which compares two tokenizers held in one process.
"""

from __future__ import annotations

import hashlib
from typing import Any

NUM_SAMPLED_IDS = 512


def vocab_id(tokenizer: Any) -> str:
    """The id; "" when the tokenizer says no vocabulary size."""
    vocab_size = int(getattr(tokenizer, "vocab_size", 0) or 0)
    if vocab_size <= 0:
        return ""
    digest = hashlib.sha1(f"eos={getattr(tokenizer, 'eos_token_id', None)}".encode())
    for token_id in range(0, vocab_size, max(1, vocab_size // NUM_SAMPLED_IDS)):
        try:
            text = tokenizer.decode([token_id], skip_special_tokens=False)
        except Exception:  # an id a tokenizer cannot decode is part of its identity too
            text = "\ufffd"
        digest.update(b"\x00" + text.encode("utf-8", errors="replace"))
    return f"{vocab_size}:{digest.hexdigest()[:12]}"
