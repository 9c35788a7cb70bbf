"""What a routing policy sees and answers. Sans-IO: policies are pure functions of a snapshot and a
request (plus their own state), so the control plane and the fleet simulator run them unchanged."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from controlplane.router.node_changes import ChangeMark


@dataclass(frozen=True, slots=True)
class NodeView:
    """One live node as the router sees it: static facts from its hello, load from its last report,
    and the control plane's own fresher in-flight counts (requests routed but not yet reported)."""

    node_id: str
    gpu_type: str
    cell: str
    model: str
    power_score: float
    memory_bandwidth_gbps: float
    peak_tflops: float
    max_model_len: int
    block_size: int
    num_device_blocks: int
    # from the last LoadReport
    num_free_device_blocks: int
    kv_usage: float
    num_running: int
    num_waiting: int
    num_swapped: int
    queued_prefill_tokens: int
    decode_batch_size: int
    prefill_tok_per_s: float  # 0 = not measured yet
    decode_step_ms: float  # 0 = not measured yet
    # the control plane's own counts
    num_inflight: int  # routed here, not finished
    inflight_prefill_tokens: int  # prompt tokens routed here that the last report cannot know about yet
    max_loras: int = 0  # LoRA device slots (hello); 0 = serves the base model only
    lora_resident: tuple[str, ...] = ()  # adapters in its device slots (last report)
    lora_load_s: float = 0.0  # its measured mean adapter load time (last report); 0: not measured yet
    host: str = ""  # placement (hello): KV links priced by it (backends/kv_link_model.py); "": not said
    rack: str = ""
    prefix_hash_algo: str = "sha256"  # how it names prefix blocks (hello): the router hashes prompts the same way
    step_mean_ms: float = 0.0  # last report: mean time of its steps with decode rows, mixed ones too; 0: none
    # the control plane's own: the mean of 1 / (max_tokens - 1) (at least 1) over the requests it has seen decode
    # there (first token relayed, not finished, max_tokens known): the decode steps they run, as a harmonic mean
    # (RouterConfig.slo_tpot_harm_decoders); 0.0: none
    decode_inv_steps: float = 0.0
    # the control plane's own: those decoders counted per bin of their decode steps, max_tokens - 1 (at least 1), the
    # bins of router/decode_steps.py (RouterConfig.slo_tpot_harm_count); empty: none
    decode_steps_hist: tuple[int, ...] = ()
    # last report: its decoders a delay could push over their TPOT target, counted per bin by the delay each still
    # absorbs, in milliseconds (LoadReport.decode_slack_hist, engine/decode_slack.py; RouterConfig.
    # slo_tpot_harm_reported); empty: none
    decode_slack_hist: tuple[int, ...] = ()
    speculates: bool = (
        False  # it speculates (hello): a predicted output is drafted from (router/prediction_affinity.py)
    )


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    now_s: float
    nodes: tuple[NodeView, ...]
    # the registry's change log position (router/node_changes.py): which nodes changed since an older
    # snapshot of the same group; None for a snapshot built or filtered by hand (never copy it onto one)
    changes: ChangeMark | None = None


@dataclass(frozen=True, slots=True)
class RouteRequest:
    request_id: str
    model: str
    num_prompt_tokens: int
    max_tokens: int
    block_hashes: tuple[int, ...]  # hash chain of the prompt's full blocks (prefix-cache keys)
    traffic_class: str = "default"
    slo_ttft_s: float | None = None  # its class's targets (controlplane/cells.py); None: the router's
    slo_tpot_s: float | None = None
    lora_name: str | None = None  # the LoRA adapter it runs with (``model`` is then its base model)
    goodput_first: bool | None = None  # its class's choice of the goodput-first rule (tpot_lost.py); None: the router's


class Policy(Protocol):
    """A routing policy, chosen by name at start-up (controlplane/router/policies/__init__.py). The control
    plane and the fleet simulator call ``on_routed``, ``on_first_token`` and ``on_finished`` for every
    request, in that order, so a policy can keep its own fresh books between load reports."""

    name: str

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        """The node to serve ``request``, or None when no node in the snapshot can."""
        ...

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        """Called after the control plane sent ``request`` to ``node_id`` (policies with memory)."""
        ...

    def on_first_token(self, request_id: str, node_id: str) -> None:
        """The request's first token came back: its prefill is done (router-side load books)."""
        ...

    def on_finished(self, request_id: str, node_id: str) -> None:
        """The request finished, failed or was cancelled."""
        ...

    def on_node_removed(self, node_id: str) -> None: ...

    def on_prefix_cache_reset(self, node_id: str) -> None: ...


class PolicyHooks:
    """The feedback hooks of ``Policy``, doing nothing: a policy inherits them and overrides the ones its own
    books need."""

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        pass

    def on_first_token(self, request_id: str, node_id: str) -> None:
        pass

    def on_finished(self, request_id: str, node_id: str) -> None:
        pass

    def on_node_removed(self, node_id: str) -> None:
        pass

    wants_kv_events = False  # True: the nodes' KV cache events are delivered to on_kv_events (engine/kv/kv_events.py)
    wants_kv_snapshot = False  # True: each node's cache at its Welcome (a clear, then its blocks), to on_kv_events

    def on_kv_events(self, node_id: str, events: list) -> None:
        """The node's KV cache events since its last ones (engine/kv/kv_events.py: BlockStored, BlockRemoved,
        AllBlocksCleared), in order; delivered where ``wants_kv_events`` (zoo sim: after each of its steps), or the
        node's cache once at its Welcome where ``wants_kv_snapshot`` (the control plane only)."""

    def on_prefix_cache_reset(self, node_id: str) -> None:
        """The node forgot its prefix cache (POST /reset_prefix_cache: controlplane/prefix_reset.py): a policy that
        tracks what nodes cache forgets what it thought this one held."""
