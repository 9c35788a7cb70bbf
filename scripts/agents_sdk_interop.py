"""Interop: the OpenAI Agents SDK (PyPI openai-agents 0.24.0, in its own venv: it is not a dependency of this project)
against the zoo's gateway (`zoo up`): its OpenAIConversationsSession (the Conversations API's items as the session's
history: created, listed, added to, popped, cleared), a server-managed conversation (Runner.run's conversation_id:
the Responses API's ``conversation``), and a function tool whose call and output go to the session.

    python3 -m venv /tmp/oa && /tmp/oa/bin/pip install openai-agents==0.24.0
    zoo up &                                            # the gateway on 127.0.0.1:8000
    /tmp/oa/bin/python scripts/agents_sdk_interop.py [http://127.0.0.1:8000/v1] > report.json

A check that the SDK runs against the gateway unchanged, not a figure of the model: SmolLM2-135M does not remember a
name from one turn to the next, whatever carries the history; the prompt tokens show that the history reached it.
"""

import asyncio
import json
import sys
import time

from agents import Agent, ModelSettings, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled
from agents.memory import OpenAIConversationsSession
from openai import AsyncOpenAI

BASE = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
MODEL = "SmolLM2-135M-Instruct"


def texts(items):
    out = []
    for item in items:
        item = item if isinstance(item, dict) else item.model_dump(exclude_unset=True)
        content = item.get("content")
        text = content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])
        out.append({"type": item.get("type", "message"), "role": item.get("role"), "text": text[:120]})
    return out


async def main():
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=BASE, api_key="x", max_retries=0, timeout=120)
    settings = ModelSettings(max_tokens=160, temperature=0)
    agent = Agent(
        name="assistant",
        instructions="Answer in one short sentence.",
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        model_settings=settings,
    )
    report = {}
    # 1. client-side history in a Conversations API session
    session = OpenAIConversationsSession(openai_client=client)
    t0 = time.monotonic()
    first = await Runner.run(agent, "My name is Ada.", session=session)
    second = await Runner.run(agent, "What is my name?", session=session)
    items = await session.get_items()
    inputs = [i async for i in client.responses.input_items.list(second.raw_responses[0].response_id)]
    report["session"] = {
        "conversation_id": session.session_id,
        "answers": [first.final_output, second.final_output],
        "prompt_tokens": [r.raw_responses[0].usage.input_tokens for r in (first, second)],
        "second_response_input_items": len(inputs),
        "items": texts(items),
        "seconds": round(time.monotonic() - t0, 1),
    }
    popped = await session.pop_item()
    report["session"]["popped"] = texts([popped])[0]
    report["session"]["items_after_pop"] = len(await session.get_items())
    await session.clear_session()
    try:
        await client.conversations.retrieve(report["session"]["conversation_id"])
        report["session"]["cleared"] = False
    except Exception as e:
        report["session"]["cleared"] = type(e).__name__
    # 2. a server-managed conversation: the Responses API's `conversation` parameter
    conversation = await client.conversations.create(items=[{"role": "user", "content": "My name is Ada."}])
    t0 = time.monotonic()
    third = await Runner.run(agent, "What is my name?", conversation_id=conversation.id)
    fourth = await Runner.run(agent, "Say it again.", conversation_id=conversation.id)
    listed = [i async for i in client.conversations.items.list(conversation.id, order="asc")]
    report["server_conversation"] = {
        "conversation_id": conversation.id,
        "answers": [third.final_output, fourth.final_output],
        "prompt_tokens": [r.raw_responses[0].usage.input_tokens for r in (third, fourth)],
        "items": texts(listed),
        "seconds": round(time.monotonic() - t0, 1),
    }

    # 3. a function tool, the call's output sent back in the session
    @function_tool
    def get_weather(city: str) -> str:
        """The weather now in a city."""
        return f"18 C and sunny in {city}"

    tool_agent = Agent(
        name="weather",
        instructions="Use the get_weather tool to answer.",
        tools=[get_weather],
        model=OpenAIResponsesModel(model=MODEL, openai_client=client),
        model_settings=ModelSettings(max_tokens=160, temperature=0, tool_choice="get_weather"),
    )
    tool_session = OpenAIConversationsSession(openai_client=client)
    try:
        result = await Runner.run(tool_agent, "What is the weather in Paris?", session=tool_session, max_turns=3)
        final = result.final_output
    except Exception as e:
        final = f"{type(e).__name__}: {str(e)[:200]}"
    tool_items = await tool_session.get_items()
    report["tool_session"] = {
        "final_output": final,
        "item_types": [i.get("type", "message") for i in tool_items],
        "calls": [i.get("arguments") for i in tool_items if i.get("type") == "function_call"],
        "outputs": [i.get("output") for i in tool_items if i.get("type") == "function_call_output"],
    }
    print(json.dumps(report, indent=1))


asyncio.run(main())
