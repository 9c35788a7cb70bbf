"""hardware_aware's decisions, seen from outside: the diagnostics and probes in scripts/ wrap every
HardwareAwarePolicy's ``choose`` (made while the context is open) to call ``on_choice(request, snapshot, chosen,
config)`` after each decision, and put the policy back as it was on leaving."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from controlplane.router.policies import hardware_aware as ha


@contextlib.contextmanager
def recording_choices(on_choice: Callable) -> Iterator[None]:
    real_init = ha.HardwareAwarePolicy.__init__

    def init(self, config, use_kernel=True):
        real_init(self, config, use_kernel)
        inner = self.choose

        def choose(request, snapshot):
            chosen = inner(request, snapshot)
            on_choice(request, snapshot, chosen, config)
            return chosen

        self.choose = choose

    ha.HardwareAwarePolicy.__init__ = init
    try:
        yield
    finally:
        ha.HardwareAwarePolicy.__init__ = real_init
