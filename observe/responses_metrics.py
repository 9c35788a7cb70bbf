"""The gateway's Responses API state on the control plane's /metrics (gateway/response_store.py,
background_responses.py, conversation_store.py).

    zoo:responses_stored, zoo:responses_stored_bytes   gauges: responses kept (for GET and previous_response_id)
                                                       and their bytes, against --responses-store-max and -bytes
    zoo:responses_background_running                   gauge: background responses not ended yet (queued or in
                                                       progress), against GatewayConfig.responses_background_max
    zoo:responses_background_ended_total{status}       counter: background responses ended, by their status
                                                       (completed, incomplete, failed, cancelled)
    zoo:responses_background_resumed_total             counter: background responses a stopped gateway left running,
                                                       run again since this one started (--files-dir)
    zoo:conversations_stored, zoo:conversations_stored_bytes   gauges: conversations kept (/v1/conversations) and
                                                       their bytes, against GatewayConfig.conversations_max and -bytes
    zoo:conversations_evicted_total                    counter: conversations dropped, least recently used first, to
                                                       stay within those bounds (a client's DELETE not counted)
    zoo:conversations_unrecorded_responses_total       counter: responses whose items their conversation could not
                                                       take (deleted while they ran, or at its byte bound)
    zoo:chat_completions_stored, zoo:chat_completions_stored_bytes   gauges: chat completions kept (``store:
                                                       true``) and their bytes, against GatewayConfig's bounds
    zoo:chat_completions_evicted_total                 counter: stored chat completions dropped, least recently used
                                                       first, to stay within those bounds (a DELETE not counted)
    zoo:gateway_store_write_errors_total{store}        counter: writes to --files-dir that failed (a full disk), by
                                                       store (responses, conversations, chat_completions,
                                                       background_responses): kept in memory only

A response's request is the fleet's like any other (the request series count it); these say what the gateway holds.
Registered on the control plane's exporter beside its own (zoo/serve.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from controlplane.gateway.background_responses import BackgroundResponses
from controlplane.gateway.chat_completion_store import ChatCompletionStore
from controlplane.gateway.conversation_store import ConversationStore
from controlplane.gateway.response_store import ResponseStore
from observe import metrics_names as m


def responses_metrics(
    store: ResponseStore,
    background: BackgroundResponses,
    conversations: ConversationStore | None = None,
    chat_completions: ChatCompletionStore | None = None,
):
    """The collect function (observe/exporter.py SnapshotCollector) for the gateway's store, background runner,
    conversations and stored chat completions."""

    def collect() -> Iterable[Metric]:
        yield GaugeMetricFamily(m.RESPONSES_STORED, "Responses kept for GET and previous_response_id.",
                                value=len(store))  # fmt: skip
        yield GaugeMetricFamily(m.RESPONSES_STORED_BYTES, "Bytes of the responses kept.", value=store.num_bytes)
        yield GaugeMetricFamily(m.RESPONSES_BACKGROUND_RUNNING, "Background responses not ended yet.",
                                value=background.num_running)  # fmt: skip
        ended = CounterMetricFamily(m.RESPONSES_BACKGROUND_ENDED, "Background responses ended, by status.",
                                    labels=["status"])  # fmt: skip
        for status, n in background.ended.items():
            ended.add_metric([status], n)
        yield ended
        yield CounterMetricFamily(m.RESPONSES_BACKGROUND_RESUMED, "Background responses run again after a restart.",
                                  value=background.num_resumed)  # fmt: skip
        errors = CounterMetricFamily(m.STORE_WRITE_ERRORS, "Writes to --files-dir that failed, by store.",
                                     labels=["store"])  # fmt: skip
        for name, kept in (("responses", store), ("conversations", conversations),
                           ("chat_completions", chat_completions), ("background_responses", background)):  # fmt: skip
            journal = getattr(kept, "journal", None)
            if journal is not None:
                errors.add_metric([name], journal.num_errors)
        yield errors
        if chat_completions is not None:
            yield GaugeMetricFamily(m.CHAT_COMPLETIONS_STORED, "Chat completions kept (store: true).",
                                    value=len(chat_completions))  # fmt: skip
            yield GaugeMetricFamily(m.CHAT_COMPLETIONS_STORED_BYTES, "Bytes of the chat completions kept.",
                                    value=chat_completions.num_bytes)  # fmt: skip
            yield CounterMetricFamily(m.CHAT_COMPLETIONS_EVICTED, "Chat completions dropped to stay within the bounds.",
                                      value=chat_completions.num_evicted)  # fmt: skip
        if conversations is None:
            return
        yield GaugeMetricFamily(m.CONVERSATIONS_STORED, "Conversations kept.", value=len(conversations))
        yield GaugeMetricFamily(m.CONVERSATIONS_STORED_BYTES, "Bytes of the conversations kept.",
                                value=conversations.num_bytes)  # fmt: skip
        yield CounterMetricFamily(m.CONVERSATIONS_EVICTED, "Conversations dropped to stay within the bounds.",
                                  value=conversations.num_evicted)  # fmt: skip
        yield CounterMetricFamily(m.CONVERSATIONS_UNRECORDED, "Responses whose items their conversation refused.",
                                  value=conversations.num_unrecorded)  # fmt: skip

    return collect
