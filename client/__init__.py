"""The ZeroMQ client library: talk to a Silicon Zoo control plane from an application (see zoo_client.py)."""

from client.zoo_client import (
    AsyncZooClient,
    Completion,
    GenerationStream,
    ZooCancelledError,
    ZooClient,
    ZooError,
    ZooInvalidRequestError,
    ZooNodeFailedError,
    ZooNoNodeError,
    ZooOverloadedError,
    ZooPromptTooLongError,
    ZooProtocolError,
    ZooTimeoutError,
    ZooUnknownModelError,
    error_from_reply,
)

__all__ = [
    "AsyncZooClient",
    "Completion",
    "GenerationStream",
    "ZooCancelledError",
    "ZooClient",
    "ZooError",
    "ZooInvalidRequestError",
    "ZooNoNodeError",
    "ZooNodeFailedError",
    "ZooOverloadedError",
    "ZooPromptTooLongError",
    "ZooProtocolError",
    "ZooTimeoutError",
    "ZooUnknownModelError",
    "error_from_reply",
]
