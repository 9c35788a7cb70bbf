"""The OpenAI-compatible HTTP gateway the control plane serves (see app.py)."""

from controlplane.gateway.app import GatewayConfig, create_app

__all__ = ["GatewayConfig", "create_app"]
