"""`zoo controlplane --router-knobs-file PATH` as a real process: SIGHUP reloads the router from the file while a
stream is in flight (the stream goes on; /metrics shows the new knobs), and a broken file is refused without
harm (the process and its router go on as they were)."""

from __future__ import annotations

import json
import signal

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from client import AsyncZooClient
from observe.stats_stream import subscribe

pytestmark = pytest.mark.anyio

START_TIMEOUT_S = 60.0


async def _router_metrics(http: httpx.AsyncClient) -> tuple[str, dict[str, float]]:
    """zoo:router_config_info's knobs label, and zoo:router_config_reloads_total by outcome."""
    text = (await http.get("/metrics")).text
    knobs, reloads = "", {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "zoo:router_config_info":
                knobs = sample.labels["knobs"]
            elif sample.name == "zoo:router_config_reloads_total":
                reloads[sample.labels["outcome"]] = sample.value
    return knobs, reloads


async def _until_reloads(http: httpx.AsyncClient, outcome: str, count: int) -> str:
    with anyio.fail_after(30):
        while True:
            knobs, reloads = await _router_metrics(http)
            if reloads.get(outcome) == count:
                return knobs
            await anyio.sleep(0.05)


async def test_sighup_reloads_the_router_from_its_file_and_the_stream_in_flight_goes_on(
    spawn_controlplane, spawn_agent, tmp_path
):
    knobs_file = tmp_path / "router.json"
    knobs_file.write_text(json.dumps({"slo_ttft_s": 2.0}))
    cp = spawn_controlplane(None, "--policy", "hardware_aware", "--router-knobs-file", str(knobs_file))
    spawn_agent(cp.agent_endpoint, "a", "--fake-step-ms", "20")
    with anyio.fail_after(START_TIMEOUT_S):
        async for stats in subscribe(cp.stats_endpoint):
            if any(n.state == "up" for n in stats.nodes):
                assert stats.router_knobs == {"slo_ttft_s": 2.0}  # read at start
                break
    async with (
        AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as client,
        httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=30.0) as http,
    ):
        stream = await client.generate("long", max_tokens=100_000, stream=True)
        await stream.__anext__()
        knobs_file.write_text(json.dumps({"slo_ttft_s": 3.0, "tpot_weight": 0.3}))
        cp.proc.send_signal(signal.SIGHUP)
        assert await _until_reloads(http, "ok", 1) == '{"slo_ttft_s":3.0,"tpot_weight":0.3}'
        for _ in range(5):  # the request routed before the reload keeps streaming
            await stream.__anext__()
        knobs_file.write_text('{"slo_ttft_s": ')  # broken: refused, the router as it was
        cp.proc.send_signal(signal.SIGHUP)
        assert await _until_reloads(http, "refused", 1) == '{"slo_ttft_s":3.0,"tpot_weight":0.3}'
        await stream.__anext__()
        done = await client.generate("after the reloads", max_tokens=3)  # routed by the reloaded router
        assert done.text == "zzz"
    assert cp.proc.poll() is None  # SIGHUP did not end it
    assert "router reload refused, the router is unchanged" in cp.output()
