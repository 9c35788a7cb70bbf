"""Cells and traffic classes: the one description the control plane (`zoo controlplane`, `zoo up`) and the
fleet simulator (`zoo sim`, sim/sim_agents.py) read from the same TOML.

A **cell** is a pool of nodes: those whose GPU type it lists, or whose agent names it (``zoo agent --cell``
— a label); in a simulated fleet also the ``pools`` of simulated GPUs it holds. A **traffic class** is a
kind of request (``vip``, ``standard``, ``batch`` …), chosen by the request (``traffic_class`` on the
wire, ``x-zoo-class`` / a ``traffic_class`` body field over HTTP) or by its API key's tenant
(controlplane/tenants.py). Each class has a home cell, may *spill* into other cells — borrowing their idle
nodes (nothing queued there) when its own cell would queue or refuse it — and never the reverse: two cells
whose classes spill into each other are refused. Its priority orders it inside an engine (a higher one
swaps a lower one out, engine/scheduler.py), its SLOs are what the router aims for
(``RouteRequest.slo_ttft_s``) and its queue limit is what admission allows it per node::

    [[cells]]
    name = "fast"
    gpu_types = ["H100", "A100-80GB"]      # nodes with these GPUs (hello's gpu_type; case-insensitive)
    [[cells.pools]]                         # zoo sim / sim_agents only: simulated nodes of this cell
    gpu = "h100-sxm"
    count = 2

    [[cells]]
    name = "bulk"
    gpu_types = ["L4"]

    [[traffic_classes]]
    name = "vip"
    cell = "fast"
    spill_to = ["bulk"]                     # may borrow bulk's idle nodes; bulk's classes never borrow fast's
    priority = 2
    slo_ttft_s = 0.5
    slo_tpot_s = 0.05

    [[traffic_classes]]
    name = "batch"
    cell = "bulk"
    priority = 0
    max_queue_per_node = 8                  # refused (429) beyond this many queued on its node
    slo_ttft_s = 30.0
    shed_past_slo = true                    # refused (429) where the node's prefill backlog exceeds 30 s

A request naming no class (``"default"``) gets ``default_class`` (or the class named "default", or the
first listed). With ``[[traffic_classes]]`` configured, an unknown class is refused (400, param
``traffic_class``). The older form — a cell's ``traffic_classes = ["conv"]`` list without a
``[[traffic_classes]]`` section — still works: each listed class calls that cell home, and a class no cell
lists may go to any node. Sans-IO: plain structs and lookups.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

DEFAULT_CLASS = "default"  # what a request that names no class carries


class PoolSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """``count`` simulated nodes of GPU profile ``gpu`` (backends/gpu_table.py), each ``tp`` GPUs wide, spread
    over ``tp_nodes`` hosts whose all-reduce is ``allreduce`` (flat / hierarchical / sharded) with ``compression``
    on the link between hosts (backends/link_model.py; checked by NodeHardware)."""

    gpu: str
    count: int = 1
    tp: int = 1
    tp_nodes: int = 1
    allreduce: str = "flat"
    compression: str = "none"

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"pool {self.gpu!r}: count must be >= 1, got {self.count}")
        if self.tp < 1:
            raise ValueError(f"pool {self.gpu!r}: tp must be >= 1, got {self.tp}")


class CellSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """name: the cell's name (node ids of simulated nodes start ``<name>/``).
    gpu_types: a real node whose hello's GPU type is one of these joins this cell (unless its agent names a cell).
    traffic_classes: the older form: classes that call this cell home (see the module docstring).
    pools: simulated nodes of this cell (zoo sim, sim_agents)."""

    name: str
    gpu_types: list[str] = []
    traffic_classes: list[str] = []
    pools: list[PoolSpec] = []

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name:
            raise ValueError(f"a cell needs a non-empty name without '/', got {self.name!r}")


MAX_CLASS_PRIORITY = 1 << 20
REQUEST_PRIORITY_RANGE = (-(1 << 31), (1 << 31) - 1)  # a request's own priority (vLLM's ``priority``), inclusive
# the field as the gateway decodes it: out of range is a 400 naming ``priority`` (vLLM takes int64; 32 bits here)
RequestPriority = Annotated[int, msgspec.Meta(ge=REQUEST_PRIORITY_RANGE[0], le=REQUEST_PRIORITY_RANGE[1])]


def engine_priority(class_priority: int, request_priority: int = 0) -> int:
    """A request's priority inside an engine (higher runs first, engine/scheduler.py): its class's first, then its
    own, vLLM's ``priority`` (lower runs earlier; vllm/entrypoints/openai/chat_completion/protocol.py), which orders
    requests of one class only. Both bounded, so the product fits the wire's 64-bit integer."""
    return class_priority * (1 << 32) - request_priority


class TrafficClass(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """name: the class's name. cell: its home cell (None: any node). spill_to: cells whose idle nodes it may
    borrow. priority: higher runs first inside an engine. slo_ttft_s / slo_tpot_s: its latency targets for the
    router (None: the router's). max_queue_per_node: admission's per-node queue limit for it (None: the
    control plane's). shed_past_slo: admission refuses it (429) on a node whose prefill backlog alone already
    exceeds slo_ttft_s (it would miss its SLO, and delay the others), trying the policy's next-best node.
    goodput_first: hardware_aware's goodput-first rule for this class's requests (RouterConfig.slo_tpot_lost_to_doomed:
    a request no node is predicted to decode within its TPOT target goes to a node that misses it anyway; True or
    False; None: the router's setting), so a batch class can put goodput first while an interactive one keeps its
    tail."""

    name: str
    cell: str | None = None
    spill_to: list[str] = []
    priority: int = 0
    slo_ttft_s: float | None = None
    slo_tpot_s: float | None = None
    max_queue_per_node: int | None = None
    shed_past_slo: bool = False
    goodput_first: bool | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a traffic class needs a non-empty name")
        if not -MAX_CLASS_PRIORITY <= self.priority <= MAX_CLASS_PRIORITY:
            raise ValueError(f"traffic class {self.name!r}: priority must be within ±{MAX_CLASS_PRIORITY}")
        if self.shed_past_slo and self.slo_ttft_s is None:
            raise ValueError(f"traffic class {self.name!r}: shed_past_slo needs slo_ttft_s")
        for name in ("slo_ttft_s", "slo_tpot_s"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"traffic class {self.name!r}: {name} must be > 0, got {value}")
        if self.max_queue_per_node is not None and self.max_queue_per_node < 0:
            raise ValueError(f"traffic class {self.name!r}: max_queue_per_node must be >= 0")
        if self.cell is not None and self.cell in self.spill_to:
            raise ValueError(f"traffic class {self.name!r}: spill_to lists its own cell {self.cell!r}")


class CellsConfig(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The cells and classes of one fleet (see the module docstring). Empty: one pool, one class."""

    cells: list[CellSpec] = []
    traffic_classes: list[TrafficClass] = []
    default_class: str | None = None

    def __post_init__(self) -> None:
        cell_names = [c.name for c in self.cells]
        if len(set(cell_names)) != len(cell_names):
            raise ValueError(f"cells: duplicate names in {cell_names}")
        owner: dict[str, str] = {}
        for cell in self.cells:
            for gpu_type in cell.gpu_types:
                key = gpu_type.lower()
                if key in owner:
                    raise ValueError(f"GPU type {gpu_type!r} is listed by cells {owner[key]!r} and {cell.name!r}")
                owner[key] = cell.name
        explicit = {c.name: c for c in self.traffic_classes}
        if len(explicit) != len(self.traffic_classes):
            raise ValueError("traffic_classes: duplicate names")
        listed: dict[str, str] = {}
        for cell in self.cells:
            for name in cell.traffic_classes:
                if name in listed:
                    raise ValueError(f"traffic class {name!r} is listed by cells {listed[name]!r} and {cell.name!r}")
                if name in explicit and explicit[name].cell not in (None, cell.name):
                    home = explicit[name].cell
                    raise ValueError(f"traffic class {name!r}: cell {home!r}, but {cell.name!r} lists it")
                listed[name] = cell.name
        known = set(cell_names)
        for tc in self.traffic_classes:
            for cell in ([tc.cell] if tc.cell is not None else []) + tc.spill_to:
                if cell not in known:
                    raise ValueError(f"traffic class {tc.name!r}: unknown cell {cell!r} (cells: {sorted(known)})")
        cycle = _spill_cycle({(self.home_cell(tc.name), to) for tc in self.traffic_classes for to in tc.spill_to})
        if cycle:
            raise ValueError(
                f"cells {' -> '.join(repr(c) for c in cycle)} spill into each other: a class may borrow another "
                "cell's idle capacity, never the reverse"
            )
        if self.default_class is not None and self.default_class not in explicit:
            raise ValueError(f"default_class {self.default_class!r} is not a configured traffic class")

    # -- lookups -----------------------------------------------------------------------------------

    @property
    def strict(self) -> bool:
        """Classes are configured explicitly: an unknown class is refused."""
        return bool(self.traffic_classes)

    def classes(self) -> dict[str, TrafficClass]:
        """Every class by name: the explicit ones, and those only a cell's list names (home there)."""
        out = {tc.name: tc for tc in self.traffic_classes}
        for cell in self.cells:
            for name in cell.traffic_classes:
                out.setdefault(name, TrafficClass(name, cell=cell.name))
        return out

    def home_cell(self, traffic_class: str) -> str | None:
        tc = self.classes().get(traffic_class)
        if tc is None:
            return None
        if tc.cell is not None:
            return tc.cell
        return next((c.name for c in self.cells if traffic_class in c.traffic_classes), None)

    def resolve(self, traffic_class: str) -> TrafficClass | None:
        """The class a request naming ``traffic_class`` gets; None: no class (any node, priority 0).
        ValueError for an unknown class when classes are configured (``strict``)."""
        classes = self.classes()
        tc = classes.get(traffic_class)
        if tc is not None:
            return tc if tc.cell is not None else msgspec.structs.replace(tc, cell=self.home_cell(tc.name))
        if not self.strict:
            return None
        if traffic_class == DEFAULT_CLASS or not traffic_class:
            first = self.traffic_classes[0].name
            return self.resolve(self.default_class or (DEFAULT_CLASS if DEFAULT_CLASS in classes else first))
        raise ValueError(f"unknown traffic class {traffic_class!r} (configured: {sorted(classes)})")

    def cell_of_node(self, label: str, gpu_type: str) -> str:
        """The cell of a node whose agent says ``label`` (``--cell``) and whose GPU is ``gpu_type``: the label
        when it names a configured cell, else the cell listing the GPU type, else the label unchanged."""
        if any(c.name == label for c in self.cells):
            return label
        key = gpu_type.lower()
        for cell in self.cells:
            if any(g.lower() == key for g in cell.gpu_types):
                return cell.name
        return label

    def cells_by_traffic_class(self) -> dict[str, str]:
        """Class → home cell, for RouterConfig.cells_by_traffic_class (classes with a home only)."""
        return {name: cell for name in self.classes() if (cell := self.home_cell(name)) is not None}


def parse_cells(data: dict[str, Any], source: str = "config") -> CellsConfig:
    """The ``cells``, ``traffic_classes`` and ``default_class`` of a parsed TOML document (other keys are
    the caller's); ValueError naming the file and the field for anything wrong."""
    part = {key: data[key] for key in ("cells", "traffic_classes", "default_class") if key in data}
    try:
        return msgspec.convert(part, CellsConfig)
    except msgspec.ValidationError as e:
        raise ValueError(f"{source}: {e}") from None


def load_cells(path) -> CellsConfig:
    """The cells and classes of a TOML file: a zoo.toml, or a simulated fleet's (sim/fleets/*.toml)."""
    from controlplane.toml_file import load_toml

    try:
        data = load_toml(path)
    except OSError as e:
        raise ValueError(f"cannot read the cells file {path}: {e}") from None
    return parse_cells(data, str(path))


def _spill_cycle(edges: set[tuple[str | None, str]]) -> list[str]:
    """A loop in the cell-to-cell spill graph (home cell -> a cell its classes borrow from), as the cells along
    it back to the first (A -> B -> A, or A -> B -> C -> A); empty when there is none. Homeless classes add no
    edge."""
    graph: dict[str, list[str]] = {}
    for home, to in sorted((h, t) for h, t in edges if h is not None):
        graph.setdefault(home, []).append(to)
    done: set[str] = set()
    for start in sorted(graph):
        path: list[str] = []
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, i = stack.pop()
            if i == 0:
                if node in path:
                    return [*path[path.index(node) :], node]
                if node in done:
                    continue
                path.append(node)
            nexts = graph.get(node, [])
            if i < len(nexts):
                stack.append((node, i + 1))
                stack.append((nexts[i], 0))
            else:
                done.add(path.pop())
    return []
