"""`zoo generate --speculative`: the same greedy text as plain decoding, and the speculation summary."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.workload import REPO_ROOT

PROMPT = "Repeat exactly: red green blue, red green blue, red green blue"


def _zoo(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "zoo", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.mark.slow
def test_generate_speculative_ngram_prints_the_plain_text():
    common = ("generate", "--chat", PROMPT, "--max-tokens", "16", "--temperature", "0", "--num-threads", "1")
    plain = _zoo(*common)
    spec = _zoo(*common, "--speculative", "ngram", "--num-spec-tokens", "3")
    assert plain.returncode == 0 and spec.returncode == 0, spec.stderr
    assert spec.stdout == plain.stdout
    assert "[speculative ngram:" in spec.stderr and "drafts accepted" in spec.stderr


@pytest.mark.slow
def test_a_missing_draft_model_is_a_clear_error():
    r = _zoo("generate", "hi", "--speculative", "model", "--draft-model", "/nonexistent/draft.gguf", "--quiet")
    assert r.returncode == 2
    assert "/nonexistent/draft.gguf" in r.stderr and "Traceback" not in r.stderr


def test_a_bad_num_spec_tokens_is_a_clear_error():
    r = _zoo("generate", "hi", "--speculative", "ngram", "--num-spec-tokens", "0", "--quiet")
    assert r.returncode == 2
    assert "num_spec_tokens" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_generate_with_a_prediction_prints_the_plain_text_and_what_it_saved(tmp_path):
    """OpenAI's Predicted Outputs from the command line: the plain answer given back as --prediction (from a file)
    is drafted from and accepted; the text is the same."""
    common = ("generate", "--chat", PROMPT, "--max-tokens", "16", "--temperature", "0", "--num-threads", "1")
    plain = _zoo(*common, "--speculative", "ngram")
    assert plain.returncode == 0, plain.stderr
    (tmp_path / "answer.txt").write_text(plain.stdout.rstrip("\n"))
    predicted = _zoo(*common, "--speculative", "ngram", "--prediction", f"@{tmp_path / 'answer.txt'}")
    assert predicted.returncode == 0, predicted.stderr
    assert predicted.stdout == plain.stdout and "[prediction: " in predicted.stderr
    missing = _zoo("generate", "hi", "--prediction", "@/nonexistent/answer.txt", "--quiet")
    assert missing.returncode != 0 and "/nonexistent/answer.txt" in missing.stderr and "Traceback" not in missing.stderr
