"""RouterConfig.slo_tpot_harm_reported in the fleet simulator: its nodes report their decoders' slack
(LoadReport.decode_slack_hist), each request carrying its TPOT target to its node (Placement.slo_tpot_s)."""

from __future__ import annotations

from controlplane.router.router_config import RouterConfig
from sim.des import FleetSimulator


def test_the_fleet_simulators_nodes_report_their_decoders_slack(small_fleet, tiny_workload, monkeypatch):
    """In the simulator every request carries its TPOT target to its node, so under load the nodes report decoders
    by their slack; with the knob on the run is deterministic and serves every request."""
    import agent.node_core as node_core

    reports = []
    real = node_core.NodeCore.load_report

    def load_report(self):
        report = real(self)
        reports.append(report)
        return report

    monkeypatch.setattr(node_core.NodeCore, "load_report", load_report)
    # a target the H100 meets with little to spare
    config = RouterConfig(slo_tpot_s=0.03, slo_tpot_harm_count=True, slo_tpot_harm_reported=True)
    fleet, workload = small_fleet(), tiny_workload(num=80, gap_s=0.01, prompt=1500, output=60)
    first = FleetSimulator(fleet, workload, "hardware_aware", seed=3, router_config=config).run()
    assert any(r.decode_slack_hist for r in reports)
    second = FleetSimulator(fleet, workload, "hardware_aware", seed=3, router_config=config).run()
    signature = [(r.req_id, r.node_id, r.first_token_s, r.finish_s) for r in first.records]
    assert signature == [(r.req_id, r.node_id, r.first_token_s, r.finish_s) for r in second.records]
    assert first.drained and all(r.num_output_tokens == 60 for r in first.records)
