"""The detail view of one node: its facts, counters and every latency figure with its source."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import DataTable, Sparkline, Static

from tui.fleet_view import SERIES, SOURCE_TITLES, FleetView, _ms, _percent, describe_pair


class NodeDetailScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,enter", "dismiss", "back")]  # noqa: RUF012 (Textual's class attribute)

    def __init__(self, view: FleetView, node_id: str) -> None:
        super().__init__()
        self.view = view
        self.node_id = node_id

    def compose(self) -> ComposeResult:
        with Vertical(id="detail"):
            yield Static(id="detail-title", markup=False)
            yield Static(id="detail-facts", markup=False)
            yield DataTable(id="detail-figures", cursor_type="none", zebra_stripes=True)
            for name, title in SERIES:
                yield Static(f"{title} [app] interval p50, ms", classes="series-title", markup=False)
                yield Sparkline(self.view.history(name, "app", self.node_id), id=f"detail-{name}")

    def on_mount(self) -> None:
        table = self.query_one("#detail-figures", DataTable)
        table.add_columns("figure", "source", "p50 ms", "p99 ms", "samples")
        self.refresh_view()

    def refresh_view(self) -> None:
        node = self.view.node(self.node_id)
        title = self.query_one("#detail-title", Static)
        if node is None:
            title.update(f"{self.node_id}: gone from the fleet")
            return
        title.update(f"{node.node_id} · {node.state} · {node.gpu_type} · cell {node.cell} · {node.model}")
        self.query_one("#detail-facts", Static).update(
            f"power {node.power_score:.2f}   running {node.num_running}   waiting {node.num_waiting}   "
            f"swapped {node.num_swapped}   KV {100 * node.kv_usage:.0f}%   in flight {node.num_inflight}\n"
            f"routed {node.num_routed_total}   served {node.num_served_total}   failed {node.num_failed_total}   "
            f"preemptions {node.num_preemptions_total}\n"
            f"TTFT p50/p99 {_ms(node.ttft_p50_s)}/{_ms(node.ttft_p99_s)} ms   "
            f"TPOT p50/p99 {_ms(node.tpot_p50_s)}/{_ms(node.tpot_p99_s)} ms   (app, as the router saw them)\n"
            f"metrics {node.metrics_url or 'not exported'}\n"
            f"kernels {node.kernels or 'not reported'}   "
            f"decode roofline {_percent(node.decode_roofline_fraction)}%   "
            f"role {node.role}   config {node.config_digest[:8] or 'not said'}"
            f"{f'   profiler {node.profiling}' if node.profiling else ''}{describe_sleep(node.sleep_level)}\n"
            f"{describe_placement(node)}\n"
            f"{describe_spec(node)}"
        )
        table = self.query_one("#detail-figures", DataTable)
        table.clear()
        for f in self.view.figures_of(self.node_id):
            table.add_row(f.name, SOURCE_TITLES.get(f.source, f.source), _ms(f.p50_s), _ms(f.p99_s), str(f.count_total))
        for name, _ in SERIES:
            self.query_one(f"#detail-{name}", Sparkline).data = self.view.history(name, "app", self.node_id)


def describe_spec(node) -> str:
    """The node's speculative pair (controlplane/spec_pairs.py): its drafter and the predicted TPOTs."""
    line = f"drafter {describe_pair(node)}" if node.spec_drafter else "drafter none"
    if node.spec_tpot_plain_s is not None and node.spec_tpot_paired_s is not None:
        line += f"   predicted TPOT plain {_ms(node.spec_tpot_plain_s)} ms, paired {_ms(node.spec_tpot_paired_s)} ms"
    return line


def describe_placement(node) -> str:
    """Where the node is (its hello's host and rack): the KV link to its peers follows from it."""
    return f"host {node.host or 'not said'}   rack {node.rack or 'none'}"


def describe_sleep(level: int) -> str:
    """A node's sleep mode in the detail view ("" awake): POST /sleep's level, or a sleep waiting for its requests."""
    if level == 0:
        return ""
    return "   asleep: sleep pending, its requests finishing" if level < 0 else f"   asleep at level {level}"
