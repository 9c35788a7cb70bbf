"""``--otlp-traces-endpoint`` / ``--otlp-service-name`` on `zoo controlplane` and `zoo agent`: off by default, a
SpanExport under each process's service name when given, a bad URL refused before anything starts."""

from __future__ import annotations

import argparse

import pytest

from observe.node_spans import NodeSpans
from zoo.agent_cmd import add_agent_args, agent_from_args
from zoo.serve import add_controlplane_args, run_controlplane
from zoo.tracing_args import span_export_from_args


def _parser(add) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add(parser)
    return parser


def test_off_unless_given_and_named_per_process():
    cp = _parser(add_controlplane_args)
    assert span_export_from_args(cp.parse_args([])) is None
    for add, name in ((add_controlplane_args, "zoo-controlplane"), (add_agent_args, "zoo-agent")):
        export = span_export_from_args(_parser(add).parse_args(["--otlp-traces-endpoint", "http://c:4318/v1/traces"]))
        try:
            assert (export.config.endpoint, export.config.service_name) == ("http://c:4318/v1/traces", name)
        finally:
            export.close()
    args = cp.parse_args(["--otlp-traces-endpoint", "https://c/v1/traces", "--otlp-service-name", "edge-cp"])
    export = span_export_from_args(args)
    assert export.config.service_name == "edge-cp"
    export.close()


def test_a_bad_endpoint_stops_the_control_plane_before_it_loads_a_model():
    args = _parser(add_controlplane_args).parse_args(["--otlp-traces-endpoint", "collector:4317", "--fake-tokenizer"])
    with pytest.raises(SystemExit, match=r"--otlp-traces-endpoint: .*http"):
        run_controlplane(args)


def test_an_agent_with_the_flag_has_a_tracer_and_one_without_has_none():
    parser = _parser(add_agent_args)
    assert agent_from_args(parser.parse_args(["--fake-runner", "--node-id", "n"])).tracer is None
    agent = agent_from_args(
        parser.parse_args(["--fake-runner", "--node-id", "n", "--otlp-traces-endpoint", "http://c:4318/v1/traces"])
    )
    try:
        assert isinstance(agent.tracer, NodeSpans) and agent.tracer.node["zoo.node_id"] == "n"
    finally:
        agent.tracer.export.close()
    with pytest.raises(ValueError, match="http"):
        agent_from_args(parser.parse_args(["--fake-runner", "--node-id", "n", "--otlp-traces-endpoint", "c:4318"]))


def test_zoo_toml_sends_the_control_planes_collector_to_every_agent_unless_told(tmp_path):
    from zoo.up_config import load_up_config

    path = tmp_path / "zoo.toml"
    path.write_text(
        '[controlplane]\notlp_traces_endpoint = "http://c:4318/v1/traces"\n\n'
        '[[agents]]\nnode_id = "a"\n\n[[agents]]\nnode_id = "b"\notlp_traces_endpoint = "http://d:4318/v1/traces"\n'
    )
    cfg = load_up_config(path)
    cp_argv = cfg.controlplane_argv()
    assert cp_argv[cp_argv.index("--otlp-traces-endpoint") + 1] == "http://c:4318/v1/traces"
    endpoints = [a.argv(cfg.control)[a.argv(cfg.control).index("--otlp-traces-endpoint") + 1] for a in cfg.agents]
    assert endpoints == ["http://c:4318/v1/traces", "http://d:4318/v1/traces"]


def test_opentelemetrys_environment_variables_configure_it_where_no_flag_is_given():
    cp = _parser(add_controlplane_args)

    def export(argv, **env):
        made = span_export_from_args(cp.parse_args(argv), environ=env)
        if made is not None:
            made.close()
            return made.config.endpoint, made.config.service_name, made.config.sample_ratio
        return None

    assert export([]) is None  # nothing set: no traces
    assert export([], OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="http://c:4318/v1/traces") == (
        "http://c:4318/v1/traces", "zoo-controlplane", 1.0,
    )  # fmt: skip
    base = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318/", "OTEL_SERVICE_NAME": "edge"}
    assert export([], **base) == ("http://c:4318/v1/traces", "edge", 1.0)  # the spec's path appended
    ratio = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}
    assert export([], **base, **ratio)[2] == 0.25
    assert export([], **base, OTEL_TRACES_SAMPLER="always_off")[2] == 0.0
    assert export([], **base, OTEL_TRACES_SAMPLER="always_on", OTEL_TRACES_SAMPLER_ARG="0.1")[2] == 1.0
    assert export([], **base, OTEL_SDK_DISABLED="true") is None
    flags = [
        "--otlp-traces-endpoint",
        "http://f/v1/traces",
        "--otlp-service-name",
        "cp",
        "--otlp-traces-sample-ratio",
        "0.5",
    ]
    assert export(flags, **base, **ratio) == ("http://f/v1/traces", "cp", 0.5)  # a flag wins over its variable
    for bad in ("x", "2"):
        with pytest.raises(ValueError, match="OTEL_TRACES_SAMPLER_ARG"):
            export([], **base, OTEL_TRACES_SAMPLER="traceidratio", OTEL_TRACES_SAMPLER_ARG=bad)
    with pytest.raises(ValueError, match="http"):
        export([], OTEL_EXPORTER_OTLP_TRACES_ENDPOINT="collector:4317")
