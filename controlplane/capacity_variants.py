"""The variants an operator declares to the capacity plan (controlplane/capacity_plan.py): pools that exist whether or
not a node of them has joined yet.

The plan otherwise learns a variant, one (model, cell, GPU type), from the nodes that join: a model scaled to zero
before the control plane restarted is forgotten until a node of it joins again, and a model no node has served
cannot be started from zero by a request. Declared in the plan's file, as each Deployment is declared to KEDA::

    [[capacity.variants]]
    model = "smollm2"          # as nodes announce it
    gpu_type = "L4"            # as nodes report it (HardwareInfo.gpu_type; matched without case)
    cell = "default"           # the default
    power_score = 0.24         # a node's relative serving power; by default the GPU table's for gpu_type

a declared variant is planned from the start, at zero nodes until one joins: its ``min_nodes`` published (1 by
default: a node asked for at once), or, at ``min_nodes`` 0, held at zero until a request asks for it. Its model is
listed on ``/v1/models`` and a request for it waits for a node (``cold_start_wait_s``). Its node capacity is the
declared power score until its nodes' hellos say theirs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from backends.gpu_table import GPU_TABLE, gpu_info, power_score

MAX_DECLARED_VARIANTS = 1024  # a plan's file declares at most this many (each is planned at every stats snapshot)
KEYS = ("model", "gpu_type", "cell", "power_score")


@dataclass(frozen=True, slots=True)
class DeclaredVariant:
    model: str
    gpu_type: str
    cell: str = "default"
    power_score: float = 0.0  # 0: the GPU table's for gpu_type

    @property
    def key(self) -> tuple[str, str, str]:
        return self.model, self.cell, self.gpu_type


def table_gpu(gpu_type: str) -> tuple[str, float]:
    """A GPU type as nodes report it ("H100", "A100-40GB", "L4") or a ``--gpu-profile`` name ("h100-sxm", "l4"): its
    name as nodes of the GPU table report it, and its power score there; as given and 0 for one the table does not
    know."""
    name = gpu_type.strip().lower()
    for spec in GPU_TABLE.values():
        if name in (spec.gpu_type.lower(), spec.profile):
            return spec.gpu_type, power_score(gpu_info(spec, "table", spec.gpu_type, spec.memory_gib))
    return gpu_type.strip(), 0.0


def declared_variants(value: object) -> tuple[DeclaredVariant, ...]:
    """``[[capacity.variants]]``, checked: ValueError naming the entry and what is wrong with it."""
    if not isinstance(value, list):
        raise ValueError(f"capacity plan: variants must be an array of tables, got {type(value).__name__}")
    if len(value) > MAX_DECLARED_VARIANTS:
        raise ValueError(f"capacity plan: at most {MAX_DECLARED_VARIANTS} variants, got {len(value)}")
    variants: dict[tuple[str, str, str], DeclaredVariant] = {}
    for i, entry in enumerate(value):
        where = f"capacity plan: variants[{i}]"
        if not isinstance(entry, Mapping):
            raise ValueError(f"{where} must be a table, got {type(entry).__name__}")
        unknown = sorted(str(k) for k in set(entry) - set(KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown keys {unknown}; known: {sorted(KEYS)}")
        texts = {}
        for name in ("model", "gpu_type", "cell"):
            text = entry.get(name, "default" if name == "cell" else None)
            if not isinstance(text, str) or not text.strip() or len(text) > 256:
                raise ValueError(f"{where}: {name} must be a non-empty string of at most 256 characters")
            texts[name] = text.strip()
        texts["gpu_type"], table_power = table_gpu(texts["gpu_type"])
        power = entry.get("power_score")
        if power is None:
            power = table_power
            if power <= 0:
                known = sorted({s.gpu_type for s in GPU_TABLE.values()})
                raise ValueError(
                    f"{where}: the GPU table does not know gpu_type {texts['gpu_type']!r} ({', '.join(known)}): "
                    f"give its power_score"
                )
        elif isinstance(power, bool) or not isinstance(power, int | float) or not 1e-6 <= power <= 1e6:
            raise ValueError(f"{where}: power_score must be a number in [1e-6, 1e6], got {power!r}")
        variant = DeclaredVariant(texts["model"], texts["gpu_type"], texts["cell"], float(power))
        if variant.key in variants:
            raise ValueError(f"{where}: {variant.key} is declared twice")
        variants[variant.key] = variant
    return tuple(variants.values())
