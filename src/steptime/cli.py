"""The steptime command line.

    steptime predict --model llama-3.1-8b --gpu h100-sxm --decode 32x1024 --prefill 1x2048 [--json]
    steptime gpus [--sources] [--json]       steptime models [--json]
    steptime bench [--json]                  steptime status [--json]
    steptime data verify [--json]            steptime evaluate --family gemm [--json]
    steptime constants [--json]              steptime engines [--json]
    steptime audit [ID | ID:n] [--json] [--strict]   steptime readme [--write]
    steptime serve --model llama-3.1-8b --gpu h100-sxm --rate 8 --n 1000 [--json] [--csv F] [--fig F.png]
    steptime plan --model llama-3.1-8b --rate 8 --slo-ttft-ms 1000 --slo-tpot-ms 50 --gpus h100-sxm,l40s [--json]

Bad input prints one line on stderr and exits 2; no tracebacks.
"""

from __future__ import annotations

# Imports of steptime modules stay inside each command: a command loads only what it runs (fast --help and
# predict), and the lab front imports the lab only when a lab command runs (tests/test_wall.py).

import argparse
import json
import sys
from types import MappingProxyType

from steptime.errors import InputError, SteptimeError


def _n(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def _print_json(obj) -> None:
    from steptime.io import dumps

    sys.stdout.write(dumps(obj))


DEFAULT_DECODE = "1x1024"


def cmd_predict(a) -> int:
    from steptime.step import TERMS, Batch, predict_step

    defaulted = not a.decode and not a.prefill
    # With no batch given, the CLI prices one step of DEFAULT_DECODE and says so on stderr; the API stays strict.
    batch = Batch.parse(decode=[DEFAULT_DECODE] if defaulted else a.decode or [], prefill=a.prefill or [])
    from steptime.moe_step import engine_with_kernels

    engine = engine_with_kernels(a.engine, a.moe_kernels, a.model, flag="--moe-kernels")
    r = predict_step(a.model, a.gpu, batch, tp=a.tp, f_clk=a.f_clk, kv_dtype=a.kv_dtype,
                     check_memory=not a.no_memory_check, allow_boost=a.allow_boost, engine=engine, dtype=a.dtype,
                     ep=a.ep)
    if defaulted:
        print(f"note: no batch given: priced one decode step of --decode {DEFAULT_DECODE} (one request over 1,024 "
              "cached tokens); give --decode COUNTxKV and/or --prefill COUNTxTOKENS for your batch", file=sys.stderr)
    origin = _dtype_origin(a)
    if a.explain:
        return _explain(a, r, batch, origin)
    if a.json:
        _print_json(r.to_dict() | ({"dtype_from": origin} if origin else {}))
        return 0
    _predict_header(r, origin)
    print(f"{'term':<20}{'ms':>10}{'share':>8}  bound")
    if r.moe:
        from steptime.moe_step import TERMS
    for t in TERMS:
        v = r.terms_ms[t]
        if v == 0.0:
            continue
        print(f"{t:<20}{v:>10.4f}{v / r.total_ms:>8.1%}  {r.bound[t]}")
    print(f"{'total':<20}{r.total_ms:>10.4f}{1:>8.1%}")
    hidden = {k: v for k, v in r.hidden_ms.items() if v > 0}
    if hidden:
        print("hidden under overlap (not in total): " + ", ".join(f"{k} {v:.4f} ms" for k, v in hidden.items()))
    _uncalibrated_note(r)
    return 0


def _dtype_origin(a) -> str | None:
    """Where the weight dtype came from when the model is a config.json (its quantization_config, or none), None
    for a spec-table model (the header's dtype is --dtype or the bf16 default, as before)."""
    from steptime.specs import get_model
    from steptime.step import dtype_origin

    m = get_model(a.model)
    return dtype_origin(m, a.dtype) if getattr(m, "checkpoint_dtype", None) is not None else None


def _predict_header(r, origin: str | None = None) -> None:
    layout = f"tp={r.tp}, ep={r.ep}" if r.moe else f"tp={r.tp}"
    dt = r.dtype if origin is None else f"{r.dtype} weights from {origin}"
    from steptime.moe_step import moe_law_text

    law = f"; routed experts priced with {moe_law_text(r.moe_kernels, [(r.gpu, r.dtype, r.ep)])}" if r.moe else ""
    print(f"{r.model} on {r.gpu} ({layout}, engine {r.engine}, {dt}): {_n(r.requests, 'request')}, "
          f"{_n(r.tokens, 'new token')}{law}")


def _uncalibrated_note(r) -> None:
    if not r.calibrated:
        from steptime.calibration import Constants

        print(f"note: {Constants.default().calibration_note(r.gpu)}")


def _explain(a, r, batch, origin: str | None = None) -> int:
    """The grey box's reading of the step: each term's physics value, its shipped correction, the corrected value."""
    from steptime.greybox import explain

    e = explain(r, a.model, r.gpu, batch, tp=r.tp)  # the model as given: r.model is a config.json's stem, no name
    if a.json:
        _print_json({"prediction": r.to_dict() | ({"dtype_from": origin} if origin else {}), "greybox": e})
        return 0
    _predict_header(r, origin)  # wave 37: the explain header dropped an MoE model's ep, and its uncalibrated note
    print(f"{e['label']}")
    print(f"{'term':<20}{'physics ms':>12}{'factor':>9}{'grey-box ms':>13}  correction from")
    for t, row in e["terms"].items():
        if row["physics_ms"] == 0.0:
            continue
        src = ", ".join(row["models"]) if row["models"] else "none (physics only)"
        print(f"{t:<20}{row['physics_ms']:>12.4f}{row['factor']:>9.3f}{row['corrected_ms']:>13.4f}  {src}")
    print(f"{'total':<20}{e['physics_total_ms']:>12.4f}{e['total_ms'] / e['physics_total_ms']:>9.3f}"
          f"{e['total_ms']:>13.4f}")
    for name, f in sorted(e["fitted_on"].items()):
        gpus, cells = (f or {}).get("gpus", []), (f or {}).get("cells", 0)
        cv = ", ".join(f"{k} {v:.1%}" for k, v in (e["loo_cv_mape"].get(name) or {}).items())
        on = f"{len(gpus)} GPUs' tables ({', '.join(gpus)}; {cells} cells)"
        if e["settings"][name] == "none":
            print(f"  {name}: no correction: leave-one-GPU-out CV over {on} kept the physics (MAPE {cv})")
            continue
        where = "in-sample (its table was fitted)" if r.gpu in gpus else "held out (not in the fit)"
        print(f"  {name}: fitted on {on}, each GPU weighing the same; leave-one-GPU-out MAPE {cv}; "
              f"for {r.gpu}: {where}")
    kept = [w for w, on in (("a mixture-of-experts model", r.moe), (f"{r.dtype} weights", r.dtype != "bf16"),
                            (f"{r.kv_dtype} KV cache", r.kv_dtype != "bf16")) if on]
    if kept:  # greybox.explain applies no correction there: say why every row reads 'none (physics only)'
        print(f"  not corrected here ({', '.join(kept)}): the corrections were fitted on dense bf16 tables only")
    print("plain `steptime predict` is the physics alone; the corrections are the lab's grey box (E2.1), shipped as data")
    _uncalibrated_note(r)
    return 0


def cmd_gpus(a) -> int:
    from dataclasses import asdict

    from steptime.calibration import Constants
    from steptime.specs import CONFIDENCE, gpu_sources, gpu_table

    table = gpu_table()
    consts = Constants.default()
    if a.json:
        out = {}
        for k, g in table.items():
            row = {f: v for f, v in asdict(g).items() if f not in ("figures", "rechecked")}
            row.update(vendor=g.vendor, uncalibrated=not consts.calibrated(k))
            if a.sources:
                row["sources"] = {f: {"source": x.source, "confidence": x.confidence} for f, x in g.figures.items()}
                row["rechecked"] = {day: list(figs) for day, figs in g.rechecked}
            out[k] = row
        _print_json(out)
        return 0
    print(f"{'key':<18}{'arch':<10}{'bf16 TF':>9}{'fp8 TF':>9}{'BW GB/s':>9}{'mem GB':>8}{'SMs':>5}{'L2 MB':>7}{'W':>6}"
          f"{'node':>5}  readings")
    for k, g in table.items():
        fp8 = f"{g.fp8_dense_tflops:g}" if g.fp8_dense_tflops else "-"
        cal = "calibrated" if consts.calibrated(k) else "uncalibrated"
        print(f"{k:<18}{g.architecture:<10}{g.bf16_dense_tflops:>9g}{fp8:>9}{g.mem_bw_gbps:>9g}{g.mem_gb:>8g}"
              f"{g.sms:>5}{g.l2_mb:>7g}{g.power_w:>6g}{g.gpus_per_node:>5}  {cal}")
    print("uncalibrated: no deploy readings; predicted from the datasheet and the architecture family's constants "
          "(AMD CDNA always); SMs are CUs on AMD")
    if a.sources:
        print()
        print("how each figure was checked: high = a vendor document read in a session states it; medium = a "
              "secondary source read in a session; datasheet = a cited vendor document not re-read; low = no "
              "document read states it (DERIVED or ASSUMED)")
        for k, g in table.items():
            by = {c: [f for f, x in g.figures.items() if x.confidence == c and x.value is not None] for c in CONFIDENCE}
            counts = ", ".join(f"{len(by[c])} {c}" for c in CONFIDENCE if by[c])
            low = f"; low: {', '.join(by['low'])}" if by["low"] else ""
            re_read = "".join(f"; re-read {day}: {', '.join(figs)}" for day, figs in g.rechecked)
            print(f"{k}: {counts}{low}{re_read}")
        for s, text in gpu_sources().items():
            print(f"  [{s}] {text}")
    return 0


def cmd_models(a) -> int:
    from dataclasses import asdict

    from steptime.specs import model_table
    from steptime.specs.moe import moe_model_table, unsupported_model_table

    table = model_table()
    moe = moe_model_table()
    if a.json:
        out = {k: {**asdict(m), "params": m.n_params()} for k, m in table.items()}
        out.update({k: {**asdict(m), "params": m.n_params(), "active_params": m.n_active_params(), "moe": True}
                    for k, m in moe.items()})
        _print_json(out)
        return 0
    kw = max(map(len, (*table, *moe, "key"))) + 2  # the longest key (qwen3-coder-480b-a35b) ran into the next column
    print(f"{'key':<{kw}}{'hidden':>7}{'layers':>7}{'heads':>6}{'kv':>4}{'hd':>5}{'inter':>7}{'vocab':>8}{'params B':>9}")
    for k, m in table.items():
        print(f"{k:<{kw}}{m.hidden_size:>7}{m.num_hidden_layers:>7}{m.num_attention_heads:>6}"
              f"{m.num_key_value_heads:>4}{m.head_dim:>5}{m.intermediate_size:>7}{m.vocab_size:>8}"
              f"{m.n_params() / 1e9:>9.2f}")
    print()
    print("mixture of experts (active / total parameters per token):")
    print(f"{'key':<{kw}}{'hidden':>7}{'layers':>7}{'attn':>5}{'experts':>8}{'top-k':>6}{'shared':>7}{'e.inter':>8}"
          f"{'dense':>6}{'active B':>9}{'total B':>9}")
    for k, m in moe.items():
        print(f"{k:<{kw}}{m.hidden_size:>7}{m.num_hidden_layers:>7}{m.attention:>5}{m.num_experts:>8}"
              f"{m.num_experts_per_tok:>6}{m.n_shared_experts:>7}{m.moe_intermediate_size:>8}"
              f"{m.n_dense_layers:>6}{m.n_active_params() / 1e9:>9.2f}{m.n_params() / 1e9:>9.2f}")
    refused = unsupported_model_table()  # wave 41: refused by name, with the reason (docs11: listed here too)
    if refused:
        print()
        print("known, not represented (refused by name with the reason: `steptime predict --model KEY`; "
              "specs/moe_models.yaml unsupported):")
        for k, e in refused.items():
            print(f"{k:<{kw}}{e['source']} ({e['architecture']})")
    return 0


def cmd_constants(a) -> int:
    from steptime.calibration import Constants

    from steptime.specs.engines import engine_rows

    rows = Constants.default().table() + engine_rows()
    if a.json:
        _print_json(rows)
        return 0
    # columns as wide as their longest entry: a long scope or name (engine.vllm-v1-unfused, an engine's
    # per-GPU constant) used to run into the next column
    ws = max(len(r["scope"]) for r in rows) + 2
    wn = max(len(r["name"]) for r in rows) + 2
    wp = max(len(r["provenance"]) for r in rows) + 2
    for r in rows:
        print(f"{r['scope']:<{ws}}{r['name']:<{wn}}{r['provenance']:<{wp}}{json.dumps(r['value'])[:40]:<42}"
              f"{r['source'][:70]}")
    return 0


def cmd_engines(a) -> int:
    from steptime.specs.engines import engine_summary

    rows = engine_summary()
    if a.json:
        _print_json(rows)
        return 0
    for r in rows:
        print(f"{r['engine'] + (' (default)' if r['default'] else ''):<18}{r['name']}")
        print(f"{'':<18}graphs decode={r['graphs']['decode']} prefill={r['graphs']['prefill']}; all-reduce "
              f"{r['allreduce']}; host {'yes' if r['host_terms'] else 'none'}; {r['assumed']} ASSUMED values; "
              f"runs on {' and '.join(r['vendors']) if r['vendors'] else 'any'} GPUs; KV blocks of "
              f"{_block_sizes_text(r['kv_block_sizes'])} tokens")
    return 0


def _block_sizes_text(sizes) -> str:
    if sizes is None or sizes == "any":
        return "any number of"
    return "a power of two" if sizes == "powers_of_two" else ", ".join(map(str, sizes))


def cmd_bench(a) -> int:
    from steptime.bench import run

    if a.jobs is not None and not a.plan:  # without --plan nothing reads it
        raise InputError(f"--jobs {a.jobs} applies to --plan (the planner search's worker processes)")
    res = run(quick=a.quick, plan=a.plan, jobs=2 if a.jobs is None else a.jobs)
    if a.json:
        _print_json(res)
    else:
        for k, v in res.items():
            print(f"{k}: {v}")
    return 0


def cmd_status(a) -> int:
    from steptime_lab.status import status

    return status(as_json=a.json)


def cmd_audit(a) -> int:
    from steptime_lab.audit import run

    from steptime.errors import InputError

    if a.rerun:  # it prints its own comparison: the report's options would be ignored without a word
        unread = [f for f, on in (("--json", a.json), ("--strict", a.strict), ("--verbose", a.verbose),
                                  ("--mark-current", a.mark_current)) if on]
        if unread:
            raise InputError(f"audit --rerun does not read {', '.join(unread)}: it prints the fresh values' "
                             "comparison with the committed ones")
    elif a.tolerance is not None:
        raise InputError(f"--tolerance {a.tolerance:g} applies to --rerun (the relative tolerance of a rebuild's "
                         "fresh values)")
    if a.rerun:
        from steptime_lab.rerun import rerun

        return rerun(a.select, tolerance=a.tolerance)
    return run(select=a.select, as_json=a.json, strict=a.strict, verbose=a.verbose, mark=a.mark_current)


def cmd_readme(a) -> int:
    from steptime_lab.reporting import readme_cli

    return readme_cli(write=a.write)


def cmd_data(a, rest) -> int:
    from steptime_lab.data import cli_main

    return cli_main(rest)


def cmd_calibration(a) -> int:
    from steptime.calibration import ship

    for f in a.settled:
        if not str(f).strip():  # Path('') is the current folder: refused as '.' before, not as the empty name given
            raise InputError(f"calibration ship: an empty file name {f!r}; give results/calibration/<name>.yaml")
    _print_json(ship(a.settled))
    return 0


def cmd_evaluate(a) -> int:
    from steptime_lab.evaluate import evaluate_cli

    return evaluate_cli(a)


def cmd_serve(a) -> int:
    from steptime.serve.command import cmd_serve as run

    return run(a)


def cmd_plan(a) -> int:
    from steptime.plan_command import cmd_plan as run

    return run(a)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a bad argument in one line (exit 2), like every other error."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="steptime", description="Predict LLM engine step time on a GPU, term by term.")
    sub = p.add_subparsers(dest="cmd", required=True)
    pr = sub.add_parser("predict", help="predict one engine step")
    pr.add_argument("--model", required=True, help="model key, HF id, or path to config.json")
    pr.add_argument("--gpu", required=True, help="GPU key or alias (see `steptime gpus`)")
    pr.add_argument("--decode", action="append", metavar="COUNTxKV",
                    help="decode requests, e.g. 32x1024: COUNT requests each reading KV cached tokens, KV >= 1 (a "
                         "request with nothing cached is a one-token prefill, --prefill 1x1; with neither --decode "
                         f"nor --prefill: one step of --decode {DEFAULT_DECODE}, said on stderr)")
    pr.add_argument("--prefill", action="append", metavar="COUNTxTOKENS[@KV]", help="prefill requests, e.g. 1x2048")
    pr.add_argument("--tp", type=int, default=1, help="tensor-parallel degree, GPUs (default %(default)s)")
    pr.add_argument("--f-clk", type=float, default=None,
                    help="sustained / datasheet boost clock ratio in (0, 1] (default: the model's clock law)")
    pr.add_argument("--allow-boost", action="store_true",
                    help="accept --f-clk above 1 (up to 2): the part runs above its datasheet boost clock "
                         "(overclocked, or a datasheet that understates it), so compute exceeds the datasheet peak")
    pr.add_argument("--kv-dtype", choices=["bf16", "fp8"], default="bf16",
                    help="KV-cache precision (default %(default)s)")
    pr.add_argument("--engine", default=None, help="serving-engine profile (see `steptime engines`; default vllm)")
    pr.add_argument("--dtype", default=None, help="projection GEMM precision: bf16 or fp8 (W8A8: a GPU with fp8 "
                    "tensor cores, a figure in `steptime gpus`' fp8 TF column); for an MoE model the expert weights: bf16; fp8, fp8_block "
                    "(fp8 tensor cores); fp4 = nvfp4 (NVFP4, W4A4: Blackwell); mxfp4 (MXFP4 weights on bf16 math, "
                    "W4A16: any GPU); mxfp4_mxfp8 (MXFP4 weights, MXFP8 activations, W4A8 on fp8 math: Blackwell, "
                    "fitted for TensorRT-LLM's kernels only, which run an mxfp4 checkpoint so on sm 100 / 103). A GPU "
                    "without the format is refused in one line (default: a config.json's quantization_config, else "
                    "bf16; a quantized checkpoint takes only its own)")
    pr.add_argument("--ep", type=int, default=1, help="expert-parallel degree, GPUs (MoE models; ep = tp x "
                    "attention data-parallel ranks; default %(default)s)")
    pr.add_argument("--no-memory-check", action="store_true", help="skip the fits-in-memory check")
    pr.add_argument("--explain", action="store_true",
                    help="the grey box: each term's physics value, its learned correction factor (within [1/2, 2]) "
                         "and the corrected value, with what the corrections were fitted on")
    pr.add_argument("--json", action="store_true", help="print JSON instead of text")
    for name in ("gpus", "models", "constants", "engines"):
        sp = sub.add_parser(name, help=f"list known {name}")
        sp.add_argument("--json", action="store_true", help="print JSON instead of text")
        if name == "gpus":
            sp.add_argument("--sources", action="store_true", help="show each figure's source")
    b = sub.add_parser("bench", help="prediction speed against a plain-Python baseline")
    b.add_argument("--json", action="store_true", help="print JSON instead of text")
    b.add_argument("--quick", action="store_true", help="smaller cell counts")
    b.add_argument("--plan", action="store_true", help="also time two planner searches (dense: 5,000 requests, >= 300 layouts; "
                                                      "mixture-of-experts: gpt-oss-20b, 1,000 requests)")
    b.add_argument("--jobs", type=int, default=None, help="worker processes of the planner search (with --plan; "
                                                          "default 2)")
    s = sub.add_parser("status", help="which experiments are built and which await telemetry")
    s.add_argument("--json", action="store_true", help="print JSON instead of text")
    au = sub.add_parser("audit", help="every claim: its value, whether it holds, whether it is current, and "
                        "its chain back to the raw bytes (exit 1 on a stale result or a failed check)")
    au.add_argument("select", nargs="?", help="an experiment ID (E2.1) or a claim id (E2.1:3)")
    au.add_argument("--json", action="store_true", help="print JSON instead of text")
    au.add_argument("--strict", action="store_true", help="also fail on a missed target")
    au.add_argument("-v", "--verbose", action="store_true", help="the provenance chain of every result")
    au.add_argument("--mark-current", action="store_true", help="on a fresh clone: mark every result that verifies "
                    "(recorded input sha256s, raw bytes, code hash) current for Snakemake (snakemake --touch)")
    au.add_argument("--rerun", action="store_true", help="rebuild the selected result (or claim) in a scratch copy "
                    "with Snakemake and compare the fresh values with the committed ones; with no ID, every built "
                    "experiment's result in turn (CI runs it on the .test/ subset; overnight on the whole repository)")
    au.add_argument("--tolerance", type=float, default=None, help="relative tolerance for --rerun (default: the "
                    "experiment's declared rerun_tolerance, else identical)")
    rd = sub.add_parser("readme", help="check README.md's results block against results/README_numbers.md")
    rd.add_argument("--write", action="store_true", help="rewrite the block from results/README_numbers.md")
    sub.add_parser("data", help="data commands: `steptime data verify [--json]`", add_help=False)
    c = sub.add_parser("calibration", help="`steptime calibration ship results/calibration/{gemm,step,comm}.yaml "
                       "results/calibration/engine_constants.yaml`: write the pipeline's settled constants into the "
                       "shipped defaults.yaml and R2.3's fitted engine constants where `--engine` reads them")
    c.add_argument("action", choices=["ship"], help="ship: copy settled constants into the shipped calibration")
    c.add_argument("settled", nargs="+", help="settled files, applied in order (gemm.yaml, step.yaml, comm.yaml); an engine-constants "
                   "file (R2.3's engine_constants.yaml) among them is shipped to the engine loader, and a grey-box "
                   "corrections file (results/calibration/greybox.npz) to the one `predict --explain` reads. Each "
                   "settled and engine-constants file must end with the seal line its settle step writes ('# sha256 "
                   "of every line above: ...'): a copy cut short or edited is refused before anything is written. "
                   "moe.yaml is not shipped by this command (copy results/calibration/moe.yaml to "
                   "src/steptime/calibration/moe.yaml)")
    e = sub.add_parser("evaluate", help="accuracy per GPU and predictor on raw/ data")
    e.add_argument("--family", required=True, help="operator family of raw/ data to score: gemm, attention_decode, "
                   "attention_prefill, light, host, step or wallclock")
    e.add_argument("--gpu", action="append", help="GPU key to score (repeat for several; default: every GPU the "
                   "family has data for)")
    e.add_argument("--json", action="store_true", help="print JSON instead of text")
    from steptime.serve.command import add_parser as add_serve

    add_serve(sub)
    from steptime.plan_command import add_parser as add_plan

    add_plan(sub)
    for name in ("predict", "serve"):  # one option, the same on the three commands that price a step
        add_moe_kernels(sub.choices[name])
    add_moe_kernels(sub.choices["plan"], engines=f"each --engines profile's own moe.kernels {_SHIPPED_KERNELS}; "
                                                 "given, it replaces them for every engine searched")
    p.commands = sub.choices  # each command's parser: an argument it does not know is refused by it (`main`)
    return p


_SHIPPED_KERNELS = "(vllm for every shipped profile; `steptime constants`)"


def add_moe_kernels(parser, engines: str = f"the --engine profile's moe.kernels {_SHIPPED_KERNELS}") -> None:
    """--moe-kernels ENGINE (wave 41): whose fused-MoE laws price an MoE model's routed experts, the CLI's route to
    Engine.with_moe_kernels; checked when the command runs (moe_step.check_moe_kernels). `engines`: whose
    moe.kernels it replaces (plan's --engines: every profile it searches; docs11)."""
    from steptime.specs.engines import MOE_KERNELS

    parser.add_argument("--moe-kernels", metavar="ENGINE", default=None,
                        help="whose fused-MoE kernel laws price a mixture-of-experts model's routed experts: "
                             f"{' or '.join(MOE_KERNELS)} (calibration/moe.yaml; trtllm: TensorRT-LLM's own, which run "
                             f"an mxfp4 checkpoint as mxfp4_mxfp8 on sm 100 / 103). Default: {engines}. Refused for a dense "
                             "model (it has no routed experts). The output names the law that priced them and says where "
                             "those kernels' tables hold no kernel family for the GPU and dtype (their all-GPU law "
                             "prices it there; so do the default vllm laws on A100 or MI300X)")


# an option a command does not take, but another does, and what to do instead (one line, with the refusal)
_CONFIG_JSON = "a model's config.json is read through --model PATH (e.g. --model ./config.json); there is no --config"
NOT_HERE = MappingProxyType({("plan", "--ep"): "steptime plan searches the expert-parallel degree itself for a "
                                               "mixture-of-experts model (multiples of each --tp); `steptime serve "
                                               "--ep` simulates one",
                             **{(cmd, "--config"): _CONFIG_JSON for cmd in ("predict", "serve", "plan")}})


def refuse_unknown(parser, cmd: str, extra: list) -> None:
    """Refuse arguments `cmd` does not take with its own parser's one line (`steptime plan: error: ... (see
    `steptime plan --help`)`), not the top-level parser's (wave 38: `steptime plan --ep 8` pointed at `steptime
    --help`), with NOT_HERE's advice where it has one."""
    hint = next((NOT_HERE[cmd, x.split("=")[0]] for x in extra if (cmd, x.split("=")[0]) in NOT_HERE), None)
    msg = f"unrecognized arguments: {' '.join(extra)}"
    parser.commands[cmd].error(f"{msg}: {hint}" if hint else msg)


def refuse_empty(parser, a) -> None:
    """Refuse an option given an empty or blank value (`--prices ''`, `--tp=`, `--trace ' '`): several read an empty
    text as "not given" and ran on their defaults without a word (wave 40: plan --prices '' priced with the shipped
    prices, plan --tp '' searched every degree, serve/plan --trace '' simulated a synthetic workload)."""
    for act in parser.commands[a.cmd]._actions:
        if not act.option_strings:
            continue
        v = getattr(a, act.dest, None)
        for x in (v if isinstance(v, (list, tuple)) else [v]):
            if isinstance(x, str) and not x.strip():
                flag = max(act.option_strings, key=len)
                raise InputError(f"{flag} {x!r}: an empty value ("
                                 + ("give one" if act.required else f"leave {flag} out to take its default") + ")")


def not_here(argv: list[str]) -> list[str]:
    """The options of argv (with the value after each) that NOT_HERE says its command does not take: refused before
    the parse, so the advice comes first (wave 39: `steptime predict --config c.json` was refused for lacking --model,
    not told that --model reads a config.json)."""
    out = []
    for i, x in enumerate(argv[1:], 1):
        if (argv[0], x.split("=")[0]) in NOT_HERE:
            out += argv[i:i + 2] if "=" not in x and i + 1 < len(argv) and not argv[i + 1].startswith("--") else [x]
    return out


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        if argv and argv[0] == "data":
            return cmd_data(None, argv[1:])
        early = not_here(argv) if argv else []
        if early:
            refuse_unknown(parser, argv[0], early)
        a, extra = parser.parse_known_args(argv)
        if extra:
            refuse_unknown(parser, a.cmd, extra)
        refuse_empty(parser, a)
        handler = {"predict": cmd_predict, "gpus": cmd_gpus, "models": cmd_models, "bench": cmd_bench,
                   "status": cmd_status, "audit": cmd_audit, "readme": cmd_readme, "evaluate": cmd_evaluate,
                   "constants": cmd_constants, "calibration": cmd_calibration, "engines": cmd_engines,
                   "serve": cmd_serve, "plan": cmd_plan}[a.cmd]
        return handler(a)
    except SteptimeError as exc:
        print(f"steptime: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
