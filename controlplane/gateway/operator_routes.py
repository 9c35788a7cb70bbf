"""The operator's routes a control plane's flags turn on, as vLLM's flags turn on its own (each off by default):

--profiler-config                    POST /start_profile, /stop_profile (profile_routes.py)
--enable-sleep-mode                  POST /sleep, /wake_up, GET /is_sleeping (sleep_routes.py)
--enable-tokenizer-info-endpoint     GET /tokenizer_info (tokenizer_info.py)
"""

from __future__ import annotations

from starlette.routing import Route

from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.gateway.profile_routes import profile_routes
from controlplane.gateway.sleep_routes import sleep_routes
from controlplane.gateway.tokenizer_info import tokenizer_info_routes


def operator_routes(frontend: object, config: GatewayConfig) -> list[Route]:
    read_timeout_s = config.request_read_timeout_s
    return [
        *profile_routes(frontend, config.profiling, read_timeout_s, config.profile_dir),
        *sleep_routes(frontend, config.sleep_mode, read_timeout_s),
        *tokenizer_info_routes(frontend, config.tokenizer_info_endpoint),
    ]
