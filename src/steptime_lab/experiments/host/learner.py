"""E1.19: an online learner for the host floor S(N) against one-time calibration, frozen at deploy,
and the shift case.

Input: engine steps in the forward-pass-metrics (FPM) layout, from two sources read by one code
path (`build`): the tidy FPM table of AIConfigurator's vendored vLLM steps
(results/data/fpm_steps.parquet) and step traces collected by `steptime_collect.steptrace`
(raw/telemetry/steptrace/<gpu>/<model>.csv, `steptrace_table`). Both become W2b's step table
(`steptime_lab.experiments.wallclock.fpm_steps`) and are predicted by W2b's predictors on the same
per-request batches (`make_predictor`): the engine profile as shipped (the static arm) and, where R2.3
fitted it, the profile with R2.3's constants from three wall-clock steps. The GPU part of a step is the
GPU-work part of the shipped profile's OWN prediction (`gpu_part`: steptime.step's split, T_blocks; the
engine's fused kernels and light floors included), and the host floor is what the wall clock adds to it:
h = latency - GPU part. Model: S(N) = a + b (N - 1), N requests.

Arms, each scored on the same held-out steps by the MAE and MAPE of the predicted step GPU part + S:
  static              the engine profile as shipped (its host part: launch floor beyond the kernels, exposed
                      scheduler floor, sampling; given, not fitted here): GPU part + static is the profile's own step
  r23_three_readings  the profile with R2.3's engine constants (three sweep steps per GPU and engine): its step
                      minus the shipped GPU part, so GPU part + arm is R2.3's own step
  oracle_static       a, b fitted on the held-out steps themselves (hindsight: a bound, not a predictor)
  online_frozen       a, b fitted on the steps before the boundary (the first `warmup` fraction), frozen
  online_adapt        recursive least squares with forgetting `lam`, updated after every step (diagnostic:
                      it sees each held-out step's truth after predicting it)
The shift case trains on one workload segment and tests on another (the synthetic sweep -> the
chat-shaped run), where a frozen constant meets a distribution it never saw.
"""

from __future__ import annotations

import numpy as np

from steptime.errors import DataError
from steptime.plotting import save, subplots
from steptime.specs import get_gpu
from steptime.specs.engines import HOST_FIELDS, get_engine
from steptime_lab.data.checks import read_csv
from steptime_lab.data.wallclock import check_fpm_rows
from steptime_lab.experiments.wallclock import (WallclockError, fitted_values, fpm_steps, gpu_part, make_predictor,
                                                predict_table)
from steptime_lab.results import claim
from steptime_collect.steptrace import FPM_COLUMNS
from steptime_lab.run_constants import require_constants


def _fit(n, h):
    X = np.column_stack([np.ones_like(n), np.maximum(n - 1.0, 0.0)])
    coef, *_ = np.linalg.lstsq(X, h, rcond=None)
    return float(coef[0]), float(coef[1])


def _score(pred, meas):
    err = pred - meas
    return {"mae_ms": float(np.mean(np.abs(err))), "mape": float(np.mean(np.abs(err) / meas)),
            "bias_ms": float(np.mean(err))}


def _rls(n, h, lam: float, a0: float, b0: float):
    """One-step-ahead predictions of recursive least squares with forgetting factor lam."""
    theta = np.array([a0, b0], dtype=float)
    P = np.eye(2) * 1e3
    out = np.empty(len(n))
    for i, (ni, hi) in enumerate(zip(n, h)):
        x = np.array([1.0, max(ni - 1.0, 0.0)])
        out[i] = x @ theta
        k = P @ x / (lam + x @ P @ x)
        theta = theta + k * (hi - x @ theta)
        P = (P - np.outer(k, x) @ P) / lam
    return out


def _per_step(static, n, name: str):
    """A static host arm as per-step milliseconds: (a, b) of S(N) = a + b (N - 1), or an array of len(n)."""
    if static is None:
        raise DataError(f"E1.19: the {name} arm needs host constants (a, b) or a per-step host prediction")
    arr = np.asarray(static, dtype=float)
    if arr.shape == (2,) and len(n) != 2:
        return arr[0] + arr[1] * np.maximum(n - 1.0, 0.0)
    if arr.shape != n.shape or not np.all(np.isfinite(arr)):
        raise DataError(f"E1.19: the {name} arm has {arr.size} finite values for {len(n)} steps")
    return arr


def _arrays(n_requests, kernel_ms, latency_ms, min_steps: int, what: str):
    n, k, y = (np.asarray(a, dtype=float) for a in (n_requests, kernel_ms, latency_ms))
    if not (len(n) == len(k) == len(y)) or len(n) < min_steps:
        raise DataError(f"E1.19 {what} needs at least {min_steps} steps with matching arrays "
                        f"(got {len(n)}, {len(k)}, {len(y)})")
    if np.any(y <= 0) or not np.all(np.isfinite(k)) or np.any(n < 1):
        raise DataError("E1.19: step latencies must be positive, kernel predictions finite, requests >= 1")
    return n, k, y


def host_learner(n_requests, kernel_ms, latency_ms, static_ab=None, warmup: float = 0.2, lam: float = 0.99,
                 fixed_arms: dict | None = None) -> dict:
    """The four arms on one stationary trace (steps in time order).

    `kernel_ms` is each step's predicted GPU part (predict_host_floor: the shipped profile's own GPU-work part).
    `static_ab` is the one-time calibration: (a, b) of S(N), or the per-step host time a shipped
    engine profile adds to that GPU part (an array). `fixed_arms` are further per-step host
    predictions fitted elsewhere (e.g. R2.3's three readings), scored on the same held-out steps."""
    n, k, y = _arrays(n_requests, kernel_ms, latency_ms, 10, "stationary case")
    if not 0.0 < warmup < 1.0:
        raise DataError(f"E1.19: warmup must be a fraction in (0, 1), got {warmup}")
    h = y - k
    cut = max(2, int(round(warmup * len(n))))
    test = slice(cut, None)
    S = lambda ab, nn: ab[0] + ab[1] * np.maximum(nn - 1.0, 0.0)  # noqa: E731
    frozen = _fit(n[:cut], h[:cut])
    oracle = _fit(n[test], h[test])
    adapt = _rls(n, h, lam, *frozen)[test]
    arms = {"static": _per_step(static_ab, n, "static")[test], "oracle_static": S(oracle, n[test]),
            "online_frozen": S(frozen, n[test]), "online_adapt": adapt}
    for name, v in (fixed_arms or {}).items():
        arms[name] = _per_step(v, n, name)[test]
    static_c = list(map(float, static_ab)) if np.shape(static_ab) == (2,) and len(n) != 2 else \
        {"per_step_mean_ms": float(np.mean(arms["static"]))}
    return {"steps": int(len(n)), "deploy_boundary": cut, "host_share": float(np.median(h / y)),
            "host_floor_ms": {"median": float(np.median(h)), "p10": float(np.percentile(h, 10)),
                              "p90": float(np.percentile(h, 90))},
            "constants": {"static": static_c, "oracle_static": list(oracle), "online_frozen": list(frozen)},
            "scores": {arm: _score(k[test] + v, y[test]) for arm, v in arms.items()}}


def shift_case(train: dict, test: dict, static_ab=None, lam: float = 0.99, fixed_arms: dict | None = None) -> dict:
    """Fit on one segment, score on another: train/test are dicts of n_requests, kernel_ms, latency_ms arrays.

    `static_ab` and `fixed_arms` are as in `host_learner`, per step of the TEST segment."""
    nt, kt, yt = _arrays(train.get("n_requests"), train.get("kernel_ms"), train.get("latency_ms"), 3, "shift train")
    ns, ks, ys = _arrays(test.get("n_requests"), test.get("kernel_ms"), test.get("latency_ms"), 3, "shift test")
    frozen = _fit(nt, yt - kt)
    oracle = _fit(ns, ys - ks)
    S = lambda ab, nn: ab[0] + ab[1] * np.maximum(nn - 1.0, 0.0)  # noqa: E731
    adapt = _rls(np.concatenate([nt, ns]), np.concatenate([yt - kt, ys - ks]), lam, *frozen)[len(nt):]
    arms = {"static": _per_step(static_ab, ns, "static"), "online_frozen": S(frozen, ns), "online_adapt": adapt,
            "oracle_static": S(oracle, ns)}
    for name, v in (fixed_arms or {}).items():
        arms[name] = _per_step(v, ns, name)
    return {"train_steps": int(len(nt)), "test_steps": int(len(ns)),
            "constants": {"online_frozen": list(frozen), "oracle_static": list(oracle)},
            "scores": {arm: _score(ks + v, ys) for arm, v in arms.items()}}


# ---------------------------------------------------------------------------------------
# One code path for both sources: the tidy FPM table (AIConfigurator's vendored vLLM steps,
# results/data/fpm_steps.parquet) and collected step traces (raw/telemetry/steptrace/<gpu>/<model>.csv,
# written by steptime_collect.steptrace in the same column layout). Both become W2b's step table
# (steptime_lab.experiments.wallclock.fpm_steps) and are predicted by W2b's predictors (make_predictor).
STEPTRACE_TP = 1  # ASSUMED: steptime_collect.steptrace runs one GPU (no tensor parallelism) and writes no tp column


def steptrace_table(paths):
    """Collected step traces in the tidy FPM layout: gpu and model from raw/telemetry/steptrace/<gpu>/<model>.csv,
    engine 'vllm' (profile of the engine the collector drives), tp STEPTRACE_TP."""
    import pandas as pd
    from pathlib import Path

    frames = []
    for p in map(Path, paths):
        d = read_csv(p, listed_in=None)
        missing = [c for c in FPM_COLUMNS if c not in d.columns]
        if missing:
            raise DataError(f"{p}: step trace lacks column(s) {', '.join(missing)} (layout: steptime_collect.steptrace)")
        check_fpm_rows(d, str(p))  # the same checks as the vendored FPM runs
        frames.append(d.assign(gpu=p.parent.name, model=p.stem, engine="vllm", engine_version="", tp=STEPTRACE_TP,
                               moe=False, over_token_budget=False, source=str(p)))
    if not frames:
        return pd.DataFrame(columns=[*FPM_COLUMNS, "gpu", "model", "engine", "engine_version", "tp", "moe",
                                     "over_token_budget", "source"])
    return pd.concat(frames, ignore_index=True)


def predict_host_floor(tidy, *, engine: str = "vllm", fitted=None, skip_over_budget: bool = True, constants=None):
    """Per step of a tidy FPM-layout table: n_requests, static_ms (the engine profile as shipped), kernel_ms
    (the GPU-work part of that same prediction, `gpu_part`: the GPU part the host floor is read against) and,
    where `fitted` (R2.3's engine_constants.yaml) holds this (engine, GPU), r23_ms (the profile with those
    constants). Returns (steps, {'over_token_budget': skipped rows})."""
    import pandas as pd

    skipped = int(tidy["over_token_budget"].astype(bool).sum()) if skip_over_budget else 0
    x = tidy[~tidy["over_token_budget"].astype(bool)] if skip_over_budget else tidy
    steps = fpm_steps(x)
    if steps.empty:
        raise DataError("E1.19: no dense-model steps in the step table")
    parts = []
    for (gpu, model), s in steps.groupby(["gpu", "model"], sort=True):
        prof = predict_table(s, make_predictor(engine, model, gpu, engine=engine, constants=constants))
        out = s.assign(n_requests=s["ctx_requests"] + s["decode_requests"], kernel_ms=gpu_part(prof),
                       static_ms=prof["pred_ms"])
        if fitted is not None:
            try:
                fitted_values(fitted, engine, gpu)  # raises when R2.3 fitted nothing for this (engine, GPU)
            except WallclockError:
                pass
            else:  # every part of the fitted doc (engines, constants, scales) through the one constructor
                r23 = make_predictor(engine, model, gpu, engine=engine, fitted=fitted, constants=constants)
                out["r23_ms"] = predict_table(s, r23)["pred_ms"]
        parts.append(out)
    return pd.concat(parts), {"over_token_budget": skipped}


def _arm_inputs(s):
    return {"n_requests": s["n_requests"].to_numpy(float), "kernel_ms": s["kernel_ms"].to_numpy(float),
            "latency_ms": s["latency_ms"].to_numpy(float)}


def _fixed(s):
    """Per-step host predictions of the arms not fitted here: the arm's step - the shipped profile's GPU part."""
    k = s["kernel_ms"].to_numpy(float)
    fixed = {"static": s["static_ms"].to_numpy(float) - k}
    if "r23_ms" in s and s["r23_ms"].notna().all():
        fixed["r23_three_readings"] = s["r23_ms"].to_numpy(float) - k
    return fixed


def _n_range(n) -> dict:
    n = np.asarray(n, dtype=float)
    return {"min": int(n.min()), "median": float(np.median(n)), "max": int(n.max()),
            "share_at_max": float(np.mean(n == n.max()))}


def score_runs(steps, *, stationary_segment: str = "real", shift_train: str = "sweep", shift_test: str = "real",
               warmup: float = 0.2, lam: float = 0.99, phases=None) -> dict:
    """Stationary case and shift case per (gpu, model, tp) run of `predict_host_floor`'s steps, in time order
    (step = counter_id), on the steps of `phases` (None: every phase). A run without the shift's train segment
    (a collected step trace) gets no shift case."""
    if phases is not None:
        unknown = sorted(set(phases) - {"prefill", "decode", "mixed"})
        if unknown:
            raise DataError(f"E1.19: unknown phase(s) {', '.join(unknown)} (known: prefill, decode, mixed)")
        steps = steps[steps["phase"].isin(list(phases))]
    out = {}
    for (gpu, model, tp), run in steps.groupby(["gpu", "model", "tp"], sort=True):
        run = run.sort_values("step", kind="stable")
        key = f"{gpu}/{model}/tp{int(tp)}"
        r: dict = {"gpu": gpu, "model": model, "tp": int(tp)}
        st = run[run["segment"] == stationary_segment]
        if len(st) >= 10:
            f = _fixed(st)
            r["stationary"] = host_learner(st["n_requests"], st["kernel_ms"], st["latency_ms"], f.pop("static"),
                                           warmup=warmup, lam=lam, fixed_arms=f)
            r["stationary"]["segment"] = stationary_segment
            r["stationary"]["steps_by_phase"] = {k: int(v) for k, v in st["phase"].value_counts().sort_index().items()}
            cut = r["stationary"]["deploy_boundary"]
            r["stationary"]["n_requests"] = {"train": _n_range(st["n_requests"].iloc[:cut]),
                                             "test": _n_range(st["n_requests"].iloc[cut:])}
        tr, te = run[run["segment"] == shift_train], run[run["segment"] == shift_test]
        if len(tr) >= 3 and len(te) >= 3:
            f = _fixed(te)
            r["shift"] = shift_case(_arm_inputs(tr), _arm_inputs(te), f.pop("static"), lam=lam, fixed_arms=f)
            r["shift"].update(train_segment=shift_train, test_segment=shift_test,
                              n_requests={"train": _n_range(tr["n_requests"]), "test": _n_range(te["n_requests"])})
        else:
            r["shift"] = {"not_run": f"no '{shift_train}' and '{shift_test}' segments with >= 3 steps each"}
        out[key] = r
    if not out:
        raise DataError("E1.19: no (gpu, model, tp) run with steps")
    return out


def static_profile_values(engine: str, gpus, constants=None) -> dict:
    """The shipped host, launch and sampling values of an engine profile per GPU, with provenance."""
    constants = require_constants(constants, "host.learner.static_profile_values")
    e = get_engine(engine, fitted={})
    out = {}
    for gk in gpus:
        g = get_gpu(gk)
        rows = {}
        for name in HOST_FIELDS:
            if name in e.values:
                v = e.lookup(name, g)
                rows[name] = {"value": e.get(name, g, constants), "provenance": v.provenance,
                              "source": v.source}
        out[g.key] = rows
    return out


ARMS = ("static", "r23_three_readings", "online_frozen", "oracle_static", "online_adapt")
ARM_NOTE = {"static": "engine profile as shipped (one-time, no wall-clock reading)",
            "r23_three_readings": "engine profile with R2.3's constants from three sweep steps",
            "online_frozen": "S(N) fitted on the first warmup share of steps, frozen at deploy",
            "oracle_static": "S(N) fitted on the held-out steps themselves: a BOUND, not a predictor",
            "online_adapt": "RLS updated after every step: DIAGNOSTIC, sees each step's truth after predicting it"}


def claims(per_run: dict, *, warmup: float, round1: str) -> list[dict]:
    """Per run: stationary and shift held-out MAPE of every arm; whether the frozen learner beats the static arm."""
    out = []
    for key, r in per_run.items():
        for case in ("stationary", "shift"):
            c = r.get(case)
            if not c or "scores" not in c:
                continue
            sc = c["scores"]
            where = (f"held out after the first {warmup:.0%} of the {c.get('segment', '')} steps" if case == "stationary"
                     else f"trained on '{c['train_segment']}', tested on '{c['test_segment']}'")
            out.append(claim(f"{key} {case} ({where}): held-out MAPE per arm",
                             {a: round(sc[a]["mape"], 5) for a in ARMS if a in sc}, "fraction, lower is better"))
            out.append(claim(f"{key} {case}: does the frozen online learner beat the shipped static profile "
                             "(held-out MAPE, frozen vs static)?",
                             [round(sc["online_frozen"]["mape"], 5), round(sc["static"]["mape"], 5)],
                             "frozen < static", met=bool(sc["online_frozen"]["mape"] < sc["static"]["mape"]),
                             key=0, op="<", target=round(sc["static"]["mape"], 5), unit="fraction"))
    out.append(claim(f"reported in round 1 (E1.19, vLLM Poisson traces on H100/H200/A100, other telemetry): {round1}",
                     round1, "round-1 figure, not ours"))
    return out


def plot(per_run: dict, stem, steps=None, caption: str | None = None) -> None:
    """(a) stationary and (b) shift held-out MAPE per arm and TP; (c) the measured host floor against N for
    the first run's stationary segment with the frozen and oracle S(N) lines."""
    fig, axes = subplots(1, 3, figsize=(13, 3.8))
    keys = list(per_run)
    width = 0.8 / len(ARMS)
    colors = dict(zip(ARMS, ("#7f7f7f", "#9467bd", "#1b6ca8", "#2ca02c", "#ff7f0e")))
    for ax, case, title in ((axes[0], "stationary", "(a) stationary"), (axes[1], "shift", "(b) shift")):
        for j, arm in enumerate(ARMS):
            xs, vs = [], []
            for i, k in enumerate(keys):
                sc = (per_run[k].get(case) or {}).get("scores", {})
                if arm in sc:
                    xs.append(i + (j - (len(ARMS) - 1) / 2) * width)
                    vs.append(100 * sc[arm]["mape"])
            if vs:
                ax.bar(xs, vs, width, color=colors[arm], label=arm, hatch="//" if arm == "online_adapt" else None)
        ax.set_xticks(range(len(keys)), [k.split("/")[-1] for k in keys])
        ax.set_yscale("log")
        ax.set_ylabel("held-out MAPE of the step (%)")
        ax.set_title(title)
    axes[0].legend(fontsize=7)
    ax = axes[2]
    k0 = keys[0]
    st = per_run[k0].get("stationary")
    if steps is not None and st:
        g, m, tp = per_run[k0]["gpu"], per_run[k0]["model"], per_run[k0]["tp"]
        s = steps[(steps["gpu"] == g) & (steps["model"] == m) & (steps["tp"] == tp) &
                  (steps["segment"] == st["segment"])].sort_values("step", kind="stable")
        h = s["latency_ms"] - s["kernel_ms"]
        cut = st["deploy_boundary"]
        ax.scatter(s["n_requests"].iloc[cut:], h.iloc[cut:], s=3, alpha=0.2, color="#7f7f7f", label="held-out steps")
        ax.scatter(s["n_requests"].iloc[:cut], h.iloc[:cut], s=3, alpha=0.4, color="#1b6ca8", label="training steps")
        nn = np.linspace(1, max(2, s["n_requests"].max()), 50)
        for arm, ls in (("online_frozen", "-"), ("oracle_static", "--")):
            a, b = st["constants"][arm]
            ax.plot(nn, a + b * (nn - 1), ls, color=colors[arm], label=f"{arm} S(N)")
        ax.set_ylim(np.percentile(h, 0.5) - 1, np.percentile(h, 99.5) + 1)
        ax.set_title(f"(c) host floor, {k0}")
        ax.legend(fontsize=7)
    ax.set_xlabel("requests in the step N")
    ax.set_ylabel("h = measured - profile GPU part (ms)")
    save(fig, stem, caption=caption, tight_layout=True)


FAIRNESS = ("R2.3 reads the engine constants (t_samp_ms, t_samp_b_ms, allreduce_latency_us) from at most THREE "
            "wall-clock steps per (GPU, engine), all from the sweep segment, chosen by batch composition alone; "
            "E1.19's frozen learner fits S(N) on the first {warmup:.0%} of each TP run's steps ({n_train} readings "
            "in the stationary case, {n_shift} in the shift case, per TP): it sees orders of magnitude more "
            "wall-clock readings, from the same TP and segment it is scored on in the stationary case. The arm "
            "r23_three_readings is R2.3's fitted profile scored on exactly the same held-out steps (R2.3's three "
            "readings are sweep steps, never in a test set here).")


def build(fpm_tidy, steptrace_paths=(), *, fitted=None, engine: str = "vllm", warmup: float = 0.2,
          lam: float = 0.99, stationary_segment: str = "real", shift_train: str = "sweep",
          shift_test: str = "real", phases=("decode",), skip_over_budget: bool = True,
          round1: str = "", constants=None) -> tuple[dict, list, object]:
    """E1.19 end to end on the tidy FPM table plus collected step traces: (metrics, claims, steps)."""
    import pandas as pd

    trace = steptrace_table(steptrace_paths)
    tables = [t for t in (fpm_tidy, trace) if t is not None and len(t)]
    if not tables:
        raise DataError("E1.19: neither FPM steps nor collected step traces to reduce")
    tidy = pd.concat(tables, ignore_index=True) if len(tables) > 1 else tables[0]
    steps, skipped = predict_host_floor(tidy, engine=engine, fitted=fitted, skip_over_budget=skip_over_budget,
                                          constants=constants)
    kw = dict(stationary_segment=stationary_segment, shift_train=shift_train, shift_test=shift_test,
              warmup=warmup, lam=lam)
    primary = score_runs(steps, phases=list(phases) if phases else None, **kw)
    every = score_runs(steps, phases=None, **kw)
    n_train = sorted({r["stationary"]["deploy_boundary"] for r in primary.values() if "stationary" in r})
    n_shift = sorted({r["shift"]["train_steps"] for r in primary.values() if "train_steps" in r["shift"]})
    gpus = sorted(steps["gpu"].unique())
    metrics = {
        "per_run": primary,
        "sensitivity_all_phases": {k: {c: {a: s["mape"] for a, s in r[c]["scores"].items()}
                                       for c in ("stationary", "shift") if "scores" in (r.get(c) or {})}
                                   for k, r in every.items()},
        "phases": list(phases) if phases else "all",
        "arms": ARM_NOTE,
        "static_arm": {"engine": engine, "how": f"per step: the host part of the '{engine}' profile's predicted "
                                                "step (its step minus its own GPU-work part, steptime.step's split: "
                                                "launch floor beyond the kernels, exposed scheduler floor, sampling, "
                                                "as shipped, async overlap included)",
                       "values": static_profile_values(engine, gpus, constants)},
        "host_floor": f"h = measured step latency - the GPU-work part of the '{engine}' profile's own predicted step "
                      "(T_blocks: GEMM, attention, light kernels, all-reduce, with the engine's fusions and floors; "
                      "W2b's per-request batches from the FPM composition); S(N) = a + b (N - 1), N = requests in the "
                      "step. Until wave 23 h was read against the bare 'kernels' profile, whose unfused kernels "
                      "over-state the engine's GPU work",
        "fairness_vs_R2_3": FAIRNESS.format(warmup=warmup, n_train=n_train, n_shift=n_shift),
        "skipped": skipped,
        "sources": {"fpm_steps": int(len(fpm_tidy)) if fpm_tidy is not None else 0,
                    "steptrace_files": [str(p) for p in steptrace_paths]},
    }
    return metrics, claims(primary, warmup=warmup, round1=round1), steps
