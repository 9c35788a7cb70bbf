"""Checkpoint loading shared by the PyTorch and JAX backends: config, tokenizer and float32 numpy tensors
in Hugging Face Llama naming, from a GGUF file or a Hugging Face safetensors directory."""

from backends.checkpoint.checkpoint import Checkpoint, TensorSource, load_checkpoint
from backends.checkpoint.locate import default_model_path
from backends.checkpoint.model_config import ModelConfig
from backends.checkpoint.tokenizer import Tokenizer

__all__ = ["Checkpoint", "ModelConfig", "TensorSource", "Tokenizer", "default_model_path", "load_checkpoint"]
