"""E1.23b: what predicting a GPU from its datasheet alone costs (the `uncalibrated` mode).

A GPU without deploy readings of its own (`steptime gpus` lists it `uncalibrated`: the
datasheet entries of issue 21, AMD Instinct always) is predicted from its datasheet figures
and its family's constants; its per-GPU GEMM constants (eta_active, eta_mem_max,
kernel_floor_us) fall back to the shipped global ones, the median of the other GPUs' deploy
readings. This experiment measures what that costs on GPUs that do have readings, by dropping
them: for each AIConfigurator GPU X, on the same held-out cells as E1.23 (X's three deploy
cells removed),

* calibrated: E1.23's leave-one-GPU-out fold (globals fitted without X) plus X's three readings;
* uncalibrated: the same fold globals, and in place of X's readings the median of the other
  GPUs' readings solved under that fold (the shipped fallback, rebuilt without X, so nothing
  of X enters its own prediction).

Family constants (the tile ladders, Hopper's cluster size) are as shipped: they were set on
several GPUs of the family, X among them, which the document states.
"""

from __future__ import annotations

import numpy as np

from steptime_lab.results import claim, target

PER_GPU = ("eta_active", "eta_mem_max", "kernel_floor_us")


def uncalibrated_params(doc: dict, gpu: str, *, constants) -> dict:
    """GEMM parameters for `gpu` without its readings: its fold's globals, the other GPUs' median
    readings, over `constants` (the run's)."""
    from steptime_lab.experiments import gemm as E

    others = [g for g in sorted(doc["folds"]) if g != gpu]
    rd = E.readings_in_fold(doc, gpu, others, constants=constants)
    p = E.with_globals(gpu, E.base_params(gpu, constants), doc["folds"][gpu]["globals"])
    for nm in PER_GPU:
        p[nm] = float(np.median([rd[o][nm] for o in others]))
    return p


def score_datasheet_only(df, doc: dict, *, constants, n_boot: int = 1000, seed: int = 0) -> dict:
    """{'records': [...], 'fallback': {gpu: {name: value}}} per GPU of `doc`'s folds."""
    from steptime_lab.experiments import gemm as E
    from steptime_lab.metrics import score

    gpus = sorted(doc["folds"])
    folds = {g: E.fold_from_json(doc, g, constants=constants) for g in gpus}
    # E1.23's scored cells (deploy cells removed), calibrated steptime, and the datasheet-only bare roofline
    P = E.predictions(df, folds, baselines=("bare_roofline",))
    recs, fallback = [], {}
    for g in gpus:
        d = P[g]
        sub = d["df"]
        p_unc = uncalibrated_params(doc, g, constants=constants)
        fallback[g] = {nm: p_unc[nm] for nm in PER_GPU}
        unc = E.predict(g, sub["m"].to_numpy(float), sub["n"].to_numpy(float), sub["k"].to_numpy(float), p_unc)
        y = sub["latency_ms"].to_numpy(float)
        for mode, pred in (("calibrated", d["pred"]["steptime"]), ("uncalibrated", unc),
                           ("bare_roofline", d["pred"]["bare_roofline"])):
            for s, mk in d["masks"].items():
                recs.append({"family": "gemm", "gpu": g, "mode": mode, "subset": s,
                             **score(pred[mk], y[mk], n_boot=n_boot, seed=seed)})
    return {"records": recs, "fallback": fallback, "gpus": gpus}


def document(r: dict, targets: dict) -> dict:
    import pandas as pd

    from steptime.specs import get_gpu

    rec = pd.DataFrame(r["records"])
    piv = rec.pivot_table(index=["gpu", "subset"], columns="mode", values="mape")
    tg = lambda k: target(targets, k, "E1.23b")  # noqa: E731
    per_gpu, claims = {}, []
    for g in r["gpus"]:
        cal, unc = float(piv.loc[(g, "llm"), "calibrated"]), float(piv.loc[(g, "llm"), "uncalibrated"])
        bare = float(piv.loc[(g, "llm"), "bare_roofline"])
        fam = get_gpu(g).architecture
        tgt = targets["mape"].get(fam, targets["mape"]["default"])
        per_gpu[g] = {"family": fam, "llm_mape_calibrated": cal, "llm_mape_uncalibrated": unc, "cost_pp": unc - cal,
                      "llm_mape_bare_roofline": bare, "all_mape_calibrated": float(piv.loc[(g, "all"), "calibrated"]),
                      "all_mape_uncalibrated": float(piv.loc[(g, "all"), "uncalibrated"]),
                      "fallback_readings": r["fallback"][g], "target": tgt}
        claims.append(claim(f"{g}: held-out GEMM MAPE on LLM-shaped cells without its readings (uncalibrated) {unc:.1%} "
                            f"against E1.23's {fam} target {tgt:.0%} (with its three readings: {cal:.1%})", unc,
                            "uncalibrated MAPE, LLM-shaped cells", target=tgt, met=unc <= tgt, op="<=", unit="fraction"))
    unc_all = np.array([v["llm_mape_uncalibrated"] for v in per_gpu.values()])
    cal_all = np.array([v["llm_mape_calibrated"] for v in per_gpu.values()])
    ratio = np.array([v["llm_mape_bare_roofline"] / v["llm_mape_uncalibrated"] for v in per_gpu.values()])
    med_unc, med_cal, med_ratio = float(np.median(unc_all)), float(np.median(cal_all)), float(np.median(ratio))
    claims += [
        claim(f"uncalibrated mode: median over the {len(per_gpu)} GPUs {med_unc:.1%} held-out LLM-cell GEMM MAPE "
              f"(calibrated {med_cal:.1%}): the three readings are worth {med_unc - med_cal:.1%} points", med_unc - med_cal,
              "median uncalibrated - median calibrated MAPE, LLM-shaped cells (descriptive)"),
        claim(f"uncalibrated mode is {med_ratio:.1f}x lower than the bare roofline (median over GPUs; both use the "
              "datasheet only)", med_ratio, "median over GPUs of bare-roofline MAPE / uncalibrated MAPE",
              tg("bare_ratio"), med_ratio >= tg("bare_ratio"), op=">=", unit="x"),
    ]
    return {"metrics": {"per_gpu": per_gpu, "llm_mape_median": {"calibrated": med_cal, "uncalibrated": med_unc},
                        "bare_over_uncalibrated_median": med_ratio,
                        "records": r["records"],
                        "note": "uncalibrated = the GPU's leave-one-GPU-out fold globals with the median of the "
                                "other GPUs' readings in place of its own (the shipped fallback rebuilt without it); "
                                "family constants (tile ladders, Hopper cluster size) as shipped, set on several "
                                "GPUs of each family including the one scored"},
            "claims": claims}


def plot(doc: dict, stem, caption: str = "") -> list:
    from steptime.plotting import save, subplots

    per = doc["metrics"]["per_gpu"]
    gpus = list(per)
    x = np.arange(len(gpus))
    fig, ax = subplots(figsize=(7.0, 3.2))
    ax.bar(x - 0.2, [per[g]["llm_mape_calibrated"] * 100 for g in gpus], 0.4, label="with its 3 readings")
    ax.bar(x + 0.2, [per[g]["llm_mape_uncalibrated"] * 100 for g in gpus], 0.4, label="uncalibrated (datasheet + family)")
    ax.set_xticks(x)
    ax.set_xticklabels(gpus, rotation=30, ha="right", fontsize=7)
    ax.set_ylabel("held-out GEMM MAPE, LLM cells (%)")
    ax.legend(fontsize=7)
    return save(fig, stem, caption=caption, tight_layout=True)
