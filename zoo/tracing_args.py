"""OpenTelemetry traces from flags: ``zoo controlplane|agent --otlp-traces-endpoint URL [--otlp-service-name NAME]``.

vLLM's flag (``--otlp-traces-endpoint``), OTLP over HTTP here (observe/span_export.py). The control plane records
one ``llm_request`` span per request (controlplane/request_spans.py), each agent one ``node_request`` span per
request it serves (observe/node_spans.py), its child; a caller's ``traceparent`` header is their parent.
"""

from __future__ import annotations

import argparse


def add_tracing_args(p: argparse.ArgumentParser, service_name: str, starts_traces: bool = True) -> None:
    """``starts_traces``: the process starts a trace for a request without a caller's context (the control
    plane; an agent only ever continues one), so it takes ``--otlp-traces-sample-ratio``."""
    p.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        metavar="URL",
        help="send each request's OpenTelemetry span to this OTLP/HTTP traces endpoint, e.g. "
        "http://collector:4318/v1/traces (default: no traces)",
    )
    if starts_traces:
        p.add_argument(
            "--otlp-traces-sample-ratio",
            type=float,
            default=1.0,
            metavar="R",
            help="the share of requests without a caller's traceparent that are traced (0..1, default 1: all; a "
            "caller's own sampling decision is always followed)",
        )
    p.add_argument(
        "--otlp-service-name",
        default=service_name,
        metavar="NAME",
        help=f"the spans' service.name (default {service_name})",
    )


def span_export_from_args(args: argparse.Namespace):
    """The process's SpanExport (observe/span_export.py), or None without ``--otlp-traces-endpoint``; ValueError
    on a bad URL."""
    endpoint = getattr(args, "otlp_traces_endpoint", None)
    if endpoint is None:
        return None
    from observe.span_export import SpanExport, TracingConfig

    ratio = getattr(args, "otlp_traces_sample_ratio", 1.0)
    return SpanExport(TracingConfig(endpoint=endpoint, service_name=args.otlp_service_name, sample_ratio=ratio))
