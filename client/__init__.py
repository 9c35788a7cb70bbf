"""The ZeroMQ client library: talk to a Silicon Zoo control plane from an application (see zoo_client.py;
its typed errors are in errors.py). ``StructuredOutput`` (engine/structured_output.py) is re-exported for
``generate(..., structured_outputs=StructuredOutput(...))``, ``ToolSpec`` (transport/chat_wire.py) for
``generate(messages=..., tools=[ToolSpec(...)])``."""

from client.errors import (
    ZooCancelledError,
    ZooConnectionLostError,
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
from client.zoo_client import AsyncZooClient, Completion, GenerationStream, ZooClient
from engine.structured_output import StructuredOutput
from transport.chat_wire import ToolSpec

__all__ = [
    "AsyncZooClient",
    "Completion",
    "GenerationStream",
    "StructuredOutput",
    "ToolSpec",
    "ZooCancelledError",
    "ZooClient",
    "ZooConnectionLostError",
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
