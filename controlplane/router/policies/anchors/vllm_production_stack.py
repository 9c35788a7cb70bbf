"""vLLM production stack's least-loaded routing: the engine with the fewest outstanding requests.

Its router counts, per engine, the requests it has sent and not yet seen finish, and picks the engine
with the fewest. That is our ``least_requests`` rule (outstanding = the control plane's in-flight count,
or the node's report when it says more; ties by node id), so this anchor is an alias of it, registered
under the anchor's name so reports label it as the anchor.
"""

from __future__ import annotations

from controlplane.router.policies.least_requests import LeastRequestsPolicy


class VllmLeastOutstandingPolicy(LeastRequestsPolicy):
    name = "vllm_least_outstanding"
