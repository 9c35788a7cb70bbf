"""`zoo generate` end to end: a real process, the real model, text streamed to stdout."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.workload import REPO_ROOT


def _zoo(*args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "zoo", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout_s
    )


@pytest.mark.slow
def test_generate_chat_answers_paris():
    r = _zoo("generate", "--chat", "What is the capital of France?", "--max-tokens", "24", "--temperature", "0")
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout
    assert "finish=stop" in r.stderr  # the model ended its answer with <|im_end|>, not the token limit


@pytest.mark.slow
def test_generate_stop_string_cuts_the_stream():
    r = _zoo(
        "generate",
        "--chat",
        "What is the capital of France?",
        "--max-tokens",
        "24",
        "--temperature",
        "0",
        "--stop",
        "Paris",
    )
    assert r.returncode == 0, r.stderr
    assert "Paris" not in r.stdout
    assert "capital of France is" in r.stdout


def test_invalid_sampling_parameter_is_a_clear_usage_error():
    r = _zoo("generate", "hello", "--temperature", "-1")
    assert r.returncode == 2
    assert "temperature" in r.stderr


@pytest.mark.slow
def test_generate_with_a_bias_and_penalties(smollm2_checkpoint):
    (banana,) = smollm2_checkpoint.tokenizer.encode(" banana")
    r = _zoo(
        "generate", "Fruit:", "--max-tokens", "3", "--temperature", "0", "--logit-bias", f"{banana}=100",
        "--frequency-penalty", "0.5", "--min-tokens", "3", "--quiet",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "banana banana banana"
    banned = _zoo(
        "generate", "Fruit:", "--max-tokens", "3", "--temperature", "0", "--logit-bias", f"{banana}=100",
        "--bad-word", "banana", "--quiet",
    )  # fmt: skip
    assert banned.returncode == 0, banned.stderr
    assert "banana" not in banned.stdout  # vLLM's bad_words beat even a +100 bias


@pytest.mark.parametrize(
    ("flags", "field"),
    [(["--logit-bias", "x=1"], "logit_bias"), (["--frequency-penalty", "3"], "frequency_penalty"),
     (["--min-tokens", "9", "--max-tokens", "4"], "min_tokens"), (["--allowed-token-id", "-1"], "allowed_token_ids"),
     (["--bad-word", " "], "bad_words"), (["--thinking-token-budget", "-1"], "thinking_token_budget")],
)  # fmt: skip
def test_a_bad_penalty_or_bias_is_a_clear_usage_error(flags, field):
    r = _zoo("generate", "hello", *flags)
    assert r.returncode == 2 and field in r.stderr and "Traceback" not in r.stderr


@pytest.mark.slow
def test_generate_with_choices_streams_exactly_one_of_them():
    r = _zoo(
        "generate", "The capital of France is", "--choice", "banana", "--choice", "cherry", "--temperature", "0",
        "--max-tokens", "8",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout in ("banana\n", "cherry\n")  # unconstrained, greedy: " Paris."
    assert "finish=stop" in r.stderr  # the grammar complete, EOS was the only token left


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--json-schema", "{bad"], "--json-schema"), (["--json-schema", '{"a":' * 5000], "--json-schema"),
     (["--grammar", "@/nonexistent.lark"], "--grammar"), (["--regex", "[a-"], "--regex"),
     (["--choice", "yes", "--regex", "y"], "not allowed with argument --choice"),
     (["--choice", "yes", "--min-tokens", "1"], "min_tokens")],
)  # fmt: skip
def test_a_bad_or_second_structured_output_is_a_clear_usage_error(flags, named):
    r = _zoo("generate", "hello", *flags)
    assert r.returncode == 2 and named in r.stderr and "Traceback" not in r.stderr


def test_structured_output_files_are_read_and_bounded(tmp_path):
    (tmp_path / "schema.json").write_text('{"type": "object"}')
    (tmp_path / "big.lark").write_text('start: "a"\n' + "/" * 64 * 1024)
    r = _zoo("generate", "hello", "--json-schema", f"@{tmp_path / 'schema.json'}", "--model", "/nonexistent.gguf")
    assert r.returncode == 2 and "/nonexistent.gguf" in r.stderr  # the flags were fine: the model is missing
    r = _zoo("generate", "hello", "--grammar", f"@{tmp_path / 'big.lark'}")
    assert r.returncode == 2 and "--grammar" in r.stderr and "64 KiB" in r.stderr and "Traceback" not in r.stderr


def test_missing_model_file_is_a_clear_error():
    r = _zoo("generate", "hello", "--model", "/nonexistent/model.gguf", "--quiet")
    assert r.returncode == 2
    assert "/nonexistent/model.gguf" in r.stderr
    assert "Traceback" not in r.stderr


@pytest.mark.slow
def test_generate_on_the_jax_backend():
    r = _zoo(
        "generate", "--chat", "What is the capital of France?", "--max-tokens", "12", "--temperature", "0",
        "--backend", "jax",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout


@pytest.mark.slow
def test_generate_prints_prompt_logprobs_and_keeps_the_stop_string(smollm2_checkpoint):
    prompt = "The capital of France is"
    r = _zoo(
        "generate", prompt, "--max-tokens", "4", "--temperature", "0", "--quiet", "--prompt-logprobs", "1",
        "--stop", " Paris", "--include-stop-str",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "Paris"  # the stop string stays (--include-stop-str), the rest is cut
    lines = [line for line in r.stderr.splitlines() if line.startswith("[prompt")]
    assert len(lines) == len(smollm2_checkpoint.tokenizer.encode(prompt))
    assert lines[0].endswith("-") and all(" rank " in line for line in lines[1:])
    r = _zoo("generate", prompt, "--max-tokens", "1", "--quiet", "--truncate-prompt-tokens", "0")
    assert r.returncode == 2 and "truncate_prompt_tokens" in r.stderr


@pytest.mark.slow
def test_embed_prints_one_normalised_vector_per_input(smollm2_checkpoint):
    r = _zoo("embed", "The cat sat on the mat.", "A kitten slept on the rug.")
    assert r.returncode == 0, r.stderr
    vectors = [json.loads(line) for line in r.stdout.splitlines()]
    assert len(vectors) == 2 and all(len(v) == smollm2_checkpoint.config.hidden_size for v in vectors)
    assert all(abs(sum(x * x for x in v) - 1) < 1e-4 for v in vectors)
    cosine = sum(a * b for a, b in zip(*vectors))
    assert f"[cosine to the first {cosine:.4f}]" in r.stderr and "[2 inputs, 576 dimensions]" in r.stderr
    r = _zoo("embed", "x", "--quiet", "--truncate-prompt-tokens", "0")
    assert r.returncode == 2 and "truncate_prompt_tokens" in r.stderr
