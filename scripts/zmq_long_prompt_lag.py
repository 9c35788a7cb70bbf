"""How long a ZeroMQ client's long prompt stalls the control plane's event loop (controlplane/client_requests.py):
a control plane with SmolLM2's tokenizer and one in-process agent (a trivial engine), an AsyncZooClient sending one
long prompt (truncated to 512 tokens, 1 token out) over the client socket; the longest gap between
ticks of a 1 ms task on the control plane's loop from the send to the answer. Two sides in one run, alternating, 5 tries
each: offload on (``offload_tokenize_chars`` 16,384, the default) and off (0: tokenized on the loop, as before).
The trivial engine's byte vocabulary refuses SmolLM2's token ids, so the node answers with a refusal: the request is
tokenized, routed, sent and answered all the same, and the tokenization is what differs between the sides.

    .venv/bin/python scripts/zmq_long_prompt_lag.py > bench/results/<date>-zmq-long-prompt-lag.json
"""

from __future__ import annotations

import contextlib
import json
import statistics
import time

import anyio
from tokenize_loop_lag import longest_gap_ms  # scripts/: its 1 ms ticker

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.checkpoint import default_model_path, load_checkpoint
from backends.fake import FAKE_MODEL_NAME, build_trivial_engine, cpu_test_hardware
from client import AsyncZooClient, ZooError
from controlplane.router.router_config import RouterConfig
from controlplane.server import ControlPlane, ControlPlaneConfig

SENTENCE = "The lighthouse keeper climbs the stairs at dusk and lights the lamp. "
TRIES = 5


async def _one(tokenizer, text: str, min_chars: int) -> dict:
    config = ControlPlaneConfig(
        agent_endpoint="tcp://127.0.0.1:0",
        client_endpoint="tcp://127.0.0.1:0",
        router=RouterConfig(policy="round_robin"),
        model_name=FAKE_MODEL_NAME,
        offload_tokenize_chars=min_chars,
    )
    cp = ControlPlane(config, tokenizer)
    async with anyio.create_task_group() as tg:
        await tg.start(cp.run)
        agent = NodeAgent(
            cp.agent_endpoint,
            build_trivial_engine(),
            AgentConfig(node_id="a", model_name=FAKE_MODEL_NAME),
            hardware=cpu_test_hardware(),
        )
        await tg.start(agent.run)
        await cp.wait_until(lambda: "a" in cp.registry, 10)
        async with AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as client:
            with contextlib.suppress(ZooError):  # the connection and both sides' paths warm (refused as below)
                await client.generate("warm up", max_tokens=1)

            async def send() -> None:
                nonlocal outcome
                try:
                    done = await client.generate(text, max_tokens=1, truncate_prompt_tokens=512)
                    outcome = f"served, {done.num_prompt_tokens} prompt tokens"
                except ZooError as error:  # the trivial engine's byte vocabulary refuses SmolLM2's ids: answered
                    outcome = f"refused by the node: {error.code}"

            outcome = ""
            gap_ms, request_ms = await longest_gap_ms(send)  # the loop is this process's: the control plane's
        tg.cancel_scope.cancel()
    return {"longest_gap_ms": gap_ms, "request_ms": request_ms, "outcome": outcome}


async def main() -> None:
    tokenizer = load_checkpoint(default_model_path()).tokenizer
    report: dict = {"model": "SmolLM2-135M-Instruct tokenizer", "tick_ms": 1, "tries": TRIES, "sizes": []}
    for chars in (90_000, 900_000):
        text = (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]
        sides: dict[str, list[dict]] = {"offload_on": [], "offload_off": []}
        for _ in range(TRIES):
            sides["offload_on"].append(await _one(tokenizer, text, 16_384))
            sides["offload_off"].append(await _one(tokenizer, text, 0))
        row: dict = {"chars": chars}
        for name, runs in sides.items():
            row[name] = {
                "longest_gap_ms_median": statistics.median(r["longest_gap_ms"] for r in runs),
                "request_ms_median": statistics.median(r["request_ms"] for r in runs),
                "outcomes": sorted({r["outcome"] for r in runs}),
                "runs": runs,
            }
        row["gap_ratio_on_over_off"] = (
            row["offload_on"]["longest_gap_ms_median"] / row["offload_off"]["longest_gap_ms_median"]
        )
        report["sizes"].append(row)
    report["date"] = time.strftime("%Y-%m-%d")
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    anyio.run(main)
