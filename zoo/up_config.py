"""`zoo up` configuration: a control plane and its local agents, from zoo.toml and flags.

zoo.toml may also describe cells and traffic classes (``[[cells]]``, ``[[traffic_classes]]``:
controlplane/cells.py); the control plane then reads them from the same file (``--cells zoo.toml``).
Agents join a cell by ``cell = "NAME"`` (their ``--cell``) or by their GPU type. ``[controlplane.router]`` holds
RouterConfig fields (the router's SLO, hardware_aware's terms), which the control plane reads from the same file
(``--router-knobs-file zoo.toml``), again at every SIGHUP to it (controlplane/router_reload.py). ``[capacity]`` is the
control plane's capacity plan (``--capacity-plan zoo.toml``: controlplane/capacity_plan.py)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.capacity_plan import CapacityPlanConfig
from controlplane.cells import parse_cells
from controlplane.router.router_knobs import parse_router_knobs
from controlplane.toml_file import load_toml
from zoo.placement_args import placement_options

CELL_SECTIONS = {"cells", "traffic_classes", "default_class"}  # controlplane/cells.py; zoo sim reads them too
SIM_FLEET_KEYS = {"name", "model", "scheduler"}  # `zoo sim --fleet zoo.toml` reads these (sim/fleet.py)
DEFAULT_CONTROL = "tcp://127.0.0.1:5555"
DEFAULT_HTTP = "127.0.0.1:8000"


@dataclass(slots=True)
class AgentSpec:
    """One agent process. ``options`` become `zoo agent` flags (``num_device_blocks`` → ``--num-device-blocks``)."""

    node_id: str
    backend: str = "torch"
    options: dict[str, str | int | float | bool] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.node_id:
            raise ValueError("agents: every agent needs a non-empty node_id")

    def argv(self, control: str, default_num_threads: int | None = None) -> list[str]:
        args = ["agent", "--control", control, "--node-id", self.node_id, "--backend", self.backend]
        options = dict(self.options)
        if default_num_threads is not None:
            options.setdefault("num_threads", default_num_threads)
        options.setdefault("metrics_port", 0)  # each agent's own /metrics on a free port (reported upstream)
        return args + _flags(options)


@dataclass(slots=True)
class UpConfig:
    control: str = DEFAULT_CONTROL
    http: str = DEFAULT_HTTP
    policy: str = "hardware_aware"
    controlplane_options: dict[str, str | int | float | bool] = field(default_factory=dict)
    agents: list[AgentSpec] = field(default_factory=list)
    ready_timeout_s: float = 180.0

    def __post_init__(self) -> None:
        if not self.control.startswith("tcp://"):
            raise ValueError(f"control must be a tcp:// endpoint, got {self.control!r}")
        host, _, port = self.http.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"http must be HOST:PORT, got {self.http!r}")
        ids = [a.node_id for a in self.agents]
        if len(set(ids)) != len(ids):
            raise ValueError(f"agents: node ids must be unique, got {ids}")
        if self.ready_timeout_s <= 0:
            raise ValueError("ready_timeout_s must be > 0")

    @property
    def base_url(self) -> str:
        return f"http://{self.http}"

    def controlplane_argv(self) -> list[str]:
        args = ["controlplane", "--listen", self.control, "--http", self.http, "--policy", self.policy]
        return args + _flags(self.controlplane_options)


def cpu_threads_each(agents: list[AgentSpec], cores: int) -> int | None:
    """The CPU threads each agent started on this host gets when its options do not set ``num_threads``: the
    cores left by the agents that set their own, shared among the others that compute (every backend but
    ``sim``), at least 1; None when no agent needs a share. Without it every agent takes all the cores, and on a
    small host their threads contend for the same cores (`make demo` on 2 cores: the torch agent's
    TPOT P50 0.3-0.8 s against a 32 ms step measured at start-up)."""
    computing = [a for a in agents if a.backend != "sim"]
    unset = [a for a in computing if a.options.get("num_threads") is None]
    if not unset:
        return None
    # a count that is not a whole number >= 1 takes nothing here: the agent refuses it at its start, by name
    given = (a.options.get("num_threads") for a in computing)
    taken = sum(n for n in given if type(n) is int and n >= 1)
    return max(1, (cores - taken) // len(unset))


def default_agents() -> list[AgentSpec]:
    """Two CPU agents serving the embedded default model: one on each backend."""
    return [AgentSpec("torch-0", "torch"), AgentSpec("jax-0", "jax")]


def load_up_config(path: Path | None) -> UpConfig:
    """Read zoo.toml (sections [controlplane] and [[agents]]); no file → the defaults."""
    if path is None:
        return UpConfig(agents=default_agents())
    try:
        data = load_toml(path)
    except FileNotFoundError:
        raise FileNotFoundError(f"config file not found: {path}") from None
    cp = dict(data.get("controlplane", {}))
    unknown = set(data) - {"controlplane", "agents", "capacity", *CELL_SECTIONS, *SIM_FLEET_KEYS}
    if unknown:
        raise ValueError(
            f"{path}: unknown sections {sorted(unknown)} (expected [controlplane], [[agents]], [[cells]], "
            "[[traffic_classes]], [capacity])"
        )
    if CELL_SECTIONS & set(data):  # cells and classes: checked now, read by the control plane from this file
        parse_cells(data, str(path))
        cp.setdefault("cells", str(path))
    if "capacity" in data:  # the capacity plan (controlplane/capacity_plan.py): checked now, read from this file
        try:
            CapacityPlanConfig.from_table(data["capacity"])
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from None
        cp.setdefault("capacity_plan", str(path))
    raw_agents = data.get("agents", [])
    if not isinstance(raw_agents, list) or not all(isinstance(a, dict) for a in raw_agents):
        raise ValueError(f"{path}: agents must be an array of tables ([[agents]])")
    agents = []
    for i, raw in enumerate(raw_agents):
        raw = dict(raw)
        if "node_id" not in raw:
            raise ValueError(f"{path}: agents[{i}] needs a node_id")
        raw.update(placement_options(raw, f"{path}: agents[{i}]"))  # host → host_id, checked
        agents.append(AgentSpec(str(raw.pop("node_id")), str(raw.pop("backend", "torch")), raw))
    agents = agents or default_agents()
    # [controlplane.router]: RouterConfig fields; the control plane reads them from this file (--router-knobs-file),
    # and again at a SIGHUP to it: edit (or add) the table, `kill -HUP` the control plane, and the router reloads
    router = cp.pop("router", None)
    if router is not None:
        if not isinstance(router, dict):
            raise ValueError(f"{path}: controlplane.router must be a table ([controlplane.router])")
        parse_router_knobs(json.dumps(router), f"{path}: [controlplane.router]")  # checked now, by name
        if "router_knobs" in cp:
            raise ValueError(f"{path}: [controlplane] router_knobs and [controlplane.router]: give the knobs one way")
    if "router_knobs" not in cp:
        cp.setdefault("router_knobs_file", str(Path(path).resolve()))
    # CURVE keys, the trace collector, the profiler (--profiler-config, a table here): the agents' too unless told
    for shared in ("curve_dir", "otlp_traces_endpoint", "profiler_config"):
        if shared in cp:
            for agent in agents:
                agent.options.setdefault(shared, cp[shared])
    return UpConfig(
        control=str(cp.pop("listen", DEFAULT_CONTROL)),
        http=str(cp.pop("http", DEFAULT_HTTP)),
        policy=str(cp.pop("policy", "hardware_aware")),
        ready_timeout_s=float(cp.pop("ready_timeout_s", 180.0)),
        controlplane_options=cp,
        agents=agents,
    )


def _flags(options: dict[str, str | int | float | bool | list | dict]) -> list[str]:
    out: list[str] = []
    for key, value in options.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            out.append(flag)
        elif isinstance(value, dict):  # a JSON flag (profiler_config = {profiler = "torch", ...})
            out += [flag, json.dumps(value)]
        elif isinstance(value, list):  # a repeated flag (model_alias = ["a=m", "b=m"])
            for item in value:
                out += [flag, str(item)]
        elif value is not False and value is not None:
            out += [flag, str(value)]
    return out
