"""How often the real model (SmolLM2-135M-Instruct, CPU, greedy) answers a tool question with a call its parser reads,
per tool prompt format (backends/tool_prompt_formats.py), and how often the call is the right one: the same questions,
the same tools, one run. Each format's prompt is rendered as the gateway renders it for ``--tool-call-parser NAME``;
the reply is read by that parser (controlplane/gateway/tool_parsers.py), as tool_choice "auto" reads it.

    .venv/bin/python scripts/tool_format_adherence.py --json > bench/results/<date>-tool-format-adherence.json
"""

from __future__ import annotations

import argparse
import json
import time

from backends.builder import build_engine
from backends.chat_render import render_chat
from backends.tool_prompt_formats import TOOL_FORMATS
from controlplane.gateway.tool_parsers import PARSERS
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolSpec

TOOLS = [
    ToolSpec(
        "get_weather",
        "The current weather in a city",
        '{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}',
    ),
    ToolSpec(
        "get_time",
        "The current time in a time zone",
        '{"type":"object","properties":{"timezone":{"type":"string"}},"required":["timezone"]}',
    ),
]
QUESTIONS = [  # (question, the call that answers it, the argument it names)
    ("What is the weather in Paris?", "get_weather", ("city", "paris")),
    ("Is it raining in London right now?", "get_weather", ("city", "london")),
    ("How warm is it in Tokyo today?", "get_weather", ("city", "tokyo")),
    ("Tell me the weather for Berlin.", "get_weather", ("city", "berlin")),
    ("What time is it in Europe/Madrid?", "get_time", ("timezone", "madrid")),
    ("What is the current time in America/New_York?", "get_time", ("timezone", "new_york")),
    ("Give me the time in Asia/Kolkata.", "get_time", ("timezone", "kolkata")),
    ("What's the local time in UTC?", "get_time", ("timezone", "utc")),
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    engine = build_engine(EngineConfig(), progress=False)
    params = SamplingParams(temperature=0.0, max_tokens=args.max_tokens)
    started = time.monotonic()
    rows = []
    for fmt in TOOL_FORMATS:
        ids = {}
        for i, (question, name, argument) in enumerate(QUESTIONS):
            prompt = render_chat(
                engine.tokenizer, [ChatMessage("user", question)], TOOLS, ChatTemplateOptions(tool_format=fmt)
            )
            ids[engine.add_request(engine.tokenizer.encode(prompt), params, req_id=f"{fmt}-{i}")] = (name, argument)
        texts: dict[str, str] = {}
        while engine.has_unfinished_requests():
            for out in engine.step():
                if out.finished:
                    texts[out.req_id] = out.text
        parsed = right_name = right_argument = 0
        samples = []
        for req_id, (name, (key, value)) in ids.items():
            text = texts[req_id]
            read = PARSERS[fmt].parse(text)
            calls = [] if read is None else read[1]
            parsed += bool(calls)
            right_name += any(n == name for n, _ in calls)
            right_argument += any(
                n == name and value in str(json.loads(a).get(key, "")).lower().replace(" ", "_") for n, a in calls
            )
            samples.append({"request": req_id, "reply": text[:160], "calls": calls})
        rows.append(
            {
                "format": fmt,
                "questions": len(ids),
                "parsed_calls": parsed,
                "right_function": right_name,
                "right_function_and_argument": right_argument,
                "samples": samples,
            }
        )
    report = {
        "model": "SmolLM2-135M-Instruct (GGUF, torch, fp32, CPU)",
        "sampling": {"temperature": 0.0, "max_tokens": args.max_tokens},
        "tools": [t.name for t in TOOLS],
        "formats": rows,
        "wall_s": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        for row in rows:
            print(
                f"{row['format']:12} parsed {row['parsed_calls']}/{row['questions']}  right function "
                f"{row['right_function']}  right argument {row['right_function_and_argument']}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
