"""The `zoo` command line: one subcommand per user-facing job."""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from engine.sampling_params import SamplingParams, SamplingParamsError
from zoo.engine_args import add_engine_args, engine_config_from_args
from zoo.structured_output_args import add_structured_output_args, structured_output_from_args
from zoo.tracing_args import add_tracing_args, span_export_from_args


def _sampling_from_args(args: argparse.Namespace) -> SamplingParams:
    return SamplingParams(
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        seed=args.seed,
        max_tokens=args.max_tokens,
        stop=tuple(args.stop or ()),
        presence_penalty=args.presence_penalty,
        frequency_penalty=args.frequency_penalty,
        repetition_penalty=args.repetition_penalty,
        logit_bias=tuple(_logit_bias_arg(pair) for pair in args.logit_bias or ()),
        min_p=args.min_p,
        min_tokens=args.min_tokens,
        allowed_token_ids=tuple(args.allowed_token_id or ()),
        bad_words=tuple(args.bad_word or ()),
        thinking_token_budget=getattr(args, "thinking_token_budget", None),
        structured_outputs=structured_output_from_args(args),
        prompt_logprobs=args.prompt_logprobs,
        truncate_prompt_tokens=args.truncate_prompt_tokens,
        include_stop_str_in_output=args.include_stop_str,
        prediction=_prediction_arg(getattr(args, "prediction", None)),
    )


def _prediction_arg(value: str | None) -> str | None:
    """``--prediction TEXT`` or ``@FILE`` (the file's text); a file that cannot be read: SystemExit naming it."""
    if value is None or not value.startswith("@"):
        return value
    try:
        with open(value[1:], encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise SystemExit(f"zoo generate: --prediction {value}: {e}") from None


def _logit_bias_arg(text: str) -> tuple[int, float]:
    """``--logit-bias ID=BIAS``; SamplingParamsError naming the field when it is not that."""
    token_id, _, bias = text.partition("=")
    try:
        return int(token_id), float(bias)
    except ValueError:
        raise SamplingParamsError("logit_bias", f"--logit-bias takes TOKEN_ID=BIAS, got {text!r}") from None


def _print_prompt_logprobs(tokenizer, scores) -> None:
    """``--prompt-logprobs``: one line per prompt token on stderr (position, token, logprob, rank, alternatives)."""
    for position, entry in enumerate(scores):
        token = tokenizer.decode([entry.token_id], skip_special_tokens=False)
        if entry.logprob is None:
            print(f"[prompt {position:4d}] {token!r:>16}        -", file=sys.stderr)
            continue
        top = " ".join(f"{tokenizer.decode([t], skip_special_tokens=False)!r}:{lp:.2f}" for t, lp in entry.top)
        print(f"[prompt {position:4d}] {token!r:>16} {entry.logprob:8.3f} rank {entry.rank} {top}", file=sys.stderr)


def cmd_generate(args: argparse.Namespace) -> int:
    from backends.builder import build_engine
    from backends.checkpoint.chat_template import read_chat_template

    params = _sampling_from_args(args)
    template = read_chat_template(args.chat_template) if args.chat_template is not None else None
    engine = build_engine(engine_config_from_args(args), progress=not args.quiet)
    if template is not None:  # vLLM's --chat-template: the model's own is replaced
        if not hasattr(engine.tokenizer, "with_chat_template"):
            raise ValueError("--chat-template: this model's tokenizer has no chat template to replace")
        engine.tokenizer = engine.tokenizer.with_chat_template(template)
    prompt = engine.encode_chat([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
    if params.truncate_prompt_tokens is not None:  # vLLM's left truncation, as the control plane's intake does it
        ids = engine.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
        prompt = ids[-params.truncate_prompt_tokens :]
    engine.add_request(prompt, params, lora_name=getattr(args, "lora", None))
    final, scores = None, None
    while engine.has_unfinished_requests():
        for out in engine.step():
            sys.stdout.write(out.new_text)
            sys.stdout.flush()
            if out.prompt_logprobs is not None:
                scores = out.prompt_logprobs
            if out.finished:
                final = out
    sys.stdout.write("\n")
    if scores is not None:
        _print_prompt_logprobs(engine.tokenizer, scores)
    if final is not None and not args.quiet:
        m = final.metrics
        tpot = f"{m.tpot_s * 1e3:.1f} ms" if m.tpot_s is not None else "n/a"
        print(
            f"[{final.num_prompt_tokens} prompt + {final.num_output_tokens} output tokens, "
            f"finish={final.finish_reason.value if final.finish_reason else None}, "
            f"TTFT {m.ttft_s * 1e3:.0f} ms, TPOT {tpot}]",
            file=sys.stderr,
        )
        spec = engine.make_spec_stats()
        if spec is not None:
            print(
                f"[speculative {args.speculative}: {spec.num_accepted_tokens_total}/{spec.num_draft_tokens_total} "
                f"drafts accepted ({spec.acceptance_rate:.0%}), {spec.mean_accepted_tokens:.2f} tokens per step]",
                file=sys.stderr,
            )
            if spec.num_prediction_draft_tokens_total:
                print(
                    f"[prediction: {spec.num_prediction_accepted_tokens_total}/"
                    f"{spec.num_prediction_draft_tokens_total} of its drafts accepted, "
                    f"{final.num_prediction_rejected_tokens} of its tokens rejected]",
                    file=sys.stderr,
                )
    return 0


def cmd_embed(args: argparse.Namespace) -> int:
    """Each input's embedding (engine/embeddings.py), one JSON array per line on stdout, in order; on stderr the size
    and, for several inputs, each one's cosine similarity to the first."""
    from backends.builder import build_engine

    params = SamplingParams(
        max_tokens=1, temperature=0.0, embed=True, truncate_prompt_tokens=args.truncate_prompt_tokens
    )
    engine = build_engine(engine_config_from_args(args), progress=not args.quiet)
    ids = [engine.add_request(text, params) for text in args.inputs]
    vectors: dict[str, list[float]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.embedding is not None:
                vectors[out.req_id] = out.embedding
    for req_id in ids:
        print(json.dumps(vectors[req_id]))
    if not args.quiet:
        first = vectors[ids[0]]
        cosines = [sum(a * b for a, b in zip(first, vectors[i])) for i in ids[1:]]
        print(f"[{len(ids)} inputs, {len(first)} dimensions]", file=sys.stderr)
        for text, cosine in zip(args.inputs[1:], cosines):
            print(f"[cosine to the first {cosine:.4f}] {text!r}", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from zoo.demo import run_demo

    return run_demo(args)


# zoo bench TARGET: the module and function that run it (imported only when chosen)
BENCH_TARGETS = {
    "engine": ("bench.engine", "run_engine_bench"),
    "observe": ("bench.observe", "run_observe_bench"),
    "controlplane": ("bench.controlplane", "run_controlplane_bench"),
    "fuzz": ("bench.fuzz", "run_fuzz_bench"),
    "tp": ("bench.tp", "run_tp_bench"),
    "cells": ("bench.cells", "run_cells_bench"),
    "kv": ("bench.kv", "run_kv_bench"),
    "gpu": ("bench.gpu_check", "run_gpu_check"),
    "paged-attention": ("bench.paged_attention_ab", "run_ab"),
    "step": ("bench.decode_step", "run_decode_step_bench"),
    "spec": ("bench.spec", "run_spec_bench"),
    "lora": ("bench.lora", "run_lora_bench"),
    "sim-speed": ("bench.sim_speed", "run_sim_speed_bench"),
    "fastpath": ("bench.fastpath", "run_fastpath_bench"),
    "huge-pages": ("bench.huge_pages", "run_huge_pages_bench"),
    "router-reload": ("bench.router_reload", "run_router_reload_bench"),
    "logits": ("bench.logits_processing", "run_logits_bench"),
    "structured": ("bench.structured_outputs", "run_structured_bench"),
    "prompt-logprobs": ("bench.prompt_logprobs", "run_prompt_logprobs_bench"),
    "embeddings": ("bench.embeddings", "run_embeddings_bench"),
    "gc-pauses": ("bench.gc_pauses", "run_gc_pauses_bench"),
    "autoscale": ("bench.sim_autoscale", "run_autoscale_bench"),
}


def cmd_bench(args: argparse.Namespace) -> int:
    module, function = BENCH_TARGETS[args.target]
    report = getattr(importlib.import_module(module), function)(args)
    if args.json:
        print(json.dumps(report, indent=2))
    return 0


def cmd_controlplane(args: argparse.Namespace) -> int:
    from zoo.serve import run_controlplane

    return run_controlplane(args)


def cmd_agent(args: argparse.Namespace) -> int:
    from zoo.agent_cmd import run_agent

    return run_agent(args)


def cmd_router_knobs(args: argparse.Namespace) -> int:
    """Every RouterConfig field an operator may set, with its type, default and description (router_config.py)."""
    from controlplane.router.router_knobs import SET_BY_CONTROLPLANE_FLAGS, knob_table
    from sim.router_knobs import SET_BY_OTHER_FLAGS

    table = knob_table()
    if args.json:
        print(json.dumps(table, indent=1))
        return 0
    print(
        "RouterConfig fields for zoo controlplane --router-knobs JSON and zoo.toml's [controlplane.router] "
        f"({', '.join(sorted(SET_BY_CONTROLPLANE_FLAGS))}: their own flags),\nand zoo sim --router-knobs "
        f"({', '.join(sorted(SET_BY_OTHER_FLAGS - SET_BY_CONTROLPLANE_FLAGS))} too: its own flags there); "
        "--json: each description whole"
    )
    print(f"{'name':34s} {'type':16s} {'default':>8s}  description")
    for row in table:
        default = json.dumps(row["default"])
        doc = row["doc"] if len(row["doc"]) <= 90 else row["doc"][:89] + "…"
        print(f"{row['name']:34s} {row['type']:16s} {default:>8s}  {doc}")
    return 0


def cmd_drain(args: argparse.Namespace) -> int:
    """`zoo drain NODE [NODE ...]`: no new requests go to the nodes; their requests finish there (or resume elsewhere
    if they leave); the nodes keep running. `zoo drain --resume NODE ...`: drained nodes are routed to again. Each
    node is asked in turn; one refused (unknown, or leaving) is said and the others are still asked (exit 1)."""
    from client import ZooClient, ZooError
    from zoo.keys import client_curve_from_args

    failed = 0
    try:
        with ZooClient(args.control, timeout_s=args.timeout_s, curve=client_curve_from_args(args)) as zoo:
            for node_id in args.node_id:
                try:
                    num_inflight = zoo.drain(node_id, resume=args.resume)
                except ZooError as e:
                    print(f"zoo drain: {node_id}: {e.message}", file=sys.stderr)
                    failed += 1
                    continue
                if args.resume:
                    print(f"node {node_id} takes new requests again ({num_inflight} in flight there)")
                else:
                    print(f"node {node_id} is draining: {num_inflight} requests in flight there finish, nothing new "
                          "is routed")  # fmt: skip
    except ZooError as e:  # the client itself (keys refused)
        print(f"zoo drain: {e.message}", file=sys.stderr)
        return 1
    return 1 if failed else 0


def cmd_up(args: argparse.Namespace) -> int:
    import time
    from pathlib import Path

    from zoo.up import run_up
    from zoo.up_config import load_up_config

    config = load_up_config(Path(args.config) if args.config else None)
    log_dir = Path(args.log_dir) if args.log_dir else Path(".cache") / "zoo-up" / time.strftime("%Y%m%d-%H%M%S")
    return run_up(config, log_dir)


def cmd_sim(args: argparse.Namespace) -> int:
    """`zoo sim`, its runs' spans sent where --otlp-traces-endpoint (or OpenTelemetry's environment) says."""
    from sim.cli import run_sim

    try:
        spans = span_export_from_args(args)
    except ValueError as e:
        print(f"zoo sim: {e}", file=sys.stderr)
        return 2
    try:
        return run_sim(args, spans=spans)
    finally:
        if spans is not None:
            spans.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="zoo", description="Silicon Zoo: LLM serving on mismatched GPUs")
    sub = parser.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="stream a completion from the model")
    g.add_argument("prompt")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--chat-template", default=None, metavar="FILE|TEMPLATE", help="--chat with this template instead")
    g.add_argument("--max-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.7)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--stop", action="append", help="stop string (repeatable)")
    g.add_argument("--presence-penalty", type=float, default=0.0)
    g.add_argument("--frequency-penalty", type=float, default=0.0)
    g.add_argument("--repetition-penalty", type=float, default=1.0)
    g.add_argument("--logit-bias", action="append", metavar="ID=BIAS", help="add BIAS to token ID's logit (repeatable)")
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("--min-tokens", type=int, default=0, help="EOS and stop strings held back until this many")
    g.add_argument("--allowed-token-id", type=int, action="append", metavar="ID", help="only these ids (repeatable)")
    g.add_argument("--bad-word", action="append", metavar="WORD", help="never write this word (vLLM's; repeatable)")
    g.add_argument("--thinking-token-budget", type=int, default=None, metavar="N",
                   help="think at most N tokens, then </think> is forced (vLLM's; thinking_budget.py)")  # fmt: skip
    g.add_argument(
        "--prediction",
        default=None,
        metavar="TEXT|@FILE",
        help="OpenAI's Predicted Outputs: text the answer mostly repeats (a file being edited), drafted from with "
        "--speculative: fewer steps, the same output",
    )
    g.add_argument("--prompt-logprobs", type=int, default=None, metavar="K", help="print each prompt token's logprob")
    g.add_argument("--truncate-prompt-tokens", type=int, default=None, metavar="K", help="keep the last K tokens")
    g.add_argument("--include-stop-str", action="store_true", help="keep a matched --stop string in the text")
    add_structured_output_args(g)  # --json-schema, --json-object, --regex, --choice, --grammar
    g.add_argument("--quiet", action="store_true", help="no progress bar, no summary line")
    g.add_argument("--lora", default=None, metavar="NAME", help="generate with this adapter of --lora-modules")
    add_engine_args(g)
    from zoo.spec_args import add_spec_args

    add_spec_args(g)
    g.set_defaults(func=cmd_generate)

    e = sub.add_parser("embed", help="print each input's embedding (the last token's final hidden state, normalised)")
    e.add_argument("inputs", nargs="+", metavar="TEXT")
    e.add_argument("--truncate-prompt-tokens", type=int, default=None, metavar="K", help="keep each input's last K")
    e.add_argument("--quiet", action="store_true", help="no progress bar, no summary on stderr")
    add_engine_args(e)
    e.set_defaults(func=cmd_embed)

    d = sub.add_parser("demo", help="a local zoo: a chat answer over the OpenAI API, a short load, a latency table")
    d.add_argument("--config", default=None, help="zoo.toml for the local zoo (default: a torch and a JAX agent)")
    d.set_defaults(func=cmd_demo)

    from zoo.agent_cmd import add_agent_args
    from zoo.serve import add_controlplane_args

    c = sub.add_parser("controlplane", help="run the control plane (router, registry, OpenAI gateway)")
    add_controlplane_args(c)
    c.set_defaults(func=cmd_controlplane)

    rk = sub.add_parser("router-knobs", help="the router's knobs (--router-knobs): type, default, description")
    rk.add_argument("--json", action="store_true", help="one JSON list, each description whole")
    rk.set_defaults(func=cmd_router_knobs)

    a = sub.add_parser("agent", help="run a node agent that serves a model and joins a control plane")
    add_agent_args(a)
    a.set_defaults(func=cmd_agent)

    u = sub.add_parser("up", help="a local zoo: the control plane and its agents as child processes")
    u.add_argument("--config", default=None, help="zoo.toml ([controlplane], [[agents]]); default: two torch agents")
    u.add_argument("--log-dir", default=None, help="where the children's logs go (default .cache/zoo-up/<time>)")
    u.set_defaults(func=cmd_up)

    from zoo.batch_cmd import add_batch_args, run_batch

    bt = sub.add_parser("batch", help="run a JSONL file of requests as an OpenAI batch on a running control plane")
    add_batch_args(bt)
    bt.set_defaults(func=run_batch)

    from zoo.profile_cmd import add_profile_args, run_profile

    pf = sub.add_parser("profile", help="start or stop the nodes' profilers (a control plane with --profiler-config)")
    add_profile_args(pf)
    pf.set_defaults(func=run_profile)

    from zoo.sleep_cmd import add_sleep_args, add_wake_args, run_sleep, run_wake

    sl = sub.add_parser(
        "sleep", help="put nodes to sleep, or say who sleeps (a control plane with --enable-sleep-mode)"
    )
    add_sleep_args(sl)
    sl.set_defaults(func=run_sleep)
    wk = sub.add_parser("wake", help="wake sleeping nodes (a control plane with --enable-sleep-mode)")
    add_wake_args(wk)
    wk.set_defaults(func=run_wake)

    from zoo.draft_server_cmd import add_draft_server_args, run_draft_server

    ds = sub.add_parser("draft-server", help="a draft agent: a draft model that proposes for verifiers elsewhere")
    add_draft_server_args(ds)
    ds.set_defaults(func=run_draft_server)

    from transport.sockets import DEFAULT_CLIENT_ENDPOINT
    from zoo.keys import add_client_auth_args, client_curve_from_args

    dr = sub.add_parser("drain", help="drain a node: nothing new is routed to it, its requests finish there")
    dr.add_argument("node_id", nargs="+", help="the nodes to drain (or resume), each asked in turn")
    dr.add_argument(
        "--resume",
        action="store_true",
        help="undo a drain: the node is routed to again (refused for a node whose agent drains to stop)",
    )
    dr.add_argument("--control", default=DEFAULT_CLIENT_ENDPOINT, help="the control plane's client endpoint")
    dr.add_argument("--timeout-s", type=float, default=10.0, help="how long to wait for the control plane")
    add_client_auth_args(dr)  # --curve-dir, --curve-client: a control plane started with --curve-dir
    dr.set_defaults(func=cmd_drain)

    from zoo.keys import add_keys_args, run_keys

    k = sub.add_parser("keys", help="CURVE key pairs (control plane, agents, clients) and HTTP API keys")
    add_keys_args(k)
    k.set_defaults(func=run_keys)

    from observe.ebpf import add_probe_args, run_probe
    from sim.cli import add_sim_args
    from tui.cli import add_top_args, run_top

    pr = sub.add_parser("probe", help="eBPF (root): hop latency and engine CPU histograms of the local zoo")
    add_probe_args(pr)
    pr.set_defaults(func=run_probe)

    s = sub.add_parser("sim", help="the fleet simulator: simulated GPUs, real traces, routing policies compared")
    add_sim_args(s)
    add_tracing_args(s, "zoo-sim")  # --otlp-traces-endpoint: each simulated request's span (sim/sim_spans.py)
    s.set_defaults(func=cmd_sim)

    t = sub.add_parser("top", help="the live fleet dashboard (Textual), fed by the control plane's stats stream")
    add_top_args(t)
    add_client_auth_args(t)  # --curve-dir, --curve-client: for --client, a control plane started with --curve-dir
    t.set_defaults(func=lambda args: run_top(args, curve=client_curve_from_args(args)))

    from zoo.export_tokenizer import add_export_tokenizer_args, run_export_tokenizer

    et = sub.add_parser("export-tokenizer", help="write the model's tokenizer as a Hugging Face folder (offline use)")
    add_export_tokenizer_args(et)
    et.set_defaults(func=run_export_tokenizer)

    b = sub.add_parser("bench", help="benchmarks, side by side with a baseline in the same run")
    b.add_argument("target", choices=list(BENCH_TARGETS))
    b.add_argument("--json", action="store_true", help="print one JSON object")
    b.add_argument("--quick", action="store_true", help="fewer requests and tokens (smoke run)")
    b.add_argument("--wire", type=int, default=200_000, help="fuzz: wire messages to send (client + agent port)")
    b.add_argument("--http", type=int, default=20_000, help="fuzz: HTTP requests to send to the gateway")
    b.add_argument("--seed", type=int, default=0, help="fuzz: the seed of the cases (the same seed, the same cases)")
    add_engine_args(b)
    b.add_argument("--steps", type=int, default=64, help="gpu: measured decode steps per figure")
    b.add_argument("--bandwidth-gbps", type=float, default=None, help="gpu: memory bandwidth (default: datasheet)")
    add_spec_args(b, with_method=False)  # spec: the draft model's settings
    b.add_argument("--proposers", default="ngram,model", help="spec: comma-separated proposers to measure")
    b.add_argument("--batch-sizes", default="1", help="spec: comma-separated batch sizes (the crossover)")
    b.set_defaults(func=cmd_bench)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except SamplingParamsError as e:
        parser.error(f"invalid sampling parameter {e}")
    except (FileNotFoundError, ValueError) as e:
        print(f"zoo: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (`zoo router-knobs | head`): no traceback, and none at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # as a shell reports SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
