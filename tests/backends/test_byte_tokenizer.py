"""The fake backend's byte tokenizer: round trip, special ids dropped, and ids past its vocabulary (a model with
more embedding rows than tokens) decoded to U+FFFD rather than raising inside an agent's detokenizer."""

from __future__ import annotations

from backends.fake import ByteTokenizer


def test_round_trip_and_specials() -> None:
    tok = ByteTokenizer()
    ids = tok.encode("héllo")
    assert tok.decode([1, *ids, 2, 0]) == "héllo"
    assert tok.token_bytes(ids[0]) == b"h" and tok.token_bytes(2) == b""


def test_ids_past_the_vocabulary_decode_to_the_replacement_character() -> None:
    tok = ByteTokenizer()
    assert tok.decode([*tok.encode("ab"), tok.vocab_size, 299, *tok.encode("c")]) == "ab\ufffd\ufffdc"
    assert tok.token_bytes(tok.vocab_size + 5) == b""
