"""How a step runs on XLA: per-layer weight arrays in [in, out], a layer program that copies no weights
and updates the KV cache in place, the runner's buckets, and the host argmax of greedy sampling."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from backends.jax import model
from backends.jax.attention import DecodeMeta
from backends.jax.runner import DEFAULT_BUCKETS
from backends.jax.sampler import _argmax, _greedy


def test_layer_weights_are_per_layer_arrays_in_in_out_layout(tiny, kit):
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd)
    layers = runner.params.layers
    assert len(layers) == config.num_hidden_layers
    qkv = np.concatenate([sd[f"model.layers.1.self_attn.{p}_proj.weight"].numpy() for p in "qkv"])
    np.testing.assert_array_equal(np.asarray(layers[1].qkv), qkv.T)
    gate_up = np.concatenate([sd[f"model.layers.0.mlp.{p}_proj.weight"].numpy() for p in ("gate", "up")])
    np.testing.assert_array_equal(np.asarray(layers[0].gate_up), gate_up.T)
    np.testing.assert_array_equal(np.asarray(layers[0].down), sd["model.layers.0.mlp.down_proj.weight"].numpy().T)


def test_decode_layer_program_copies_no_weights_and_updates_kv_in_place(tiny, kit):
    """XLA's buffer plan of one decode layer: the KV argument is aliased to the output (donated, scattered in
    place) and the scratch memory is smaller than one weight matrix. The ``lax.scan`` over stacked layers
    this replaced copied every layer's weights into scratch (temp = 72 kB here, the layer's 71 kB of weights)."""
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd)
    kv = runner.kv_cache.device_kv
    b, d = 2, config.head_dim
    zeros = np.zeros(b, np.int32)
    hidden = np.zeros((b, config.hidden_size), np.float32)
    cos = np.zeros((b, 1, d), np.float32)
    meta = DecodeMeta(np.zeros((b, 8), np.int32), zeros)
    compiled = model._decode_layer.lower(
        runner.params.layers[0], kv, np.int32(0), hidden, cos, cos, zeros, meta, None, dims=runner.dims
    ).compile()
    stats = compiled.memory_analysis()
    assert stats.alias_size_in_bytes >= kv.nbytes
    smallest_big_weight = min(w.nbytes for w in (runner.params.layers[0].gate_up, runner.params.layers[0].qkv))
    assert stats.temp_size_in_bytes < smallest_big_weight, stats


def test_default_buckets_pad_a_prompt_to_less_than_twice_its_length():
    assert [DEFAULT_BUCKETS.num_tokens(n) for n in (1, 17, 33, 100, 128, 129, 512)] == [16, 32, 64, 128, 128, 256, 512]
    assert [DEFAULT_BUCKETS.context_blocks(n) for n in (1, 5, 8, 12)] == [4, 8, 8, 16]
    assert DEFAULT_BUCKETS.key_blocks(8) == 8


def test_host_greedy_argmax_matches_xla_and_takes_the_first_maximum():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((8, 300)).astype(np.float32)
    logits[3, [7, 200]] = 50.0  # a tie: both pick the first
    dev = jnp.asarray(logits)
    ids = _greedy(dev)
    assert isinstance(ids, np.ndarray) and ids.dtype == np.int32
    np.testing.assert_array_equal(ids, np.asarray(_argmax(dev)))
    assert ids[3] == 7
