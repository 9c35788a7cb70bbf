"""The fake backend: a byte tokenizer and a runner that computes nothing (tests and control-plane benchmarks)."""

from backends.fake.byte_tokenizer import FAKE_MODEL_NAME, ByteTokenizer
from backends.fake.trivial_runner import TrivialRunner, build_trivial_engine, cpu_test_hardware

__all__ = ["FAKE_MODEL_NAME", "ByteTokenizer", "TrivialRunner", "build_trivial_engine", "cpu_test_hardware"]
