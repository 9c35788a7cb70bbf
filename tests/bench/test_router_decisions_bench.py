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
    out = capsys.readouterr().out
    result = json.loads(out)["policies"]["hardware_aware"]["8"]
    reference = result["host_reference"]
    for times in (result, reference):
        assert 0 < times["p50_us"] <= times["p99_us"] <= times["max_us"]
    assert result["p99_over_p50"] == result["p99_us"] / result["p50_us"]
    assert reference["p99_over_p50"] == reference["p99_us"] / reference["p50_us"]
    assert result["num_choice_mismatches"] == 0
    # and the host's own stalls, probed in the same run, with the share of decisions they would land in
    stalls = json.loads(out)["host_stalls"]
    assert len(stalls["probes"]) == 2 and stalls["duration_s"] > 0.5
    assert 0.0 <= result["host_stall_hit_share_expected"] < 1.0


def test_the_headline_times_the_policy_alone_and_the_comparisons_come_from_a_second_pass(capsys):
    argv = ["--json", "--nodes", "8", "--decisions", "150", "--policies", "hardware_aware"]
    assert controlplane_router.main(argv) == 0
    result = json.loads(capsys.readouterr().out)["policies"]["hardware_aware"]["8"]
    interleaved = result["interleaved"]
    assert set(interleaved) >= {"p50_us", "p99_us", "p99_over_p50", "host_reference"}
    assert 0 < interleaved["p50_us"] <= interleaved["p99_us"]
    # the ratios are the interleaved pass's: the policy and its baseline timed under the same conditions
    assert result["ratio_p50"] == interleaved["p50_us"] / result["baseline"]["p50_us"]
    assert result["numpy_path_ratio_p99"] == interleaved["p99_us"] / result["numpy_path"]["p99_us"]


def test_the_policy_alone_times_no_comparison():
    alone = controlplane_router._bench_one("hardware_aware", 8, 120, 0, compare=False)
    assert not any(key.startswith(("baseline", "ratio_", "numpy_path", "num_choice")) for key in alone)
    paired = controlplane_router._bench_one("hardware_aware", 8, 120, 0, compare=True)
    assert paired["num_choice_mismatches"] == 0 and paired["numpy_path_num_choice_mismatches"] == 0
    assert alone["num_unrouted"] == paired["num_unrouted"]  # the same decisions in both passes
