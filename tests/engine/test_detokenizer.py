"""IncrementalDetokenizer: UTF-8 safe deltas, stop strings, holdback."""

from __future__ import annotations

from engine.detokenizer import IncrementalDetokenizer


class ByteTokenizer:
    """Each token is one byte of UTF-8; invalid sequences decode to U+FFFD, like byte-level BPE."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return bytes(ids).decode("utf-8", errors="replace")


def _stream(text: str, stop=(), chunk: int = 1) -> tuple[list[str], IncrementalDetokenizer]:
    tok = ByteTokenizer()
    d = IncrementalDetokenizer(tok, stop)
    ids = tok.encode(text)
    deltas = []
    for i in range(0, len(ids), chunk):
        d.add_tokens(ids[i : i + chunk])
        deltas.append(d.take_delta(finished=False))
        if d.stop_string is not None:
            break
    deltas.append(d.take_delta(finished=True))
    return deltas, d


def test_multibyte_characters_never_split():
    deltas, d = _stream("héllo wörld — 東京 🎉")
    assert "".join(deltas) == "héllo wörld — 東京 🎉"
    assert all("\ufffd" not in x for x in deltas)
    assert d.text == "héllo wörld — 東京 🎉"


def test_stop_string_truncates_and_is_not_emitted():
    deltas, d = _stream("The answer is 42.\n\nUser: more", stop=("\n\nUser:",))
    assert "".join(deltas) == "The answer is 42."
    assert d.stop_string == "\n\nUser:"


def test_earliest_of_several_stop_strings_wins():
    _, d = _stream("abc STOP def END", stop=("END", "STOP"), chunk=3)
    assert d.text == "abc "
    assert d.stop_string == "STOP"


def test_partial_stop_string_is_held_back_until_it_cannot_match():
    tok = ByteTokenizer()
    d = IncrementalDetokenizer(tok, stop=("###",))
    d.add_tokens(tok.encode("ab#"))
    assert d.take_delta(finished=False) == "a"  # "b#" could start "###"
    d.add_tokens(tok.encode("#c"))
    assert d.take_delta(finished=False) == "b#"
    assert d.take_delta(finished=True) == "#c"
    assert d.stop_string is None


def test_stop_string_spanning_chunks_is_found():
    _, d = _stream("hello STOP world", stop=("STOP",), chunk=2)
    assert d.text == "hello "


def test_tokens_after_stop_are_ignored():
    tok = ByteTokenizer()
    d = IncrementalDetokenizer(tok, stop=("x",))
    d.add_tokens(tok.encode("abxcd"))
    d.add_tokens(tok.encode("efg"))
    assert d.text == "ab"
    assert d.take_delta(finished=True) == "ab"


def test_include_stop_str_in_output_keeps_the_matched_stop_string():
    tok = ByteTokenizer()
    d = IncrementalDetokenizer(tok, stop=("STOP", "END"), include_stop=True)
    d.add_tokens(tok.encode("abc ST"))
    assert d.take_delta(finished=False) == "abc"  # the last 3 characters may still begin "STOP"
    d.add_tokens(tok.encode("OP and END"))
    assert (d.text, d.stop_string) == ("abc STOP", "STOP")
    assert d.take_delta(finished=True) == " STOP"


class _WithSpecial(ByteTokenizer):
    """Token 0 is a special token whose text is ``<eot>``."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join("" if skip_special_tokens else "<eot>" if i == 0 else chr(i) for i in ids)


def test_skip_special_tokens_false_shows_their_text():
    ids = [104, 105, 0, 33]
    shown = IncrementalDetokenizer(_WithSpecial(), skip_special_tokens=False)
    hidden = IncrementalDetokenizer(_WithSpecial())
    for d in (shown, hidden):
        d.add_tokens(ids)
    assert (shown.text, hidden.text) == ("hi<eot>!", "")  # (the stub skips everything when asked to skip)
