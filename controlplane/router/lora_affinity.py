"""Adapter-aware routing: send a LoRA request where its adapter already sits in a device slot.

A node without the adapter resident must read it (disk -> host RAM -> a device slot, evicting another)
before the request's first step: tens to hundreds of milliseconds on a CPU node (``zoo bench lora``
measures it), a few milliseconds over PCIe from host RAM. A node that holds it pays nothing. So, as
S-LoRA's and vLLM's production routers do in spirit (affinity first, load second), the nodes that hold the
adapter are offered to the policy alone while one of them has an empty queue; once they all queue work,
every LoRA-capable node is offered and the policy's own load pricing decides (hardware_aware adds the cold
load to the TTFT of a node without the adapter: its measured mean load time, from its load reports, or
RouterConfig.lora_load_estimate_s before it has loaded one). Sans-IO; the fleet simulator runs it unchanged.
"""

from __future__ import annotations

from controlplane.router.policy import ClusterSnapshot


def prefer_resident(snapshot: ClusterSnapshot, lora_name: str) -> ClusterSnapshot:
    """The nodes holding ``lora_name`` if one of them has no waiting request; else ``snapshot`` unchanged."""
    resident = tuple(v for v in snapshot.nodes if lora_name in v.lora_resident)
    if any(v.num_waiting == 0 for v in resident):
        return ClusterSnapshot(snapshot.now_s, resident)
    return snapshot
