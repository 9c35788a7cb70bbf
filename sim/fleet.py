"""Fleets of simulated GPU nodes, described in TOML.

A fleet serves one model. Its nodes are grouped in **cells**: a cell is a pool of nodes that serves some
traffic classes (requests carry a class; a class no cell lists may go to any node). A pool is ``count``
nodes of one GPU profile (backends/gpu_table.py), each ``tp`` GPUs wide::

    name = "zoo"
    model = "sim:llama-3-8b"             # backends/sim/model_shapes.py
    [scheduler]                          # optional: SchedulerConfig / CacheConfig fields of every node
    max_num_batched_tokens = 2048
    step_budget = "sarathi"              # optional: "sarathi" (per node, from its profile and the TPOT SLO) | <int>
    [[cells]]
    name = "interactive"
    traffic_classes = ["conv"]           # empty or absent: this cell takes no class exclusively
    [[cells.pools]]
    gpu = "h100-sxm"
    count = 4
    tp = 1
    # tp_nodes = 2                       # optional: the TP group spans hosts (backends/sim/cost_model.py)
    # allreduce = "hierarchical"         # "flat" | "hierarchical"; compression = "none" | "bf16" | "int8"

Node ids are ``<cell>/<profile>-<i>`` (i counted per cell and profile), in file order. A
``[[traffic_classes]]`` section (home cell, spill rules, priority, SLOs: controlplane/cells.py) is read
as the control plane reads it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from agent.node_core import NodeCore
from backends.checkpoint.model_config import ModelConfig
from backends.sim.cost_model import NodeHardware, StepCostModel, num_kv_blocks, saturation_throughput_req_per_s
from backends.sim.engine import build_sim_engine
from backends.sim.model_shapes import kv_bytes_per_token, sim_model
from backends.sim.paced_runner import DEFAULT_MAX_CATCH_UP_S
from controlplane.cells import CellsConfig, parse_cells
from controlplane.registry import ClusterRegistry
from controlplane.toml_file import load_toml
from engine.clock import Clock
from engine.config import CacheConfig, PreemptionMode, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraConfig

FLEETS_DIR = Path(__file__).resolve().parent / "fleets"
STEP_BUDGET_SARATHI = "sarathi"


@dataclass(frozen=True, slots=True)
class NodeSpec:
    node_id: str
    cell: str
    hardware: NodeHardware


@dataclass(slots=True)
class EngineSettings:
    """Per-node engine settings (vLLM-like defaults). KV blocks follow from GPU memory (cost_model)."""

    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 256
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    preemption_mode: str = "swap"
    block_size: int = 16
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = 0.9
    swap_space_gib: float = 4.0  # host RAM per GPU for swapped KV
    lora: LoraConfig | None = None  # serve LoRA adapters (simulated slots); None = base model only
    # each node's step token budget: an int = that budget on every node; "sarathi" = sized per node from its
    # start-up profile and tpot_slo_s (engine/step_budget.py), at most max_num_batched_tokens; None = the
    # fleet-wide max_num_batched_tokens. Fleet capacity (the load scaling) uses max_num_batched_tokens either way.
    step_budget: str | int | None = None
    tpot_slo_s: float = 0.1  # the operator's TPOT SLO that "sarathi" sizes against (zoo sim --slo-tpot)
    # how the nodes (and so the router) name prefix blocks (engine/kv/block_hash.py). xxhash here, not the product's
    # sha256: a simulated fleet's figures come from the cost model, never from a hash value (a name only decides
    # which blocks match, and either algorithm matches the same blocks: scripts/sim_identical.py checks a run
    # against sha256), and hashing was a fifth of the simulator's CPU time (bench/results/2026-12-03-sim-hash-algo.json)
    prefix_hash_algo: str = "xxhash"

    def __post_init__(self) -> None:
        if isinstance(self.step_budget, bool) or not (
            self.step_budget is None
            or self.step_budget == STEP_BUDGET_SARATHI
            or (isinstance(self.step_budget, int) and self.step_budget >= 1)
        ):
            raise ValueError(f"step_budget must be {STEP_BUDGET_SARATHI!r} or a positive int, got {self.step_budget!r}")

    @property
    def fixed_budget_tokens(self) -> int:
        """The budget every node is built with (``sarathi`` then lowers it per node)."""
        return self.step_budget if isinstance(self.step_budget, int) else self.max_num_batched_tokens

    def describe_step_budget(self) -> str:
        if self.step_budget == STEP_BUDGET_SARATHI:
            return f"sarathi (per node, TPOT SLO {1e3 * self.tpot_slo_s:g} ms, at most {self.max_num_batched_tokens})"
        return f"{self.fixed_budget_tokens} tokens on every node"

    def size_step_budget(self, core: NodeCore) -> int:
        """After ``core.profile()``: the node's budget, sized by its profile under ``sarathi``."""
        if self.step_budget == STEP_BUDGET_SARATHI:
            return core.size_step_budget(self.tpot_slo_s).tokens
        return core.engine.scheduler_config.max_num_batched_tokens

    def scheduler_config(self, model: ModelConfig) -> SchedulerConfig:
        return SchedulerConfig(
            max_num_batched_tokens=self.fixed_budget_tokens,
            max_num_seqs=self.max_num_seqs,
            max_model_len=min(self.max_model_len, model.max_position_embeddings),
            enable_chunked_prefill=self.enable_chunked_prefill,
            preemption_mode=PreemptionMode(self.preemption_mode),
        )

    def cache_config(self, model: ModelConfig, hardware: NodeHardware) -> CacheConfig:
        num_device = num_kv_blocks(model, hardware, self.block_size, self.gpu_memory_utilization)
        if num_device < 1:
            raise ValueError(f"{model.name} does not fit on {hardware.tp} x {hardware.profile} (no KV room)")
        block_bytes = kv_bytes_per_token(model) * self.block_size
        num_host = int(self.swap_space_gib * 2**30 * hardware.tp // block_bytes)
        return CacheConfig(
            block_size=self.block_size,
            num_device_blocks=num_device,
            num_host_blocks=num_host,
            enable_prefix_caching=self.enable_prefix_caching,
            prefix_hash_algo=self.prefix_hash_algo,
        )


@dataclass(slots=True)
class Fleet:
    name: str
    model: ModelConfig
    nodes: list[NodeSpec]
    engine: EngineSettings = field(default_factory=EngineSettings)
    cells_by_traffic_class: dict[str, str] = field(default_factory=dict)
    cells: CellsConfig = field(default_factory=CellsConfig)  # cells, classes, spill rules, priorities, SLOs

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError(f"fleet {self.name!r} has no nodes")
        ids = [n.node_id for n in self.nodes]
        if len(set(ids)) != len(ids):
            raise ValueError(f"fleet {self.name!r}: duplicate node ids")
        for node in self.nodes:  # fail now, not in the middle of a run
            self.engine.cache_config(self.model, node.hardware)

    @property
    def gpu_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for n in self.nodes:
            counts[n.hardware.profile] = counts.get(n.hardware.profile, 0) + n.hardware.tp
        return counts

    def node_capacity_req_per_s(self, node: NodeSpec, mean_prompt_tokens: float, mean_output_tokens: float) -> float:
        """Requests/s ``node`` sustains for mean-sized requests (cost_model.saturation_throughput_req_per_s)."""
        engine = self.engine
        cost = StepCostModel(self.model, node.hardware, block_size=engine.block_size)
        num_kv_tokens = engine.cache_config(self.model, node.hardware).num_device_blocks * engine.block_size
        return saturation_throughput_req_per_s(
            cost,
            mean_prompt_tokens,
            mean_output_tokens,
            num_kv_tokens,
            engine.max_num_seqs,
            engine.max_num_batched_tokens,
        )

    def capacity_req_per_s(self, mean_prompt_tokens: float, mean_output_tokens: float) -> float:
        """The fleet's capacity for mean-sized requests: the sum over its nodes."""
        return sum(self.node_capacity_req_per_s(n, mean_prompt_tokens, mean_output_tokens) for n in self.nodes)

    def node_engine(
        self,
        node: NodeSpec,
        *,
        clock: Clock | None = None,
        realtime: bool = False,
        max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
    ) -> LLMEngine:
        """The engine of ``node`` with this fleet's settings: paced in real time (a simulated agent) or
        predicting step times on ``clock`` without text (the fleet simulator)."""
        hardware = node.hardware
        return build_sim_engine(
            self.model.name,
            hardware.profile,
            hardware.tp,
            scheduler_config=self.engine.scheduler_config(self.model),
            cache_config=self.engine.cache_config(self.model, hardware),
            keep_cache_blocks=True,
            realtime=realtime,
            max_catch_up_s=max_catch_up_s,
            clock=clock,
            detokenize=realtime,
            hardware=hardware,
            lora_config=self.engine.lora,
        )

    def make_registry(self, clock: Clock) -> ClusterRegistry:
        """The control plane's registry for one simulator run (sim/spec_pair_nodes.py adds its pairing)."""
        return ClusterRegistry(clock, heartbeat_timeout_s=1e18)

    def describe(self) -> str:
        parts = []
        for (cell, profile, tp), count in self._pools().items():
            parts.append(f"{count}x{profile}" + (f"(tp{tp})" if tp > 1 else "") + (f"@{cell}" if cell else ""))
        return f"{self.name}: {', '.join(parts)} serving {self.model.name}"

    def _pools(self) -> dict[tuple[str, str, int], int]:
        pools: dict[tuple[str, str, int], int] = {}
        single_cell = len({n.cell for n in self.nodes}) == 1
        for n in self.nodes:
            key = ("" if single_cell else n.cell, n.hardware.profile, n.hardware.tp)
            pools[key] = pools.get(key, 0) + 1
        return pools


def parse_fleet(data: dict, name: str = "fleet") -> Fleet:
    """A fleet from a parsed TOML document: its cells and traffic classes are controlplane/cells.py's (the
    control plane reads the same sections with ``zoo controlplane --cells FILE``); other top-level keys
    (``[controlplane]``, ``[[agents]]`` of a zoo.toml) are not the simulator's and are ignored."""
    model = sim_model(data.get("model", "sim:llama-3-8b"))
    engine = EngineSettings(**data.get("scheduler", {}))
    cells = parse_cells(data, f"fleet {name!r}")
    if not any(cell.pools for cell in cells.cells):
        raise ValueError(f"fleet {name!r}: at least one [[cells]] with [[cells.pools]] is required")
    nodes: list[NodeSpec] = []
    for cell in cells.cells:
        counters: dict[str, int] = {}
        for pool in cell.pools:
            hardware = NodeHardware(
                pool.gpu, pool.tp, tp_nodes=pool.tp_nodes, allreduce=pool.allreduce, compression=pool.compression
            )
            for _ in range(pool.count):
                i = counters.get(hardware.profile, 0)
                counters[hardware.profile] = i + 1
                nodes.append(NodeSpec(f"{cell.name}/{hardware.profile}-{i:02d}", cell.name, hardware))
    return Fleet(data.get("name", name), model, nodes, engine, cells.cells_by_traffic_class(), cells)


def load_fleet(path_or_name: str | Path) -> Fleet:
    """A fleet TOML file, or the name of one in sim/fleets (``zoo``, ``small`` ...)."""
    path = Path(path_or_name)
    if not path.is_file():
        candidate = FLEETS_DIR / f"{path_or_name}.toml"
        if not candidate.exists():
            known = ", ".join(sorted(p.stem for p in FLEETS_DIR.glob("*.toml")))
            raise FileNotFoundError(f"fleet {str(path_or_name)!r} not found (bundled fleets: {known})")
        path = candidate
    return parse_fleet(load_toml(path), path.stem)
