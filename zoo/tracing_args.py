"""OpenTelemetry traces from flags: ``zoo controlplane|agent --otlp-traces-endpoint URL [--otlp-service-name NAME]``,
or from OpenTelemetry's own environment variables where a flag is not given.

vLLM's flag (``--otlp-traces-endpoint``), OTLP over HTTP here (observe/span_export.py). The control plane records
one ``llm_request`` span per request (controlplane/request_spans.py), each agent one ``node_request`` span per
request it serves (observe/node_spans.py), its child; a caller's ``traceparent`` header is their parent.

The environment, as the OpenTelemetry specification names it (what a Kubernetes ConfigMap or an OpenTelemetry
Operator sets for every pod; deploy/k8s/10-config.yaml):

    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   the traces endpoint, as given
    OTEL_EXPORTER_OTLP_ENDPOINT          the collector's base: ``/v1/traces`` appended (the spec's rule for HTTP)
    OTEL_SERVICE_NAME                    the spans' service.name
    OTEL_TRACES_SAMPLER(_ARG)            ``traceidratio`` / ``parentbased_traceidratio`` with a ratio (the control
                                         plane's sampling is parent-based either way); ``always_off``: 0
    OTEL_SDK_DISABLED=true               no traces from the environment (a flag still turns them on)

A flag wins over its variable. A bad value (not a URL, not a ratio in [0, 1]) stops the process at start, naming it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

RATIO_SAMPLERS = ("traceidratio", "parentbased_traceidratio")


def add_tracing_args(p: argparse.ArgumentParser, service_name: str, starts_traces: bool = True) -> None:
    """``starts_traces``: the process starts a trace for a request without a caller's context (the control
    plane; an agent only ever continues one), so it takes ``--otlp-traces-sample-ratio``."""
    p.add_argument(
        "--otlp-traces-endpoint",
        default=None,
        metavar="URL",
        help="send each request's OpenTelemetry span to this OTLP/HTTP traces endpoint, e.g. "
        "http://collector:4318/v1/traces (default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else no traces)",
    )
    if starts_traces:
        p.add_argument(
            "--otlp-traces-sample-ratio",
            type=float,
            default=None,
            metavar="R",
            help="the share of requests without a caller's traceparent that are traced (0..1; default: "
            "OTEL_TRACES_SAMPLER_ARG with a ratio sampler, else 1: all; a caller's own decision is always followed)",
        )
    p.add_argument(
        "--otlp-service-name",
        default=None,
        metavar="NAME",
        help=f"the spans' service.name (default: OTEL_SERVICE_NAME, else {service_name})",
    )
    p.set_defaults(otlp_default_service_name=service_name)


def span_export_from_args(args: argparse.Namespace, environ: Mapping[str, str] | None = None):
    """The process's SpanExport (observe/span_export.py), or None without an endpoint (flag or environment);
    ValueError naming the flag or variable on a bad value."""
    env = os.environ if environ is None else environ
    endpoint = getattr(args, "otlp_traces_endpoint", None) or _env_endpoint(env)
    if endpoint is None:
        return None
    from observe.span_export import SpanExport, TracingConfig

    service = getattr(args, "otlp_service_name", None) or env.get("OTEL_SERVICE_NAME") or args.otlp_default_service_name
    ratio = getattr(args, "otlp_traces_sample_ratio", None)
    if ratio is None:
        ratio = _env_ratio(env)
    return SpanExport(TracingConfig(endpoint=endpoint, service_name=service, sample_ratio=ratio))


def _env_endpoint(env: Mapping[str, str]) -> str | None:
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    traces = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
    if traces:
        return traces
    base = env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip()
    return f"{base.rstrip('/')}/v1/traces" if base else None


def _env_ratio(env: Mapping[str, str]) -> float:
    sampler = env.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if sampler in ("always_off", "parentbased_always_off"):
        return 0.0
    if sampler not in RATIO_SAMPLERS:
        return 1.0
    text = env.get("OTEL_TRACES_SAMPLER_ARG", "1").strip() or "1"
    try:
        ratio = float(text)
    except ValueError:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG must be a ratio in [0, 1], got {text[:40]!r}") from None
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"OTEL_TRACES_SAMPLER_ARG must be a ratio in [0, 1], got {text[:40]!r}")
    return ratio
