"""The latest eBPF snapshot `zoo probe` pushed to the control plane (ProbeSnapshot), until it goes stale."""

from __future__ import annotations

from engine.clock import Clock

PROBE_STALE_S = 10.0  # an eBPF snapshot older than this is not shown (the probe stopped)


class ProbeInbox:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._latest: tuple[dict, float] | None = None

    def put(self, snapshot: dict) -> None:
        self._latest = (snapshot, self.clock.now())

    def latest(self) -> dict | None:
        """The last snapshot, or None when no probe reported within PROBE_STALE_S."""
        if self._latest is None:
            return None
        snapshot, received_s = self._latest
        return snapshot if self.clock.now() - received_s <= PROBE_STALE_S else None
