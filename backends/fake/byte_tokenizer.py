"""A byte-level tokenizer: UTF-8 bytes as tokens. The fake backend's tokenizer (tests, benchmarks)."""

from __future__ import annotations

from collections.abc import Sequence

from backends.tool_prompt_formats import fold_tools

FAKE_MODEL_NAME = "fake-bytes"  # the name a fake-runner agent serves under


class ByteTokenizer:
    """UTF-8 bytes as tokens (id = byte + 3; 0 pad, 1 bos, 2 eos). Loads in no time; no chat template beyond
    ``role: content`` lines."""

    vocab_size = 259
    eos_token_id = 2
    bos_token_id = 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [b + 3 for b in text.encode("utf-8")]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Ids past the vocabulary (a model whose embedding has more rows than the tokenizer has tokens, as
        padded vocabularies do) decode to U+FFFD instead of raising in the agent's detokenizer."""
        out = bytearray()
        for i in ids:
            if 3 <= i < self.vocab_size:
                out.append(i - 3)
            elif i >= self.vocab_size:
                out += "\ufffd".encode()
        return out.decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` stands for (none for pad, bos and eos)."""
        return bytes([token_id - 3]) if 3 <= token_id < self.vocab_size else b""

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,  # a fixed template: it reads no variable
        tool_format: str = "hermes",  # how tools are written in (backends/tool_prompt_formats.py)
    ) -> str:
        text = "".join(f"{m['role']}: {m['content']}\n" for m in fold_tools(messages, tools, tool_format))
        return text + ("assistant: " if add_generation_prompt else "")
