"""`zoo export-tokenizer DIR [--model PATH]`: the served model's tokenizer as a Hugging Face tokenizer folder.

Load generators and clients that count tokens (aiperf, guidellm, ``transformers.AutoTokenizer``) need a tokenizer
they can load offline; a GGUF checkpoint's lives in its metadata. This writes the one the control plane uses
(backends/checkpoint/tokenizer.py), so their counts are the server's:

    DIR/tokenizer.json            the `tokenizers` model: vocabulary, merges, pre-tokenizer, decoder, added tokens
    DIR/tokenizer_config.json     tokenizer_class PreTrainedTokenizerFast, bos/eos/pad, model_max_length,
                                  chat_template
    DIR/special_tokens_map.json   bos/eos/pad

``AutoTokenizer.from_pretrained(DIR)`` then encodes, decodes and renders chat prompts as the server does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def add_export_tokenizer_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="the folder to write (created if missing; its tokenizer files are replaced)")
    p.add_argument("--model", default=None, help="checkpoint (GGUF file or HF folder; default: SmolLM2)")


def export_tokenizer(tokenizer, out_dir: Path, *, model_max_length: int | None = None) -> list[Path]:
    """Write ``tokenizer`` (a backends.checkpoint Tokenizer) to ``out_dir``; the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    backend = tokenizer.backend_tokenizer
    special = {
        name: backend.id_to_token(token_id)
        for name, token_id in (
            ("bos_token", tokenizer.bos_token_id),
            ("eos_token", tokenizer.eos_token_id),
            ("pad_token", tokenizer.pad_token_id),
        )
        if token_id is not None
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "add_bos_token": False,  # what the post-processor in tokenizer.json adds is all that is added
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length or 1_000_000_000_000_000_019_884_624_838_656,  # HF's "no limit"
    }
    if tokenizer.chat_template:
        config["chat_template"] = tokenizer.chat_template
    paths = [out_dir / name for name in TOKENIZER_FILES]
    backend.save(str(paths[0]))
    paths[1].write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    paths[2].write_text(json.dumps(special, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return paths


def run_export_tokenizer(args: argparse.Namespace) -> int:
    from backends.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(args.model)
    paths = export_tokenizer(
        checkpoint.tokenizer, Path(args.dir), model_max_length=checkpoint.config.max_position_embeddings
    )
    print(f"{checkpoint.config.name}: tokenizer written to {Path(args.dir)} ({', '.join(p.name for p in paths)})")
    return 0
