"""bench/controlplane_router.py: the host-tail reference sits beside the decision times, from the same run."""

import json

from bench import controlplane_router


def test_the_reference_work_is_the_same_every_call():
    first = controlplane_router._reference_work()
    assert first == controlplane_router._reference_work()
    assert first == sum(range(256)) + 3.0 * 1022 + 1.5  # 0 and 1.5 under the 3.0 cap, every other element at it


def test_the_decision_bench_reports_the_hosts_tail_beside_the_decisions(capsys):
    argv = ["--json", "--nodes", "8", "--decisions", "150", "--policies", "hardware_aware"]
    assert controlplane_router.main(argv) == 0
    result = json.loads(capsys.readouterr().out)["policies"]["hardware_aware"]["8"]
    reference = result["host_reference"]
    for times in (result, reference):
        assert 0 < times["p50_us"] <= times["p99_us"] <= times["max_us"]
    assert result["p99_over_p50"] == result["p99_us"] / result["p50_us"]
    assert reference["p99_over_p50"] == reference["p99_us"] / reference["p50_us"]
    assert result["num_choice_mismatches"] == 0
