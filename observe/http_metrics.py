"""The gateway's HTTP requests on the control plane's /metrics, under the names vLLM's API server exports them.

vLLM instruments its FastAPI app with prometheus-fastapi-instrumentator (vllm/entrypoints/openai/api_server.py,
``Instrumentator(excluded_handlers=[...], registry=registry).add().instrument(app)``); so does this gateway, with the
library's defaults, on the control plane's exporter registry:

    http_requests_total{handler, method, status}      counter: requests by route template ("none": no route
                                                      matched) and status class ("2xx", "4xx", "5xx" ...)
    http_request_duration_seconds{handler, method}    histogram, buckets 0.1, 0.5, 1 s (a stream: to its end)
    http_request_duration_highr_seconds               histogram, no labels, 21 buckets 10 ms .. 60 s
    http_request_size_bytes{handler}, http_response_size_bytes{handler}   summaries of the bodies' bytes

Error rates by route (``status="5xx"``), what the probes and scrapers do not count (vLLM's exclusions: /metrics,
/health, /ping, /version and the rest of EXCLUDED), and a latency an operator can read without tracing. The
instrumentator's middleware is the outermost layer, so it counts a 401 from the key check and a CORS preflight too.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from prometheus_fastapi_instrumentator import Instrumentator

# vLLM's excluded_handlers, and this gateway's Prometheus service discovery beside /metrics
EXCLUDED = ("/metrics", "/metrics/targets", "/health", "/load", "/ping", "/version", "/server_info")


def instrument_gateway(app, registry: CollectorRegistry) -> None:
    """Count ``app``'s HTTP requests (a Starlette app, before it serves) into ``registry``."""
    Instrumentator(excluded_handlers=list(EXCLUDED), registry=registry).instrument(app)
