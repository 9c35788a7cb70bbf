"""How long one scheduler step takes on a given GPU for a given model shape: a per-operator roofline.

Each operator of a Llama decoder layer is timed as a smooth roofline plus a launch floor::

    t_op = overhead + (t_compute^k + t_memory^k)^(1/k)         k -> inf is the hard max() roofline
    t_compute = flops / (peak_tflops * 1e12 * compute_eff)
    t_memory  = bytes / (bandwidth_gbps * 1e9 * memory_eff)

Operators of one layer, T = tokens in the step, tp = tensor-parallel degree (each rank holds 1/tp of the
heads and of the MLP width; norms and residual adds are replicated)::

    linear   qkv  [T, h] x [h, (nh + 2 nkv) hd / tp]     flops 2 T K N, bytes 2 (K N + T K + T N)   (bf16)
             o    [T, nh hd / tp] x [nh hd / tp, h]
             up   [T, h] x [h, 2 I / tp]                  (gate and up fused)
             down [T, I / tp] x [I / tp, h]
    elementwise (memory-bound, elementwise_eff): 2 RMS norms (4 h B/token), RoPE on q and k, SiLU*mul
             (6 I / tp B/token), 2 residual adds (6 h B/token)
    attention  FLOPs 4 q_len (start + (q_len + 1) / 2) nh/tp hd per request (causal), bytes = the K/V of
             every context position read once + the new K/V written; against attention_* efficiencies
    all-reduce (tp > 1): 2 per layer of T h 2 bytes, priced by backends/link_model.py (the LinkModel the
             torch all-reduce emulation paces its links with): ranks in ``tp_nodes`` fast domains (NVLink,
             INTERCONNECT_GBPS) joined by the network (NETWORK_GBPS per GPU); "flat" = ring, 2 (tp - 1) steps
             of bytes / tp, each as slow as its slowest hop (one node: link_latency + 2 (tp - 1) / tp bytes /
             link); "hierarchical" = reduce in the node, (compressed) leader exchange, broadcast back;
             "sharded" = reduce-scatter in the node, each GPU's shard over its own NIC, all-gather

Per step, on top of num_layers x layer: the embedding gather, the LM head for the sampled rows only, KV
block moves (swap over the host link, copies in device memory) and a fixed + per-sequence CPU overhead.

The linear and elementwise efficiencies are fitted to measured operator timings (calibration.py); the
attention, interconnect and per-step figures are assumptions, stated in ``Efficiency``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from backends.checkpoint.model_config import ModelConfig
from backends.gpu_table import GPU_TABLE, GpuSpec
from backends.link_model import COMPRESSION_BYTES, LinkModel
from backends.sim.model_shapes import kv_bytes_per_token, weight_bytes
from transport.messages import HardwareInfo

BYTES_PER_VALUE = 2  # bf16 weights, activations and KV (fp16 on T4)


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achieved fractions of a GPU's datasheet figures, and fixed costs (seconds).

    Fitted (calibration.py): compute, memory, knee, linear_overhead_s, elementwise_memory,
    elementwise_overhead_s. Assumed: the attention fractions (FlashAttention-class prefill reaches about
    70% of what a GEMM does; paged decode attention about 85% of a weight read), the per-step CPU overhead
    (scheduling + launches of a vLLM-class engine with CUDA graphs), and the link efficiency.
    """

    compute: float
    memory: float
    knee: float  # k of the smooth max: larger = sharper corner between the memory and compute roofs
    linear_overhead_s: float
    elementwise_memory: float
    elementwise_overhead_s: float
    attention_compute: float = 0.0  # 0 = 0.7 * compute
    attention_memory: float = 0.0  # 0 = 0.85 * min(memory, 0.9)
    step_overhead_s: float = 1.5e-3
    per_seq_overhead_s: float = 10e-6
    link_efficiency: float = 0.75
    link_latency_s: float = 10e-6

    def __post_init__(self) -> None:
        for name in ("compute", "memory", "elementwise_memory"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {getattr(self, name)}")
        if self.knee < 1:
            raise ValueError(f"knee must be >= 1, got {self.knee}")
        if self.attention_compute <= 0:
            object.__setattr__(self, "attention_compute", 0.7 * self.compute)
        if self.attention_memory <= 0:
            object.__setattr__(self, "attention_memory", 0.85 * min(self.memory, 0.9))


# Fitted by ``python -m backends.sim.calibration`` to ../shared/calibration (Vidur, A100-80GB and H100 SXM).
FITTED_EFFICIENCY: dict[str, Efficiency] = {
    "a100-80gb": Efficiency(
        compute=0.740, memory=0.816, knee=1.41, linear_overhead_s=5.11e-6, elementwise_memory=0.505,
        elementwise_overhead_s=2.37e-6,
    ),
    "h100-sxm": Efficiency(
        compute=0.774, memory=0.990, knee=1.22, linear_overhead_s=5.40e-6, elementwise_memory=0.593,
        elementwise_overhead_s=2.35e-6,
    ),
}  # fmt: skip

# GPUs without measurements borrow the closest measured architecture (an assumption, not a fit).
_BORROWED_FROM = {
    "h200": "h100-sxm",
    "h100-pcie": "h100-sxm",
    "a100-40gb": "a100-80gb",
    "l40s": "a100-80gb",
    "l4": "a100-80gb",
    "a10": "a100-80gb",
    "t4": "a100-80gb",
}

# Per-direction GPU-GPU bandwidth for tensor parallelism and the host link for swapping, GB/s.
# Sources: ../shared/calibration/README.md (NVLink and PCIe generation per GPU; NVLink figures are
# bidirectional, halved here); H100 PCIe pairs are assumed bridged over PCIe 5.
INTERCONNECT_GBPS: dict[str, tuple[float, float]] = {
    "h200": (450.0, 64.0),
    "h100-sxm": (450.0, 64.0),
    "h100-pcie": (64.0, 64.0),
    "a100-80gb": (300.0, 32.0),
    "a100-40gb": (300.0, 32.0),
    "l40s": (32.0, 32.0),
    "l4": (32.0, 32.0),
    "a10": (32.0, 32.0),
    "t4": (16.0, 16.0),
}


def efficiency_for(profile: str) -> Efficiency:
    """The fitted efficiency of ``profile``, or that of the architecture it borrows from."""
    profile = profile.lower()
    fitted = FITTED_EFFICIENCY.get(profile) or FITTED_EFFICIENCY.get(_BORROWED_FROM.get(profile, ""))
    if fitted is None:
        raise ValueError(f"no efficiency for GPU profile {profile!r}; known: {', '.join(GPU_TABLE)}")
    return fitted


def roofline_s(flops: float, num_bytes: float, peak_flops: float, bandwidth: float, knee: float) -> float:
    """Smooth max of the compute and memory times (peak_flops in FLOP/s, bandwidth in B/s, both achieved)."""
    tc = flops / peak_flops
    tm = num_bytes / bandwidth
    if tc == 0.0 or tm == 0.0:
        return tc + tm
    hi = max(tc, tm)
    return hi * ((tc / hi) ** knee + (tm / hi) ** knee) ** (1.0 / knee)


def linear_shapes(model: ModelConfig, tp: int) -> tuple[tuple[str, int, int], ...]:
    """(name, K, N) of each linear operator of one layer on one TP rank (names as in the Vidur CSVs)."""
    h, hd, inter = model.hidden_size, model.head_dim, model.intermediate_size
    q = model.num_attention_heads * hd // tp
    kv = model.num_key_value_heads * hd // tp
    return (
        ("attn_pre_proj", h, q + 2 * kv),
        ("attn_post_proj", q, h),
        ("mlp_up_proj", h, 2 * inter // tp),
        ("mlp_down_proj", inter // tp, h),
    )


def elementwise_bytes_per_token(model: ModelConfig, tp: int) -> tuple[tuple[str, float, int], ...]:
    """(name, bytes moved per token, times per layer) of each elementwise operator on one TP rank."""
    h, hd = model.hidden_size, model.head_dim
    qk = (model.num_attention_heads + model.num_key_value_heads) * hd // tp
    b = BYTES_PER_VALUE
    return (
        ("input_layernorm", 2 * h * b, 1),
        ("post_attention_layernorm", 2 * h * b, 1),
        ("attn_rope", 2 * qk * b, 1),
        ("mlp_act", 3 * model.intermediate_size // tp * b, 1),
        ("add", 3 * h * b, 2),
    )


def linear_op_s(k: int, n: int, num_tokens: int, gpu: GpuSpec, eff: Efficiency) -> float:
    flops = 2.0 * num_tokens * k * n
    num_bytes = BYTES_PER_VALUE * (k * n + num_tokens * (k + n))
    peak = gpu.peak_tflops * 1e12 * eff.compute
    bandwidth = gpu.memory_bandwidth_gbps * 1e9 * eff.memory
    return eff.linear_overhead_s + roofline_s(flops, num_bytes, peak, bandwidth, eff.knee)


def elementwise_op_s(bytes_per_token: float, num_tokens: int, gpu: GpuSpec, eff: Efficiency) -> float:
    bandwidth = gpu.memory_bandwidth_gbps * 1e9 * eff.elementwise_memory
    return eff.elementwise_overhead_s + bytes_per_token * num_tokens / bandwidth


def op_times_s(model: ModelConfig, tp: int, num_tokens: int, gpu: GpuSpec, eff: Efficiency) -> dict[str, float]:
    """Predicted time of each measured operator of one layer (one call each; the CSVs' op names)."""
    times = {name: linear_op_s(k, n, num_tokens, gpu, eff) for name, k, n in linear_shapes(model, tp)}
    for name, per_token, _ in elementwise_bytes_per_token(model, tp):
        times[name] = elementwise_op_s(per_token, num_tokens, gpu, eff)
    return times


# The network between nodes, per GPU (one 400 Gb/s InfiniBand NDR NIC per GPU, as on DGX H100), and its
# per-message latency: assumptions, for TP groups spread over several nodes.
NETWORK_GBPS = 50.0
NETWORK_LATENCY_S = 5e-6
ALLREDUCE_KINDS = ("flat", "hierarchical", "sharded")


@dataclass(frozen=True, slots=True)
class NodeHardware:
    """A node: ``tp`` GPUs of one profile serving one model with tensor parallelism.

    tp_nodes: hosts the TP group spans (tp / tp_nodes GPUs on NVLink in each, the network between them).
    allreduce / compression: how the TP all-reduce crosses hosts ("flat" ring | "hierarchical"; the
    hierarchical slow link's "none" | "bf16" | "int8"), as backends/torch/allreduce.py runs them.
    """

    profile: str
    tp: int = 1
    tp_nodes: int = 1
    allreduce: str = "flat"
    compression: str = "none"

    def __post_init__(self) -> None:
        if self.profile.lower() not in GPU_TABLE:
            raise ValueError(f"unknown GPU profile {self.profile!r}; valid: {', '.join(GPU_TABLE)}")
        object.__setattr__(self, "profile", self.profile.lower())
        if self.tp < 1 or self.tp & (self.tp - 1):
            raise ValueError(f"tp must be a power of two >= 1, got {self.tp}")
        if self.tp_nodes < 1 or self.tp % self.tp_nodes:
            raise ValueError(f"tp_nodes must divide tp={self.tp}, got {self.tp_nodes}")
        if self.allreduce not in ALLREDUCE_KINDS:
            raise ValueError(f"allreduce must be one of {ALLREDUCE_KINDS}, got {self.allreduce!r}")
        if self.compression not in COMPRESSION_BYTES:
            raise ValueError(f"compression must be one of {sorted(COMPRESSION_BYTES)}, got {self.compression!r}")

    @property
    def gpu(self) -> GpuSpec:
        return GPU_TABLE[self.profile]


def node_hardware_info(hardware: NodeHardware) -> HardwareInfo:
    """What a simulated node says in its hello: the datasheet of one GPU times the TP degree (a TP node is
    one serving unit with tp x the bandwidth, compute and memory)."""
    spec = hardware.gpu
    tp = hardware.tp
    return HardwareInfo(
        device_name=f"{tp} x {spec.gpu_type} (simulated)" if tp > 1 else f"{spec.gpu_type} (simulated)",
        gpu_type=spec.gpu_type,
        compute_capability=spec.compute_capability,
        memory_gib=spec.memory_gib * tp,
        memory_bandwidth_gbps=spec.memory_bandwidth_gbps * tp,
        peak_tflops=spec.peak_tflops * tp,
        source=f"profile:{spec.profile}",
    )


def num_kv_blocks(
    model: ModelConfig,
    hardware: NodeHardware,
    block_size: int,
    gpu_memory_utilization: float = 0.9,
    activation_reserve_gib: float = 1.5,
) -> int:
    """Device KV blocks of a node: GPU memory (x utilization) minus weights minus an activation reserve,
    over all TP ranks; 0 when the weights do not fit."""
    per_gpu = hardware.gpu.memory_gib * 2**30 * gpu_memory_utilization - activation_reserve_gib * 2**30
    free = hardware.tp * per_gpu - weight_bytes(model, BYTES_PER_VALUE)
    return max(0, int(free // (kv_bytes_per_token(model, BYTES_PER_VALUE) * block_size)))


class StepCostModel:
    """Predicts a step's time on one node. The per-layer cost of T batched tokens (linear + elementwise +
    all-reduce) depends on T only and is memoised; attention is computed from the batch's contexts.

    Call ``step_time_s`` with the batch's aggregates (see ``SimModelRunner.execute``)::

        num_tokens      tokens computed this step (T)
        num_seqs        requests in the step
        num_sampled     requests that sample (LM head rows)
        attn_flop_units sum over requests of q_len * (start_pos + (q_len + 1) / 2)
        kv_read_tokens  sum over requests of start_pos (cached positions whose K/V is read; the new
                        tokens' K/V is counted on top)
        swap_blocks     KV blocks moved over the host link;  copy_blocks: KV blocks copied on the device
    """

    def __init__(
        self, model: ModelConfig, hardware: NodeHardware, efficiency: Efficiency | None = None, block_size: int = 16
    ) -> None:
        self.model = model
        self.hardware = hardware
        self.efficiency = efficiency_for(hardware.profile) if efficiency is None else efficiency
        self.block_size = block_size
        gpu, eff, tp = hardware.gpu, self.efficiency, hardware.tp
        if model.num_attention_heads % tp or (model.num_key_value_heads % tp and model.num_key_value_heads > tp):
            raise ValueError(f"{model.name}: heads do not split over tp={tp}")
        self._gpu = gpu
        self._peak_attn = gpu.peak_tflops * 1e12 * eff.attention_compute
        self._bw_attn = gpu.memory_bandwidth_gbps * 1e9 * eff.attention_memory
        heads_per_rank = model.num_attention_heads / tp
        kv_heads_per_rank = max(1.0, model.num_key_value_heads / tp)  # KV heads are replicated below tp
        self._attn_flops_per_unit = 4.0 * heads_per_rank * model.head_dim
        self._kv_bytes_per_token_layer = 2.0 * kv_heads_per_rank * model.head_dim * BYTES_PER_VALUE
        link_gbps, host_gbps = INTERCONNECT_GBPS[hardware.profile]
        self._link_bw = link_gbps * 1e9 * eff.link_efficiency
        self.link = tp_link_model(hardware, eff)
        self._host_bw = host_gbps * 1e9 * eff.link_efficiency
        self._block_bytes_per_rank = kv_bytes_per_token(model, BYTES_PER_VALUE) * block_size / tp
        self._layer_cache: dict[int, float] = {}
        self._linear = linear_shapes(model, tp)
        self._elementwise = elementwise_bytes_per_token(model, tp)
        head_n = model.vocab_size // tp
        self._head = (model.hidden_size, head_n)

    def layer_time_s(self, num_tokens: int) -> float:
        """Linear + elementwise + all-reduce time of one layer for ``num_tokens`` tokens (memoised)."""
        t = self._layer_cache.get(num_tokens)
        if t is not None:
            return t
        gpu, eff = self._gpu, self.efficiency
        t = sum(linear_op_s(k, n, num_tokens, gpu, eff) for _, k, n in self._linear)
        t += sum(count * elementwise_op_s(b, num_tokens, gpu, eff) for _, b, count in self._elementwise)
        t += 2 * self.all_reduce_s(num_tokens * self.model.hidden_size * BYTES_PER_VALUE)
        self._layer_cache[num_tokens] = t
        return t

    def all_reduce_s(self, num_bytes: float) -> float:
        hw = self.hardware
        if hw.tp == 1:
            return 0.0
        if hw.allreduce == "hierarchical":
            return self.link.hierarchical_all_reduce_s(hw.tp, num_bytes, hw.compression, BYTES_PER_VALUE)
        if hw.allreduce == "sharded":
            return self.link.sharded_all_reduce_s(hw.tp, num_bytes, hw.compression, BYTES_PER_VALUE)
        return self.link.ring_all_reduce_s(hw.tp, num_bytes)

    def attention_s(self, attn_flop_units: float, kv_read_tokens: int, num_tokens: int) -> float:
        """One layer's attention: causal QK^T and PV FLOPs against the K/V of the contexts read once."""
        flops = self._attn_flops_per_unit * attn_flop_units
        num_bytes = self._kv_bytes_per_token_layer * (kv_read_tokens + num_tokens)
        return self.efficiency.linear_overhead_s + roofline_s(
            flops, num_bytes, self._peak_attn, self._bw_attn, self.efficiency.knee
        )

    def step_time_s(
        self,
        num_tokens: int,
        num_seqs: int,
        num_sampled: int,
        attn_flop_units: float,
        kv_read_tokens: int,
        swap_blocks: int = 0,
        copy_blocks: int = 0,
    ) -> float:
        eff = self.efficiency
        t = eff.step_overhead_s + eff.per_seq_overhead_s * num_seqs
        t += swap_blocks * self._block_bytes_per_rank / self._host_bw
        t += copy_blocks * 2 * self._block_bytes_per_rank / (self._gpu.memory_bandwidth_gbps * 1e9 * eff.memory)
        if num_tokens == 0:
            return t
        per_layer = self.layer_time_s(num_tokens) + self.attention_s(attn_flop_units, kv_read_tokens, num_tokens)
        t += self.model.num_hidden_layers * per_layer
        t += elementwise_op_s(2 * self.model.hidden_size * BYTES_PER_VALUE, num_tokens, self._gpu, eff)  # embed
        if num_sampled:
            k, n = self._head
            t += linear_op_s(k, n, num_sampled, self._gpu, eff)
        return t

    # -- convenience for capacity estimates ------------------------------------------------------

    def prefill_time_s(self, num_prompt_tokens: int, chunk_tokens: int) -> float:
        """Time to prefill one prompt alone in chunks of ``chunk_tokens``."""
        t, done = 0.0, 0
        while done < num_prompt_tokens:
            q = min(chunk_tokens, num_prompt_tokens - done)
            t += self.step_time_s(q, 1, int(done + q == num_prompt_tokens), q * (done + (q + 1) / 2), done)
            done += q
        return t

    def decode_step_s(self, batch_size: int, mean_context_tokens: float) -> float:
        """A decode-only step of ``batch_size`` sequences of ``mean_context_tokens`` each."""
        ctx = int(batch_size * mean_context_tokens)
        return self.step_time_s(batch_size, batch_size, batch_size, ctx, ctx)

    def with_efficiency(self, **changes: float) -> StepCostModel:
        return StepCostModel(self.model, self.hardware, replace(self.efficiency, **changes), self.block_size)


def saturation_throughput_req_per_s(
    cost: StepCostModel,
    mean_prompt_tokens: float,
    mean_output_tokens: float,
    num_kv_tokens: int,
    max_num_seqs: int,
    chunk_tokens: int,
) -> float:
    """Requests/s one node sustains for a stream of mean-sized requests (an analytic capacity, used to scale a
    trace to a fleet): every request pays its prefill (at chunk size, compute-bound) plus its share of decode
    steps at the largest batch that fits in KV (each sequence holding prompt + half its output on average)."""
    prompt = max(1, int(mean_prompt_tokens))
    output = max(1.0, mean_output_tokens)
    per_seq_kv = mean_prompt_tokens + output / 2 + cost.block_size
    batch = max(1, min(max_num_seqs, int(0.9 * num_kv_tokens / per_seq_kv)))
    prefill_s = cost.prefill_time_s(prompt, chunk_tokens)
    # decode steps also carry prefill chunks in a mixed batch; the marginal decode cost per token:
    decode_s_per_token = cost.decode_step_s(batch, mean_prompt_tokens + output / 2) / batch
    return 1.0 / (prefill_s + (output - 1) * decode_s_per_token) if math.isfinite(prefill_s) else 0.0


def tp_link_model(hardware: NodeHardware, eff: Efficiency) -> LinkModel:
    """The links of a node's TP group: NVLink (INTERCONNECT_GBPS, x link_efficiency) inside each of the
    ``tp_nodes`` hosts, the network between them. ``link_latency_s`` is the whole ring's fixed cost on one
    host, so each of its 2 (tp - 1) steps carries an equal share."""
    link_gbps, _ = INTERCONNECT_GBPS[hardware.profile]
    per_node = hardware.tp // hardware.tp_nodes
    steps = 2 * max(1, hardware.tp - 1)
    return LinkModel(
        domain_size=per_node,
        fast_gbps=link_gbps * eff.link_efficiency,
        slow_gbps=NETWORK_GBPS * eff.link_efficiency,
        fast_latency_us=eff.link_latency_s / steps * 1e6,
        slow_latency_us=NETWORK_LATENCY_S * 1e6,
    )
