"""What an operator does to a node from ``zoo top``: drain it (``D``) or resume it (``U``), as `zoo drain [--resume]`
does, put it to sleep (``Z``: level 1, its requests finishing first) or wake it (``W``), as `zoo sleep` and `zoo wake`
do (a control plane with --enable-sleep-mode), over the control plane's client socket (``zoo top --client
tcp://HOST:5556``, with ``--curve-dir`` for a CURVE control plane). Each action opens a client, asks, and closes it:
the dashboard holds no request socket between actions. The answer, or the refusal (an unknown node, one whose agent
drains to stop, sleep mode off, a control plane that does not answer), is what the dashboard shows.
"""

from __future__ import annotations

from client import AsyncZooClient, ZooError


class NodeActions:
    def __init__(self, endpoint: str, *, curve=None, timeout_s: float = 5.0) -> None:
        self.endpoint = endpoint
        self.curve = curve
        self.timeout_s = timeout_s

    async def __call__(self, node_id: str, action: str) -> tuple[bool, str]:
        """(done, what to show) for ``action`` ("drain", "resume", "sleep" or "wake") of ``node_id``."""
        try:
            async with AsyncZooClient(self.endpoint, timeout_s=self.timeout_s, curve=self.curve) as zoo:
                try:  # inside: the client's task group would wrap it
                    if action in ("sleep", "wake"):
                        answer = await (zoo.sleep(node_id) if action == "sleep" else zoo.wake(node_id))
                        return answer.ok, f"{action} {node_id}: {answer.detail}"
                    num_inflight = await zoo.drain(node_id, resume=action == "resume")
                except ZooError as e:
                    return False, f"{action} {node_id}: {e.message}"
        except (ZooError, OSError) as e:  # the client itself: no socket, keys refused
            return False, f"{action} {node_id}: {e}"
        if action == "resume":
            return True, f"node {node_id} takes new requests again ({num_inflight} in flight there)"
        return (
            True,
            f"node {node_id} is draining: {num_inflight} requests in flight there finish, nothing new is routed",
        )
