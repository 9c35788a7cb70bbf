"""RequestLog: vLLM's ``--enable-log-requests``: one log line per request the control plane takes or refuses.

    Received request <id>: prompt: '<text>', params: SamplingParams(...), prompt_token_ids: [...], lora_request:
        <adapter>, node: <node>, traffic_class: <class>.
    Refused request <id>: <code>: <why>.
    Generated response <id>: output: '<text>', output_token_ids: [...], finish_reason: <reason>, outcome: <how>.

vLLM's RequestLogger (vllm/entrypoints/logger.py ``log_inputs``) writes the first line, from the OpenAI server, with
the prompt after its chat template. Here it is written where every request meets the fleet, the HTTP gateway's and
the ZeroMQ clients' alike: the control plane's intake, once the request is tokenized and placed (so the node it went
to is named too). The prompt's text is the client's own for a completion, else the prompt's tokens decoded (a chat
after its template). ``max_log_len`` (vLLM's ``--max-log-len``) keeps the first that many characters of the prompt
and the first that many of its token ids (None: all of them); the text is decoded from no more tokens than that, so a
long prompt costs the loop no more than a short one. Off by default, as vLLM's since 0.10: prompts are users' data.

With ``log_outputs`` (vLLM's ``--enable-log-outputs``) a third line as each request leaves the fleet: its output as
relayed to its client (across a resume: all of it), its text decoded from those tokens, both cut at ``max_log_len``;
its finish reason (stop, length, abort; None when it ended otherwise) and how it left (completed, cancelled, failed).
"""

from __future__ import annotations

import logging

from controlplane.request_intake import Placement
from engine.llm_engine import EngineTokenizer
from transport.messages import ClientGenerate, ErrorReply

log = logging.getLogger("zoo.requests")


class RequestLog:
    """Writes the lines (module docstring) to the ``zoo.requests`` logger at INFO."""

    def __init__(self, tokenizer: EngineTokenizer, max_log_len: int | None = None, log_outputs: bool = False) -> None:
        if max_log_len is not None and max_log_len < 0:
            raise ValueError(f"max_log_len must be >= 0 or None, got {max_log_len}")
        self.tokenizer = tokenizer
        self.max_log_len = max_log_len
        self.log_outputs = log_outputs
        self.num_logged = 0
        self._finish_reasons: dict[str, str | None] = {}  # a request's last chunk's reason, until it is logged

    def finishing(self, request_id: str, finish_reason: str | None) -> None:
        """Its last chunk came (before the table retires it and ``done`` is called)."""
        if self.log_outputs:
            self._finish_reasons[request_id] = finish_reason

    def done(self, request_id: str, output_token_ids: list[int], outcome: str) -> None:
        reason = self._finish_reasons.pop(request_id, None)
        if not self.log_outputs or not log.isEnabledFor(logging.INFO):
            return
        limit = self.max_log_len
        ids = output_token_ids if limit is None else output_token_ids[:limit]
        text = self._decoded(ids)
        text = text if limit is None else text[:limit]
        log.info(
            "Generated response %s: output: %r, output_token_ids: %s, finish_reason: %s, outcome: %s.",
            request_id, text, ids, reason, outcome,
            extra={"request_id": request_id, "finish_reason": reason, "outcome": outcome},
        )  # fmt: skip
        self.num_logged += 1

    def received(self, msg: ClientGenerate, placed: Placement) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        limit = self.max_log_len
        token_ids = placed.token_ids if limit is None else placed.token_ids[:limit]
        text = msg.prompt if msg.prompt is not None else self._decoded(token_ids)
        text = text if limit is None else text[:limit]
        lora = placed.lora.name if placed.lora is not None else None
        log.info(
            "Received request %s: prompt: %r, params: %s, prompt_token_ids: %s, lora_request: %s, node: %s, "
            "traffic_class: %s.",
            msg.request_id, text, msg.sampling, token_ids, lora, placed.node_id, placed.route.traffic_class,
            extra={"request_id": msg.request_id, "node_id": placed.node_id,
                   "traffic_class": placed.route.traffic_class},
        )  # fmt: skip
        self.num_logged += 1

    def refused(self, msg: ClientGenerate, error: ErrorReply) -> None:
        if log.isEnabledFor(logging.INFO):
            log.info(
                "Refused request %s: %s: %s.", msg.request_id, error.code.value, error.message,
                extra={"request_id": msg.request_id, "error_code": error.code.value},
            )  # fmt: skip
            self.num_logged += 1

    def _decoded(self, token_ids: list[int]) -> str:
        try:
            return self.tokenizer.decode(token_ids)
        except Exception as e:  # a tokenizer that cannot decode these ids: the ids are logged all the same
            return f"<not decoded: {type(e).__name__}>"
