"""The text <-> token id mapping of a checkpoint, built offline with the `tokenizers` library."""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors
from tokenizers import Tokenizer as BackendTokenizer

from backends.checkpoint.chat_template import ChatTemplate

# llama.cpp token types (tokenizer.ggml.token_type).
_TOKEN_TYPE_CONTROL = 3
_TOKEN_TYPE_USER_DEFINED = 4

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _byte_level_pre_tokenizer(pre: str) -> tuple[pre_tokenizers.PreTokenizer, bool]:
    """(pre-tokenizer, ignore_merges) matching llama.cpp's `tokenizer.ggml.pre` for byte-level BPE."""
    if pre == "smollm":
        # Digits one by one, then GPT-2's split: what SmolLM's tokenizer.json does and llama.cpp matches.
        return pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
        ), False
    if pre == "gpt-2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False), False
    if pre in ("llama-bpe", "llama3", "llama-v3"):
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        ), True
    raise ValueError(
        f"unsupported GGUF pre-tokenizer {pre!r}; supported: smollm, gpt-2, llama-bpe (add its split rule "
        "to backends/checkpoint/tokenizer.py)"
    )


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table that byte-level BPE vocabularies are spelled in."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {byte: chr(byte) for byte in printable}
    extra = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


@functools.cache
def _unicode_to_bytes() -> dict[str, int]:
    return {char: byte for byte, char in bytes_to_unicode().items()}


class Tokenizer:
    """Encodes and decodes text and renders chat prompts.

    `backend_tokenizer` is the underlying `tokenizers.Tokenizer` (its `.save(path)` writes a tokenizer.json).
    `special_token_ids` are the ids of added tokens marked special (e.g. <|im_start|>); written in the text they
    encode to their own id, and `decode(skip_special_tokens=True)` drops them.
    """

    def __init__(
        self,
        backend_tokenizer: BackendTokenizer,
        *,
        bos_token_id: int | None,
        eos_token_id: int | None,
        pad_token_id: int | None,
        chat_template: str | None,
    ) -> None:
        self.backend_tokenizer = backend_tokenizer
        self.vocab_size: int = backend_tokenizer.get_vocab_size(with_added_tokens=True)
        for name, token_id in (("bos", bos_token_id), ("eos", eos_token_id), ("pad", pad_token_id)):
            if token_id is not None and not 0 <= token_id < self.vocab_size:
                raise ValueError(f"{name}_token_id {token_id} is outside the vocabulary (size {self.vocab_size})")
        self.bos_token_id = bos_token_id
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.special_token_ids: frozenset[int] = frozenset(
            token_id for token_id, token in backend_tokenizer.get_added_tokens_decoder().items() if token.special
        )
        self._added_token_ids = frozenset(backend_tokenizer.get_added_tokens_decoder())
        self.chat_template = chat_template
        self._compiled_template = ChatTemplate(chat_template) if chat_template else None

    def with_chat_template(self, source: str) -> Tokenizer:
        """This tokenizer with another chat template (``--chat-template``, as vLLM's replaces the model's); this one
        is left as it was. ValueError when the template does not parse."""
        other = copy.copy(self)
        other.chat_template = source
        other._compiled_template = ChatTemplate(source)
        return other

    def __repr__(self) -> str:
        return (
            f"Tokenizer(vocab_size={self.vocab_size}, bos={self.bos_token_id}, eos={self.eos_token_id}, "
            f"pad={self.pad_token_id}, num_special={len(self.special_token_ids)})"
        )

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. add_special_tokens adds what the checkpoint's post-processor adds (e.g. BOS).

        Raises ValueError for a str that is not valid Unicode (a lone surrogate, which JSON can carry)."""
        try:
            return self.backend_tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        except TypeError as error:
            if isinstance(text, str):
                raise ValueError(f"text is not valid Unicode (lone surrogate?): {error}") from error
            raise

    def encode_unlocked(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """``encode``, with Python's GIL released while the Rust tokenizer works (its batch path releases it, the
        single one does not): the same ids, and another thread (an event loop) runs meanwhile. For long texts
        tokenized off the control plane's loop (controlplane/offload_tokenize.py)."""
        try:
            return self.backend_tokenizer.encode_batch([text], add_special_tokens=add_special_tokens)[0].ids
        except TypeError as error:
            if isinstance(text, str):
                raise ValueError(f"text is not valid Unicode (lone surrogate?): {error}") from error
            raise

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend_tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_to_id(self, token: str) -> int | None:
        return self.backend_tokenizer.token_to_id(token)

    def id_to_token(self, token_id: int) -> str | None:
        return self.backend_tokenizer.id_to_token(token_id)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes token ``token_id`` stands for: a byte-level BPE token's own bytes (maybe part of a UTF-8
        character), an added token's text as UTF-8; for other vocabularies, its decoded text as UTF-8."""
        token = self.backend_tokenizer.id_to_token(token_id)
        if token is None:
            raise ValueError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
        if token_id not in self._added_token_ids and isinstance(self.backend_tokenizer.decoder, decoders.ByteLevel):
            byte_of = _unicode_to_bytes()
            if all(char in byte_of for char in token):
                return bytes(byte_of[char] for char in token)
        if token_id in self._added_token_ids:
            return token.encode("utf-8")
        return self.decode([token_id], skip_special_tokens=False).encode("utf-8")

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        template_kwargs: dict[str, Any] | None = None,
        tool_format: str = "hermes",
    ) -> str:
        """The prompt text for `messages` (each {"role": str, "content": str}, perhaps with tool calls: see
        backends/hermes_tools.py) and `tools`; encode it without special tokens. `template_kwargs`: more template
        variables (those the template does not read are dropped; backends/chat_render.py); `tool_format`: how a
        template without tools gets them (backends/tool_prompt_formats.py)."""
        if self._compiled_template is None:
            raise ValueError("this checkpoint has no chat template")
        special_tokens = {
            "bos_token": self._token_text(self.bos_token_id),
            "eos_token": self._token_text(self.eos_token_id),
            "pad_token": self._token_text(self.pad_token_id),
        }
        return self._compiled_template.render(
            messages,
            add_generation_prompt=add_generation_prompt,
            special_tokens=special_tokens,
            tools=tools,
            variables=template_kwargs,
            tool_format=tool_format,
        )

    def _token_text(self, token_id: int | None) -> str | None:
        return None if token_id is None else self.backend_tokenizer.id_to_token(token_id)

    @classmethod
    def from_gguf(cls, reader: Any) -> Tokenizer:
        """From the tokenizer.ggml.* metadata of a `gguf.GGUFReader`; byte-level BPE ("gpt2") vocabularies only.

        Control tokens (type 3) become special added tokens and user-defined ones (type 4) plain added tokens,
        so both match whole in the text, as in llama.cpp.
        """
        model = _gguf_field(reader, "tokenizer.ggml.model")
        if model != "gpt2":
            raise ValueError(f"unsupported GGUF tokenizer model {model!r}; only byte-level BPE ('gpt2') is supported")
        tokens: list[str] = _gguf_field(reader, "tokenizer.ggml.tokens")
        merges: list[str] = _gguf_field(reader, "tokenizer.ggml.merges")
        if tokens is None or merges is None:
            raise ValueError("the GGUF has no tokenizer.ggml.tokens/merges metadata")
        token_types: list[int] = _gguf_field(reader, "tokenizer.ggml.token_type") or [1] * len(tokens)
        pre_tokenizer, ignore_merges = _byte_level_pre_tokenizer(_gguf_field(reader, "tokenizer.ggml.pre") or "gpt-2")

        # Regular tokens are spelled in the byte alphabet; one that is not (a llama.cpp export quirk) is
        # respelled from its UTF-8 bytes. Added tokens keep their text, which is what they match in the input.
        alphabet = bytes_to_unicode()
        alphabet_chars = set(alphabet.values())
        added_types = (_TOKEN_TYPE_CONTROL, _TOKEN_TYPE_USER_DEFINED)
        vocab: dict[str, int] = {}
        for token_id, (token, token_type) in enumerate(zip(tokens, token_types, strict=True)):
            if token_type not in added_types and not set(token) <= alphabet_chars:
                token = "".join(alphabet[byte] for byte in token.encode("utf-8"))
            vocab.setdefault(token, token_id)
        merge_pairs = [tuple(merge.split(" ", 1)) for merge in merges]

        backend = BackendTokenizer(models.BPE(vocab=vocab, merges=merge_pairs, ignore_merges=ignore_merges))
        backend.pre_tokenizer = pre_tokenizer
        backend.decoder = decoders.ByteLevel()
        added = [
            AddedToken(token, special=token_type == _TOKEN_TYPE_CONTROL, normalized=False)
            for token, token_type in zip(tokens, token_types, strict=True)
            if token_type in added_types
        ]
        backend.add_special_tokens([token for token in added if token.special])
        backend.add_tokens([token for token in added if not token.special])
        for token in added:
            if backend.token_to_id(token.content) != vocab.get(token.content):
                raise ValueError(f"GGUF added token {token.content!r} did not keep its vocabulary id")

        bos_token_id = _gguf_field(reader, "tokenizer.ggml.bos_token_id")
        eos_token_id = _gguf_field(reader, "tokenizer.ggml.eos_token_id")
        add_bos = bool(_gguf_field(reader, "tokenizer.ggml.add_bos_token"))
        add_eos = bool(_gguf_field(reader, "tokenizer.ggml.add_eos_token"))
        post_processor = _bos_eos_post_processor(
            backend, bos_token_id if add_bos else None, eos_token_id if add_eos else None
        )
        if post_processor is not None:
            backend.post_processor = post_processor
        return cls(
            backend,
            bos_token_id=bos_token_id,
            eos_token_id=eos_token_id,
            pad_token_id=_gguf_field(reader, "tokenizer.ggml.padding_token_id"),
            chat_template=_gguf_field(reader, "tokenizer.chat_template"),
        )

    @classmethod
    def from_hf_dir(cls, path: Path) -> Tokenizer:
        """From a Hugging Face directory: tokenizer.json, plus tokenizer_config.json / special_tokens_map.json /
        chat_template.jinja for the special tokens and chat template when present."""
        path = Path(path)
        tokenizer_file = path / "tokenizer.json"
        if not tokenizer_file.is_file():
            raise FileNotFoundError(
                f"{path} has no tokenizer.json (only fast-tokenizer checkpoints are supported; a sentencepiece "
                "tokenizer.model alone is not)"
            )
        backend = BackendTokenizer.from_file(str(tokenizer_file))
        tokenizer_config = _read_json(path / "tokenizer_config.json")
        special_tokens_map = _read_json(path / "special_tokens_map.json")

        def token_id(key: str) -> int | None:
            token = tokenizer_config.get(key) or special_tokens_map.get(key)
            if isinstance(token, dict):
                token = token.get("content")
            if not token:
                return None
            found = backend.token_to_id(token)
            if found is None:
                raise ValueError(f"{key} {token!r} from tokenizer_config.json is not in tokenizer.json")
            return found

        chat_template = _hf_chat_template(path, tokenizer_config)
        return cls(
            backend,
            bos_token_id=token_id("bos_token"),
            eos_token_id=token_id("eos_token"),
            pad_token_id=token_id("pad_token"),
            chat_template=chat_template,
        )


def _bos_eos_post_processor(
    backend: BackendTokenizer, bos_token_id: int | None, eos_token_id: int | None
) -> processors.TemplateProcessing | None:
    """A post-processor adding BOS/EOS around the text when `encode(add_special_tokens=True)`; None if neither."""
    if bos_token_id is None and eos_token_id is None:
        return None
    prefix = [] if bos_token_id is None else [backend.id_to_token(bos_token_id)]
    suffix = [] if eos_token_id is None else [backend.id_to_token(eos_token_id)]
    specials = [(token, backend.token_to_id(token)) for token in prefix + suffix]
    return processors.TemplateProcessing(
        single=[*prefix, "$A", *suffix],
        pair=[*prefix, "$A", *suffix, *prefix, "$B", *suffix],
        special_tokens=list(dict.fromkeys(specials)),
    )


def _gguf_field(reader: Any, key: str) -> Any:
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8") as file:
        return json.load(file)


def _hf_chat_template(path: Path, tokenizer_config: dict[str, Any]) -> str | None:
    """chat_template.jinja if present, else tokenizer_config.json's chat_template (a string, or a list of
    {"name", "template"} of which "default" is taken)."""
    jinja_file = path / "chat_template.jinja"
    if jinja_file.is_file():
        return jinja_file.read_text(encoding="utf-8")
    template = tokenizer_config.get("chat_template")
    if isinstance(template, list):
        named = {entry.get("name"): entry.get("template") for entry in template if isinstance(entry, dict)}
        template = named.get("default")
    return template or None
