"""RouterConfig: which policy routes, and the knobs of the policies that have any."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from controlplane.cells import CellsConfig


@dataclass(slots=True)
class RouterConfig:
    """Routing.

    policy: the policy's name (see ``controlplane/router/policies/__init__.py``: ``POLICIES``).
    seed: seeds every random choice a policy makes (ties, sampling, P2C draws), so a run is reproducible.
    cells_by_traffic_class: a request's traffic class → the cell whose nodes may serve it; a class not
        listed may go to any cell.
    cells: the cells and traffic classes (controlplane/cells.py): home cells, spill rules, priorities,
        per-class SLOs and queue limits; a class it knows takes its home cell from it.

    hardware_aware (formulas in ``policies/hardware_aware.py``):
    default_model_params_b / model_params_b: model size in billions of parameters (per served model name,
        default for unlisted ones). Used only for the estimates of nodes that have not measured themselves
        yet, and every node of one decision serves the same model, so it needs to be roughly right only.
    bytes_per_param: weight bytes read per parameter by a decode step (2 = bf16).
    prefill_mfu: achieved fraction of peak compute in a prefill step (the Vidur calibration: linear layers
        reach 0.56-0.78 of peak bf16 on A100/H100 and the other layers add 5-40% on top, hence 0.5).
    decode_bandwidth_efficiency: achieved fraction of peak memory bandwidth in a decode step (0.7-0.9 measured).
    tpot_weight: weight of the predicted decode time against the predicted TTFT in the cost (low: a slower
        node that meets the SLO takes work before a faster one queues it; at 1 the zoo's L4s stayed idle).
    tpot_horizon_tokens: output tokens counted in the cost (min with the request's max_tokens).
    slo_ttft_s / slo_tpot_s: the latency targets a node is predicted to meet or miss (the goodput SLO).
    slo_ttft_miss_penalty_s / slo_tpot_miss_penalty_s: added to the cost of a node predicted to miss that
        target. The TPOT one is small (1 s): large, on a prefill-bound fleet (zoo, Azure code trace at 80% load)
        it herds the work onto the one GPU type whose mixed prefill+decode steps stay under the target, whose
        queues then miss the TTFT target instead (goodput 17% with it at 10 s, 22% without). GRID_12 kept it off
        on the default SLO's tuning cases; GRID_16, judging one setting over those cases and the same cases at
        the second SLO the reports give (TTFT 2 s, TPOT 50 ms), chose 1 s (scripts/tune_router.py,
        bench/results/2026-12-03-sim-tune-16.json).
    tpot_measured_steps: the decode step in the TPOT predictions is at least the node's measured mean step time of
        its last report's window (``NodeView.step_mean_ms``: the steps that carried decode rows, mixed
        prefill+decode ones included, the time per token its decoders got; GRID_17 ran with the mean over every
        step, prefill-only ones too), not only the pure decode step the model scales: under load a node's
        steps carry prefill chunks of the prompts that keep arriving, which the model's backlog term (the prompts
        already queued, spread over the request's decode steps) does not see (bench/results/
        2026-12-03-tpot-arrival-diag.json: on conv the TPOT measured on the A100s and H100s is 1.6-2.1x the one
        predicted). On: GRID_18's choice over both SLOs (bench/results/2026-12-03-sim-tune-18.json); GRID_17,
        with the mean over every step, kept it off (-17.json).
    slo_ttft_late_weight: a TTFT miss priced by how late it is: a node predicted to miss the TTFT target gains
        slo_ttft_late_weight * (TTFT - slo_ttft_s) (its TTFT with nothing cached, adapter load included; a prefix cache
        lifts it with the TTFT it saves). The miss penalty is a step, the same for a wait of 3 s and one of 8 s; the
        TTFT itself weighed 1 against decode protection's 3 s per decoder (10 s since GRID_26), so decode protection
        could move a long prompt off the fastest prefill nodes to finish prefill seconds later elsewhere
        (bench/results/2026-12-03-count-tail-diag.json: code at 60% load, 2.5 s -> 5.9 s). 0: off. 1 chosen by the
        twenty-fifth grid (bench/results/2026-12-03-sim-tune-25.json), with the reported count: the first setting
        admissible since the second SLO joined the tuning cases (no P99 bound broken; off breaks 2, the reported count
        alone 3), smallest margin -0.088 (mooncake 100% at the second SLO .360 against dynamo_kv's .448); weight 1 alone
        and 3 (alone, with the count) are admissible too, at -0.224, -0.214 and -0.143.
    slo_tpot_floor_miss: a node that cannot meet the TPOT target at any load is charged as missing the SLO: where
        its decode step with one sequence (the roofline's, or the start-up profile's measured step where that is
        lower: ``node_predictions.decode_floor_s``) is above the request's TPOT target, it pays the TTFT miss
        penalty even where its TTFT meets the target (once: not on top of a TTFT miss), bin packing does not
        charge it, and it counts as missing toward a lost cause (sacrifice); SLO triage still reads its TTFT as
        it is, so it stays where the lost causes go. A prefix cache does not lift that charge. So such a GPU
        type takes only what no node can serve within the SLO (an L4 decodes an 8B model's step in ~70 ms: at a
        50 ms TPOT target every request it takes is lost, however short its queue). At the default SLO (100 ms)
        no node of the zoo fleets is such a node, and nothing changes. Kept off by the nineteenth grid, over both
        SLOs (bench/results/2026-12-03-sim-tune-19.json: the second SLO's code cases gain .004-.008, its mooncake
        ones lose up to .039).
    slo_tpot_lost_to_doomed: goodput first at a tight TPOT target, an operator's choice: where every node is predicted
        to miss the request's TPOT target (step + min(backlog / decode steps, chunk), as the cost's TPOT) and some
        node cannot meet it at any load (its one-sequence decode step above it, as slo_tpot_floor_miss reads it),
        the request goes to the least-cost such node (router/policies/tpot_lost.py), so the nodes that can still
        decode within the target keep their steps short for the requests they can serve. It trades the TTFT tail
        for goodput: on the declared tuning split code's second-SLO goodput rose above every fair anchor's at 60,
        80 and 100% load while three P99 bounds broke (bench/results/2026-12-04-tpot-lost-probe.json). Kept off by
        the thirty-first grid (bench/results/2026-12-05-sim-tune-31.json: unbounded, goodput ahead of every fair
        anchor on all 14 tuning cases, smallest margin +0.027, and three P99 bounds broken; bounded below, admissible
        but tied with off). At the default SLO (100 ms) no node of the zoo fleets has such a floor, and nothing
        changes. The requests it moved: zoo:router_tpot_lost_redirects_total. A traffic class may choose for its
        own requests (TrafficClass.goodput_first; unset: this setting).
    slo_tpot_lost_ttft_factor: with slo_tpot_lost_to_doomed, only to a node where the request's predicted TTFT
        (queue, current step, its own prefill, an adapter's load: the cost's TTFT) is within this factor times its
        TTFT target; where no such node misses TPOT at any load, hardware_aware's choice stands. 0: no bound. The
        probe's factor 1 kept the tail and lost the gain (code 80% at the second SLO .229 against off .230); the
        thirty-first grid's 1.5 and 2 kept every P99 bound and lost a little goodput on code, 3 broke one bound.
    slo_triage_penalty_s: SLO triage: added to the cost of a node predicted to miss the TTFT target when that
        node's queue (its wait before this prompt) still meets it, so a request that misses everywhere goes to
        a node that is already late instead of taking the slack of those still serving within the SLO.
    slo_tpot_harm_penalty_s: decode protection: added to the cost of a node whose running decodes this prompt's
        prefill chunks (with the node's backlog) would push over the TPOT target (with slo_tpot_harm_count: per
        decoder pushed over).
        Both chosen on the declared tuning split by scripts/tune_router.py's rule (its docstring), the
        defaults are its choice (bench/results/2026-12-01-sim-eval-goodput.json). The harm penalty, chosen 3 s there,
        is 10 s since the twenty-sixth grid (bench/results/2026-12-04-sim-tune-26.json: 3, 6 and 10 s all
        admissible; smallest margins -0.088, -0.073, -0.069, at mooncake 100% at the second SLO; 6 and 10 s tied
        within 0.005, 10 s the lower worst P99/P50).
    slo_tpot_harm_triage: decode protection protects only the decodes that can still meet the target: the harm
        penalty is charged only where the node's decode step (the TPOT prediction's step term: the modelled step
        with this request added, or the measured mean step where that is longer, ``tpot_step_s``) is within the
        TPOT target. A node whose decodes already miss it is not protected, so it is priced like a node whose
        decodes this prompt leaves within the target, as SLO triage does for the TTFT target (a node whose
        decodes meet the target but that this prompt would push over still pays). Kept off by the twentieth grid,
        over both SLOs (bench/results/2026-12-03-sim-tune-20.json): on, the tuning split's default-SLO code cases
        gain (code 80% .317 -> .436, code 100% .247 -> .395) and its second-SLO Mooncake cases lose (mooncake 80%
        .603 -> .534); at 50 ms most nodes' steps are over the target, so triage all but turns protection off.
    slo_tpot_harm_decoders: decode protection spreads this prompt's prefill over the decode steps of the requests
        it would slow, as the control plane sees them (``NodeView.decode_inv_steps``: the harmonic mean of the
        max_tokens of the requests decoding on the node), instead of over this request's own: n in harm_tpot is
        the node's decoders' where it has any the control plane knows of, else this request's. On code a short
        new request made the harm a whole chunk on nearly every node; the decoders it would slow may run long.
        Kept off by the twenty-first grid, over both SLOs and three seeds (bench/results/2026-12-03-sim-tune-21.json):
        on lifts 10 of the 14 tuning cases (code 80% .331 -> .419, code 100% .260 -> .358) and lowers the binding
        case, mooncake 100% at the second SLO (.302 -> .283; smallest margin -0.165 against -0.146).
    slo_tpot_harm_count: decode protection charges slo_tpot_harm_penalty_s once per decoder this prompt pushes over
        the TPOT target, instead of once where the node's predicted decode TPOT with it is over: a decoder of n
        decode steps (max_tokens - 1, as the control plane saw it routed) at the node's predicted step s meets the
        target T with n * (T - s) to spare, so the prompt's prefill (own_s: its uncached tokens' time) after the
        node's backlog (backlog_s) pushes over those with backlog_s <= n * (T - s) < backlog_s + own_s (counted
        from ``NodeView.decode_steps_hist``, interpolated between its bins: router/decode_steps.py). A short
        decoder is pushed over by a prompt that a long one absorbs; where s >= T none is (they miss already). On,
        slo_tpot_harm_decoders and slo_tpot_harm_triage do not apply, and only the decoders the control plane
        knows of count (first token relayed, max_tokens known). The probe behind it
        (bench/results/2026-12-03-slack-harm-probe.json) counted from the exact lengths. Chosen on by the
        twenty-second grid, over both SLOs and three seeds (bench/results/2026-12-03-sim-tune-22.json): no setting
        admissible (the second SLO's code cases' mean P99 above their bounds in both rows), on has the larger
        smallest margin, -0.091 against off's -0.146 (both at mooncake 100% at the second SLO: .302 -> .357, against
        dynamo_kv's .448); on lifts every default-SLO code case (code 80% .331 -> .430, code 100% .260 -> .387).
        Turned off again by the twenty-third grid under the rule's fourth point (bench/results/2026-12-03-sim-tune-
        23.json): with none admissible, off breaks 2 P99 bounds and every count row 3 (on adds code 60%'s), so off
        is kept although its smallest margin is lower (-0.146 against -0.091). On again, counting from the nodes'
        reports (slo_tpot_harm_reported) with lateness priced (slo_ttft_late_weight 1), by the twenty-fifth grid.
    slo_tpot_harm_count_cap_s: with slo_tpot_harm_count, the most decode protection charges one node, however
        many decoders the prompt pushes over there (0: no cap). At 3 s a decoder, four decoders pushed over outweigh
        one TTFT miss (slo_tpot_harm_penalty_s 3 s x 4 > slo_ttft_miss_penalty_s 10 s), so a long prompt waits for a
        node without short decoders while its own TTFT misses: on the eval split's code cases the count lowered the
        P99 TTFT lead to 1.44-1.47x (bench/results/2026-12-03-sim-tune-22.json). Capped at the TTFT miss penalty, a
        node's decoders never outweigh the prompt's own miss. No cap chosen by the twenty-third grid (bench/results/
        2026-12-03-sim-tune-23.json): no cap (10, 6 or 3 s) brings code 60%'s tuning P99 within its bound (5.91 s
        -> 6.09, 5.91+, 6.08 against 5.99 uncapped and 5.45 with the count off), and the smaller caps lower the
        binding case (mooncake 100% at the second SLO .357 -> .321 at 6 s, .307 at 3 s).
    slo_tpot_harm_reported: with slo_tpot_harm_count, count the decoders a prompt pushes over from the nodes' own
        reports of their decoders' slack (NodeView.decode_slack_hist; engine/decode_slack.py: each decoder's spare
        time from its real progress, its own TPOT target and the node's measured step) instead of from the lengths
        the control plane saw routed: those with backlog_s <= slack < backlog_s + own_s. A node that reports none
        (none of its decoders can be pushed over, or an older agent) is counted as having none. The probe behind it
        (bench/results/2026-12-03-slack-harm-probe.json, its "reported" mode) lifted the binding tuning case,
        mooncake 100% at the second SLO, from the lengths' .353 to .409. Kept off by the twenty-fourth grid
        (bench/results/2026-12-03-sim-tune-24.json): it lifts 13 of the 14 tuning means and the smallest margin to
        -0.030 (off -0.146; mooncake 100% at the second SLO .302 -> .418), but breaks code 60%'s P99 bound (5.45 ->
        6.11 s against 5.91), so the rule's fourth point keeps the count off (3 bounds broken against 2). Chosen on,
        with slo_ttft_late_weight 1, by the twenty-fifth grid (bench/results/2026-12-03-sim-tune-25.json): lateness
        priced brings code 60%'s mean P99 to 4.31 s, and the count keeps most of its goodput (code 60% .449 -> .475).
    slo_triage_spare_capable_below: SLO triage spares the nodes that could serve a prompt of this size within
        the TTFT target when they are scarce: when fewer than this fraction of the nodes could even empty (a
        node's prefill of the whole prompt alone within the target), triage charges every node that could
        (late or not) and none of those that could not, so a request that misses everywhere goes to a node
        that would have missed it anyway, not to a late one of the few that serve long prompts in time;
        otherwise the rule above (charge the nodes whose queue still meets the target). 0: the rule above
        always; 1: whenever some node could not.
    tpot_excess_only: the TPOT term of the cost counts only the predicted TPOT above the request's TPOT target
        (tpot_weight * min(max_tokens, tpot_horizon_tokens) * max(TPOT - slo_tpot_s, 0)), so decode speed
        beyond the SLO buys nothing and slower nodes that meet it take work.
        Both chosen on the declared tuning split by scripts/tune_router.py's rule, unchanged (its fourth grid:
        bench/results/2026-12-01-sim-tune-3.json); off, they give the decisions of the earlier defaults.
    slo_pack_weight: bin packing among the nodes predicted to meet the TTFT target: such a node's cost gains
        slo_pack_weight * max(slo_ttft_s - prompt / rate, 0), the slack its prefill speed leaves under the
        target for a prompt of this size (the whole prompt, cached or not), so the spare capability of the fast
        nodes is kept for the prompts only they serve in time; at most slo_ttft_miss_penalty_s (meeting the
        target never costs more than missing it). 1: among the nodes that meet the target, their
        prefill speed no longer counts (the least wait wins); 2: the slowest node that still meets it wins at
        equal wait. 0 (off): the quickest node that meets it wins.
    slo_pack_needs_tpot: bin packing packs only onto the nodes predicted to meet both targets: a node that meets
        the TTFT target but whose predicted TPOT (the TPOT term's: this request's decode step on the node's
        running batch plus the backlog's chunks) is above slo_tpot_s is charged as if it prefilled in no time,
        min(slo_pack_weight * slo_ttft_s, slo_ttft_miss_penalty_s), the most bin packing charges any node, so
        packing never moves a request onto it (vs slo_pack_weight 0) and a node that meets both is strictly
        preferred by the packing term wherever that charge is under the cap. (Charging such a node nothing,
        as at weight 0, would prefer it to the nodes that meet both; the cap alone, 10 s, would be a TPOT miss
        penalty, which herds on a prefill-bound fleet: see slo_tpot_miss_penalty_s.) Off: packing ignores TPOT.
        Kept off by the tuning rule (bench/results/2026-12-02-sim-tune-6.json): the TPOT predicted at the
        decision under-reads what the packed L4s/T4s then decode at (1.2x/2x on conv), so the gate rarely acts.
    slo_sacrifice_weight: sacrifice the least capable node for a lost cause. A request is a lost cause when it is
        predicted to miss the TTFT target on every node of the decision (its TTFT with nothing cached, a cold
        adapter load included, above the target on all of them, the nodes too small to take the prompt
        included). Then every node's cost gains slo_sacrifice_weight * slo_ttft_s * rate / fastest_rate (its
        prefill rate over the fastest of the decision's nodes; computed as (1/fastest_rate) / (1/rate) times
        (weight * slo_ttft_s)), so the lost cause goes to the least capable node rather than to the fastest
        late one (SLO triage's choice), and the fast nodes' queues stay under the target for the requests that
        can still meet it (code 80%, eval: the H100s held a standing queue of lost causes and met the TTFT
        target for 18% of theirs). weight * slo_ttft_s is, roughly, how many seconds more a slow node's
        predicted TTFT may be than the fastest node's before a lost cause goes to the fast one. A prefix holder
        that meets the target thanks to its cache is not charged (the scalar formula with its cached tokens).
        KV room and the other terms are unchanged (a node short of KV room still pays kv_full_penalty_s).
        0: off (the fastest late node, SLO triage's choice). 5 was chosen by the tenth grid on the tuning
        split (bench/results/2026-12-02-sim-tune-10.json: smallest goodput margin +0.043 vs off's +0.038, code80
        P99 5.98 s within its 6.25 s bound; 7 and 10 break that bound, 1 and 3 lower the margin). Default 10 since
        the twenty-seventh grid, over both SLOs and the stress cases at the knobs GRIDs 11-26 set
        (bench/results/2026-12-04-sim-tune-27.json: 5, 10 and 15; 10 admissible with the smallest margin -0.034
        against 5's -0.069, at mooncake 100% at the second SLO; 15 breaks code 80%'s P99 bound at the second SLO).
    slo_sacrifice_max_ttft_s: the most TTFT a sacrificed request may be given (seconds, absolute). With sacrifice
        on and this non-zero, a lost cause's charge on a node whose predicted TTFT there (the one that made it a
        lost cause: nothing cached, a cold adapter load included) is above this bound is the fastest node's,
        weight * slo_ttft_s (factor 1 instead of rate / fastest_rate): only the nodes within the bound are made
        cheaper by their lower capability, so a lost cause goes to the least capable node that still gives it
        its first token within the bound, and where no node is within it, every node pays the same charge and
        the decision is the one sacrifice off makes (SLO triage: the fastest late node). Why: unbounded, weight
        10 sent lost causes to L4s/T4s that then served them very late (code 80%, tuning split: P99 TTFT 5.65
        -> 7.00 s, bench/results/2026-12-02-sim-tune-7.json). 0: no bound (slo_sacrifice_weight alone). Not used
        by the eighth grid (bench/results/2026-12-02-sim-tune-8.json): bounded, the tail is admissible but the
        lost causes land on the A100s and L4s within the bound and goodput falls (code80 0.429 -> 0.376 at best).
    slo_sacrifice_max_rate_ratio: which nodes sacrifice may favour, by capability. With sacrifice on and this
        non-zero, a lost cause's charge on a node whose rate / fastest_rate (the factor above) is above this
        ratio is the fastest node's, weight * slo_ttft_s (factor 1): only the slowest tier is made cheaper, so a
        lost cause goes to it or, where it is beyond slo_sacrifice_max_ttft_s too, every node pays the same
        charge (sacrifice off's choice). Why: unrestricted, a small weight or a bound sent lost causes to the
        A100s (about 0.31 of an H100's prefill rate), the largest pool, whose meetable requests then missed
        (bench/results/2026-12-02-sim-tune-7.json and -8.json); the L4s and TP-2 T4s are about 0.12-0.13 of an
        H100 (121 and 2 x 65 peak TFLOPS against 989 and the A100's 312, prefill being compute-bound), so 0.2
        separates the two tiers with a factor of 1.5 either side. 0: every node keeps its factor. Not used by the
        ninth grid (bench/results/2026-12-02-sim-tune-9.json): unbounded, the best margin yet but code80 P99
        10.4 s (inadmissible); bounded, admissible but below off's margin (the L4s'/T4s' meetable requests miss).
    overload_window_s / overload_late_share / overload_min_placements / overload_hold_s: overload mode
        (router/overload.py): when at least overload_late_share of the placements of
        the last overload_window_s seconds (and at least overload_min_placements of them) were predicted to miss the
        TTFT target on the node they went to, and that has held at every decision for overload_hold_s seconds (a
        burst of arrivals in one instant fills the window but holds for no time), the fleet is in a sustained
        overload and the decision uses SLO triage's penalty overload_triage_penalty_s and sacrifice's weight
        overload_sacrifice_weight (each where larger than its everyday value). Why: a larger charge keeps the fast
        nodes' queues in time for what can still be saved, which pays in a sustained overload and costs P99 in a
        short burst (the thirteenth tuning grid: triage 10 s raised goodput on the tuning split but broke its P99
        bound, and that split holds bursts only). 0: off (every decision as usual). The fourteenth grid (without the
        hold) chose 10 s, share 0.5, triage 10 s under the unchanged rule (scripts/tune_router.py, with the tuning
        split at 100% load as stress cases; bench/results/2026-12-02-sim-tune-14.json), refused: it herded a burst
        (300 requests at one instant on 2 identical idle nodes: 258/42,
        tests/controlplane/router/test_no_herding.py). On at 10 s, share 0.5, hold 10 s, triage 10 s and sacrifice
        weight 10: the fifteenth grid's choice, the rule unchanged (bench/results/2026-12-02-sim-tune-15.json: its
        smallest margin, mooncake at 100% load, -0.049 against off's -0.065; on the tuning split it switched on only
        there).
    overload_triage_penalty_s / overload_sacrifice_weight: the escalated charges of overload mode (0: that
        charge unchanged). Since the twenty-seventh grid the everyday slo_sacrifice_weight is 10 as well, so at the
        defaults overload mode escalates the triage penalty alone.
    slo_sacrifice_long_share / overload_sacrifice_long_share: with sacrifice on and this non-zero, a request is also a
        lost cause when its prefill alone on the fastest node of the decision (its prompt, nothing cached, at that
        node's rate) takes more than this share of its TTFT target, whether or not some node could still meet the
        target: shortest jobs first. Goodput counts requests, so in a sustained overload the fast nodes' seconds are
        worth more spent on several short prompts than on one long one (code 80% with Sarathi-sized step budgets: the
        H100s full of long prompts met the target for 40% of theirs,
        bench/results/2026-12-04-sim-eval-sarathi-budgets.json). A prefix holder that meets the target thanks to its
        cache is not charged, as for any lost cause. 0: off. 0.2 by the twenty-ninth grid
        (bench/results/2026-12-04-sim-tune-29.json: off, 0.05, 0.1 and 0.2 every day; 0.2 admissible with the smallest
        margin -0.029 against off's -0.034, mooncake 100% at the second SLO .414 -> .540; 0.05 and 0.1 lift code 80%
        most, .392 -> .581 and .510, but break 2 and 1 P99 bounds); 0.1 with slo_sacrifice_long_vs_late since the
        thirtieth. overload_sacrifice_long_share: its value in overload mode (the larger of the two applies there); 0
        (the twenty-eighth grid, bench/results/2026-12-04-sim-tune-28.json: 0.2, 0.3 and 0.5 in overload mode alone
        changed no decision on the tuning split).
    slo_sacrifice_long_vs_late: with the long-prompt share on, a prompt is long only when it is also longer than
        the median prompt of the placements predicted late in the last overload_window_s seconds (at least
        overload_min_placements of them; fewer: no prompt is long): the sacrifice is made for shorter late requests,
        not for its peers (router/late_prompts.py says why). With overload mode off (overload_window_s 0) there is
        no window and the gate does not apply: the share alone decides, as with this off; with both long shares 0
        there is nothing to gate, and the policy keeps no window (no median on /metrics). On, at share 0.1, since
        the thirtieth grid (bench/results/2026-12-04-sim-tune-30.json: every setting admissible; the smallest margin
        -0.018 against the ungated share 0.2's -0.029; gated 0.05, -0.014, tied and later in the grid; on the
        tuning split's means mooncake 80% .609 -> .647, code 80% .401 -> .480).
    prefill_chunk_tokens: the nodes' prefill chunk (their engines' max_num_batched_tokens): at most this
        many prompt tokens share one decode step.
    kv_reserve_output_tokens: output tokens, beyond the prompt, a node must have KV room for.
    kv_reserve_running_tokens: KV tokens set aside per request already on a node, for its outputs to come.
    kv_full_penalty_s: added to the cost of a node without that KV room (it would queue until decodes free blocks,
        or preempt). 3 s, from the eleventh tuning grid (bench/results/2026-12-02-sim-tune-11.json; it was 30 s:
        on conv 80%'s eval split long prompts then went to H100s predicted late rather than to A100s predicted in
        time whose KV headroom read short, bench/results/2026-12-02-miss-diag-conv80.json). The rule's tie-break
        chose 1 s, refused: it herds a burst (300 requests on 2 identical idle nodes: 163/137, tests/controlplane/
        router/test_no_herding.py), a late node's missing triage charge then outweighing the KV charge.
    hardware_aware_use_prefix: subtract prompt blocks the prefix index says are cached on a node.
    hardware_aware_kv_evictions: the nodes' KV cache events correct the prefix index (an experiment, off): a block
        a node evicted (BlockRemoved) or a cleared cache leaves it; what it routed still enters at routing time,
        so a prompt's followers find the node its first went to before its prefill is done (Dynamo's KV-events
        mode waits for the blocks: bench/results/2026-12-06-sim-dynamo-kv-events.json). The control plane asks
        for the events in each node's Welcome (sent again to every node when a router reload turns it on or off).
        Measured on mooncake's tuning split: no gain (bench/results/2026-12-06-sim-hardware-aware-kv-evictions.json).
    hardware_aware_prefix_snapshot: at a node's Welcome the control plane asks it for its cached blocks once (a
        KvEvents snapshot, no events after it), which enter the prefix index: a restarted control plane, or one a
        node joins again, knows what the nodes' caches hold instead of starting blind (with the evictions
        experiment on, the events' own snapshot does it). Each node's snapshot is bounded by the index's
        prefix_max_blocks_per_node. Its cost: ~0.5 µs of the control plane's CPU a block, 10 ms for a node of
        20,000 cached blocks, once at its join (bench/results/2026-12-06-prefix-snapshot-cost.json). No effect in
        ``zoo sim``, whose nodes start empty.
    lora_load_estimate_s: a LoRA request's cold-load time (disk or host RAM -> a device slot) on a node that
        does not hold its adapter and has not measured a load yet (its reports carry the measured mean then):
        ``zoo bench lora`` measured 23 ms (disk) + 9 ms (slot) for a rank-16 SmolLM2 adapter on CPU; an 8B
        model's rank-16 adapter (84 MB) is ~30 ms from NVMe plus a few ms over PCIe.

    prefix_aware:
    prefix_load_penalty_blocks: score = matched prefix blocks - this * requests outstanding on the node.
    prefix_balance_abs_threshold / prefix_balance_rel_threshold: the best-scoring node is overloaded, and the
        least loaded node wins instead, when its load exceeds the least load by more than ``abs`` requests
        AND is more than ``rel`` times it (both, like SGLang's cache-aware router).
    prefix_max_blocks_per_node: LRU bound of the prefix index per node (block hashes remembered).
    prefix_max_candidates: prefix-holding nodes examined per decision (bounds the decision time).
    """

    policy: str = "hardware_aware"
    seed: int = 0
    cells_by_traffic_class: dict[str, str] = field(default_factory=dict)
    cells: CellsConfig = field(default_factory=CellsConfig)
    # hardware_aware
    default_model_params_b: float = 1.0
    model_params_b: dict[str, float] = field(default_factory=dict)
    bytes_per_param: float = 2.0
    prefill_mfu: float = 0.5
    decode_bandwidth_efficiency: float = 0.75
    tpot_weight: float = 0.1
    tpot_horizon_tokens: int = 256
    slo_ttft_s: float = 1.0
    slo_tpot_s: float = 0.1
    slo_ttft_miss_penalty_s: float = 10.0
    slo_tpot_miss_penalty_s: float = 1.0
    tpot_measured_steps: bool = True
    slo_ttft_late_weight: float = 1.0
    slo_tpot_floor_miss: bool = False
    slo_tpot_lost_to_doomed: bool = False
    slo_tpot_lost_ttft_factor: float = 0.0
    slo_triage_penalty_s: float = 5.0
    slo_tpot_harm_penalty_s: float = 10.0
    slo_tpot_harm_triage: bool = False
    slo_tpot_harm_decoders: bool = False
    slo_tpot_harm_count: bool = True
    slo_tpot_harm_count_cap_s: float = 0.0
    slo_tpot_harm_reported: bool = True
    slo_triage_spare_capable_below: float = 0.5
    tpot_excess_only: bool = True
    slo_pack_weight: float = 0.0
    slo_pack_needs_tpot: bool = False
    slo_sacrifice_weight: float = 10.0
    slo_sacrifice_max_ttft_s: float = 0.0
    slo_sacrifice_max_rate_ratio: float = 0.0
    overload_window_s: float = 10.0
    overload_late_share: float = 0.5
    overload_min_placements: int = 20
    overload_hold_s: float = 10.0
    overload_triage_penalty_s: float = 10.0
    overload_sacrifice_weight: float = 10.0
    slo_sacrifice_long_share: float = 0.1
    overload_sacrifice_long_share: float = 0.0
    slo_sacrifice_long_vs_late: bool = True
    prefill_chunk_tokens: int = 2048
    kv_reserve_output_tokens: int = 1024
    kv_reserve_running_tokens: int = 128
    kv_full_penalty_s: float = 3.0
    hardware_aware_use_prefix: bool = True
    hardware_aware_kv_evictions: bool = False
    hardware_aware_prefix_snapshot: bool = True
    lora_load_estimate_s: float = 0.05
    # prefix_aware
    prefix_load_penalty_blocks: float = 1.0
    prefix_balance_abs_threshold: int = 8
    prefix_balance_rel_threshold: float = 1.5
    prefix_max_blocks_per_node: int = 65536
    prefix_max_candidates: int = 8

    def __post_init__(self) -> None:
        if not self.policy:
            raise ValueError("policy must be a policy name")
        for name in ("default_model_params_b", "bytes_per_param"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        for model, params_b in self.model_params_b.items():
            if params_b <= 0:
                raise ValueError(f"model_params_b[{model!r}] must be > 0, got {params_b}")
        for name in ("prefill_mfu", "decode_bandwidth_efficiency"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")
        for name in (
            "tpot_weight",
            "slo_ttft_miss_penalty_s",
            "slo_tpot_miss_penalty_s",
            "slo_triage_penalty_s",
            "slo_tpot_harm_penalty_s",
            "slo_tpot_harm_count_cap_s",
            "slo_ttft_late_weight",
            "slo_pack_weight",
            "slo_sacrifice_weight",
            "slo_sacrifice_max_ttft_s",
            "slo_sacrifice_max_rate_ratio",
            "slo_tpot_lost_ttft_factor",
            "overload_window_s",
            "overload_hold_s",
            "overload_triage_penalty_s",
            "overload_sacrifice_weight",
            "slo_sacrifice_long_share",
            "overload_sacrifice_long_share",
            "kv_full_penalty_s",
            "prefix_load_penalty_blocks",
            "lora_load_estimate_s",
        ):
            if not 0 <= getattr(self, name) < math.inf:  # NaN and inf refused too: a cost term must be a number
                raise ValueError(f"{name} must be a finite number >= 0, got {getattr(self, name)}")
        for name in (
            "tpot_horizon_tokens",
            "kv_reserve_output_tokens",
            "kv_reserve_running_tokens",
            "prefix_balance_abs_threshold",
        ):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("slo_ttft_s", "slo_tpot_s", "prefill_chunk_tokens"):
            if not getattr(self, name) > 0:  # NaN refused too
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if not 0 <= self.slo_triage_spare_capable_below <= 1:  # NaN refused too
            raise ValueError(
                f"slo_triage_spare_capable_below must be in [0, 1], got {self.slo_triage_spare_capable_below}"
            )
        if not 0 < self.overload_late_share <= 1:  # NaN refused too
            raise ValueError(f"overload_late_share must be in (0, 1], got {self.overload_late_share}")
        if self.overload_min_placements < 1:
            raise ValueError(f"overload_min_placements must be >= 1, got {self.overload_min_placements}")
        if self.prefix_balance_rel_threshold < 1:
            raise ValueError(f"prefix_balance_rel_threshold must be >= 1, got {self.prefix_balance_rel_threshold}")
        for name in ("prefix_max_blocks_per_node", "prefix_max_candidates"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def in_overload(self) -> RouterConfig:
        """This configuration as overload mode decides: SLO triage's penalty, sacrifice's weight and its long
        prompt share raised to their overload values where those are larger."""
        return replace(
            self,
            slo_triage_penalty_s=max(self.slo_triage_penalty_s, self.overload_triage_penalty_s),
            slo_sacrifice_weight=max(self.slo_sacrifice_weight, self.overload_sacrifice_weight),
            slo_sacrifice_long_share=max(self.slo_sacrifice_long_share, self.overload_sacrifice_long_share),
        )

    def params_b_for(self, model: str) -> float:
        return self.model_params_b.get(model, self.default_model_params_b)

    def cell_for(self, traffic_class: str) -> str | None:
        """The cell that serves ``traffic_class``, or None for any cell."""
        return self.cells.home_cell(traffic_class) or self.cells_by_traffic_class.get(traffic_class)
