"""``zoo top``: the live fleet dashboard, fed by the control plane's FleetStats stream (observe/stats_stream).

    ┌ status: control plane endpoint · policy · nodes · eBPF status   (or "waiting for control plane") ┐
    │ rates: requests/s · preemptions/s · rejected/s · in flight · forecast late                        │
    │ alerts (with --alertmanager URL): the fleet's active alerts, critical first (observe/alertmanager_alerts) │
    │ node table (s: sort, r: reverse, c: cell filter, g: GPU filter, x: clear, enter: detail,          │
    │             D: drain the selected node, U: resume it, Z: put it to sleep, W: wake it — with     │
    │             --client: tui/node_actions.py; the sleep keys need a control plane in sleep mode)        │
    │ queue wait / router→node hop / node→router return: [app] sparkline │ [eBPF] sparkline              │
    └────────────────────────────────────────────────────────────────────────────────────────────────────┘

Every latency figure names its source: "app" (the processes' own time.monotonic_ns stamps) or "eBPF"
(``zoo probe``'s kernel histograms, when attached). The SUB socket reconnects by itself; with no
snapshot for ``stale_after_s`` the status line says the dashboard is waiting for the control plane,
and the table keeps the last snapshot until a new one (possibly from a restarted control plane) arrives.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import DataTable, Footer, Header, Sparkline, Static

from observe.alertmanager_alerts import AlertmanagerError, AlertsReply
from transport.messages import FleetStats
from tui.fleet_view import (
    COLUMNS,
    EBPF_SERIES,
    SERIES,
    SOURCE_TITLES,
    SOURCES,
    FleetView,
    describe_figure,
    describe_rates,
    describe_status,
)
from tui.node_detail import NodeDetailScreen

MAX_ALERT_LINES = 5  # the alerts shown under the rates line; the rest counted


class ZooTopApp(App[None]):
    CSS_PATH = "zoo_top.tcss"
    TITLE = "zoo top"
    BINDINGS = [  # noqa: RUF012 (Textual's class attribute)
        Binding("s", "cycle_sort", "sort"),
        Binding("r", "reverse_sort", "reverse"),
        Binding("c", "cycle_cell", "cell"),
        Binding("g", "cycle_gpu", "GPU type"),
        Binding("x", "clear_filters", "clear filters"),
        Binding("D", "drain", "drain node"),
        Binding("U", "resume", "resume node"),
        Binding("Z", "sleep", "sleep node"),
        Binding("W", "wake", "wake node"),
        Binding("q", "quit", "quit"),
    ]

    def __init__(
        self,
        endpoint: str | None,
        *,
        stale_after_s: float = 3.0,
        node_actions: Callable[[str, str], Awaitable[tuple[bool, str]]] | None = None,
        alerts: Callable[[], Awaitable[AlertsReply]] | None = None,
        alerts_every_s: float = 5.0,
    ) -> None:
        """endpoint: the stats stream to subscribe to; None: nothing (tests feed ``apply_stats``). node_actions:
        ``(node id, "drain" | "resume" | "sleep" | "wake")`` done to a node (tui/node_actions.py: ``zoo top
        --client``); None: D, U, Z and W say how to turn them on. alerts: asks the Alertmanager for the fleet's active
        alerts (``zoo top --alertmanager URL``: observe/alertmanager_alerts.py ``fetch_alerts``), every
        ``alerts_every_s``; None: no alerts line."""
        super().__init__()
        self.endpoint = endpoint
        self.node_actions = node_actions
        self.alerts = alerts
        self.alerts_every_s = alerts_every_s
        # kept, not queried: a poll that ended as the app closed found no #alerts in the DOM being torn down (NoMatches)
        self._alerts_line = Static(id="alerts", markup=False, classes="absent" if alerts is None else "")
        self.stale_after_s = stale_after_s
        self.view = FleetView()
        self.waiting = True  # no snapshot yet, or none for stale_after_s
        self._last_snapshot_s: float | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(id="status", classes="waiting", markup=False)
        yield Static(id="rates", markup=False)
        yield self._alerts_line
        yield DataTable(id="nodes", cursor_type="row", zebra_stripes=True)
        with Vertical(id="latency"):
            for name, title in SERIES:
                with Horizontal(classes="series"):
                    for source in SOURCES:
                        with Vertical(classes="series-source", id=f"box-{name}-{source}"):
                            yield Static(f"{title} [{SOURCE_TITLES[source]}]", classes="series-title", markup=False)
                            yield Sparkline([], id=f"spark-{name}-{source}")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#nodes", DataTable)
        for column in COLUMNS:
            table.add_column(column.title, key=column.key)
        self._render_status()
        self.set_interval(min(0.25, self.stale_after_s / 2), self._check_stale)
        if self.endpoint is not None:
            self._listen()
        if self.alerts is not None:
            self._alerts_line.update("alerts: asking the Alertmanager ...")
            self._poll_alerts()
            self.set_interval(self.alerts_every_s, self._poll_alerts)

    @work(exclusive=True, group="stats-stream")
    async def _listen(self) -> None:
        from observe.stats_stream import subscribe

        async for stats in subscribe(self.endpoint):
            self.apply_stats(stats)

    @work(exclusive=True, group="alerts")
    async def _poll_alerts(self) -> None:
        try:
            reply = await self.alerts()
        except AlertmanagerError as e:
            self.show_alerts(None, str(e))
        else:
            self.show_alerts(reply)

    def show_alerts(self, reply: AlertsReply | None, error: str = "") -> None:
        """The alerts line: how many are active by severity, then the first few, critical first; or why not."""
        line = self._alerts_line
        line.set_class(reply is None, "error")
        line.set_class(reply is not None and any(a.severity == "critical" for a in reply.alerts), "critical")
        if reply is None:
            line.update(f"alerts: the Alertmanager did not answer: {error}")
            return
        if not reply.alerts:
            line.update("alerts: none active" + (f" ({reply.num_malformed} entries unreadable)" if reply.num_malformed
                                                 else ""))  # fmt: skip
            return
        counts = ", ".join(f"{n} {severity}" for severity, n in reply.counts().items())
        unread = f"; {reply.num_malformed} entries unreadable" if reply.num_malformed else ""
        shown = [f"  {alert.line()}" for alert in reply.alerts[:MAX_ALERT_LINES]]
        more = len(reply.alerts) - len(shown)
        line.update("\n".join([f"alerts: {len(reply.alerts)} active ({counts}){unread}", *shown]
                              + ([f"  ... {more} more"] if more else [])))  # fmt: skip

    # -- state ----------------------------------------------------------------------------------------

    def apply_stats(self, stats: FleetStats) -> None:
        self.view.update(stats)
        self._last_snapshot_s = time.monotonic()
        self.waiting = False
        self._render()

    def _check_stale(self) -> None:
        stale = self._last_snapshot_s is None or time.monotonic() - self._last_snapshot_s > self.stale_after_s
        if stale != self.waiting:
            self.waiting = stale
            self._render_status()

    # -- rendering ------------------------------------------------------------------------------------

    def _render(self) -> None:
        self._render_status()
        self._render_table()
        self._render_latency()
        if isinstance(self.screen, NodeDetailScreen):
            self.screen.refresh_view()

    def _render_status(self) -> None:
        status = self.query_one("#status", Static)
        where = self.endpoint or "(no stream)"
        stats = self.view.stats
        if self.waiting:
            status.add_class("waiting")
            shown = " · showing the last snapshot" if stats is not None else ""
            status.update(f"waiting for control plane at {where}{shown}")
        else:
            status.remove_class("waiting")
            status.update(describe_status(stats, where))
        filters = [f"cell={self.view.cell_filter}"] if self.view.cell_filter else []
        filters += [f"gpu={self.view.gpu_filter}"] if self.view.gpu_filter else []
        order = "↓" if not self.view.sort_reverse else "↑"
        self.sub_title = f"sort {self.view.sort_column.title} {order}" + (f" · {' '.join(filters)}" if filters else "")
        if stats is not None:
            self.query_one("#rates", Static).update(describe_rates(self.view))

    def _render_table(self) -> None:
        table = self.query_one("#nodes", DataTable)
        selected = self.selected_node_id()
        table.clear()
        for node in self.view.rows():
            table.add_row(*(column.cell(node) for column in COLUMNS), key=node.node_id)
        if selected is not None:
            keys = [n.node_id for n in self.view.rows()]
            if selected in keys:
                table.move_cursor(row=keys.index(selected), animate=False)

    def _render_latency(self) -> None:
        for name, title in SERIES:
            for source in SOURCES:
                figure = self.view.figure(name, source)
                box = self.query_one(f"#box-{name}-{source}", Vertical)
                box.set_class(figure is None, "absent")
                attached = self.view.stats is not None and bool(self.view.stats.ebpf_status)
                if source == "ebpf" and name not in EBPF_SERIES:
                    label = "n/a (a wait inside one process)"
                elif source == "ebpf" and not attached:
                    label = "not attached"
                else:
                    label = describe_figure(figure)
                box.query_one(".series-title", Static).update(f"{title} [{SOURCE_TITLES[source]}] {label}")
                self.query_one(f"#spark-{name}-{source}", Sparkline).data = self.view.history(name, source)

    def selected_node_id(self) -> str | None:
        table = self.query_one("#nodes", DataTable)
        if table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return row_key.value

    # -- input ------------------------------------------------------------------------------------------

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        if event.data_table.id == "nodes" and event.row_key.value is not None:
            self.push_screen(NodeDetailScreen(self.view, event.row_key.value))

    def action_cycle_sort(self) -> None:
        self.view.cycle_sort()
        self._render()

    def action_reverse_sort(self) -> None:
        self.view.reverse_sort()
        self._render()

    def action_cycle_cell(self) -> None:
        self.view.cycle_cell_filter()
        self._render()

    def action_cycle_gpu(self) -> None:
        self.view.cycle_gpu_filter()
        self._render()

    def action_clear_filters(self) -> None:
        self.view.clear_filters()
        self._render()

    def action_drain(self) -> None:
        self._act("drain")

    def action_resume(self) -> None:
        self._act("resume")

    def action_sleep(self) -> None:
        self._act("sleep")

    def action_wake(self) -> None:
        self._act("wake")

    def _act(self, action: str) -> None:
        node_id = self.selected_node_id()
        if self.node_actions is None:
            message = "start zoo top with --client tcp://HOST:5556 to drain, resume, sleep and wake nodes"
            self.notify(message, severity="warning")
        elif node_id is not None:
            self._ask(node_id, action)

    @work(group="node-actions")
    async def _ask(self, node_id: str, action: str) -> None:
        done, message = await self.node_actions(node_id, action)
        self.notify(message, severity="information" if done else "error")
