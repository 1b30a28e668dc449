"""The GEMM family's claims and decisions: each takes what a score function computed and says what
it shows, with its target (`steptime_lab.results.claim`). Scores: `scoring.py`, `fill.py`,
`memory.py`, `ablation.py`; figures: `figures.py`.
"""

from __future__ import annotations

import numpy as np

from steptime.calibration import Calibration
from steptime.specs import get_gpu
from steptime.terms import gemm as G
from steptime_lab.experiments.gemm.fill import CLUSTER_SIZES, HOPPER, cap_table, peak_fraction
from steptime_lab.experiments.gemm.contract import DISCLOSED as GEMM_DISCLOSED
from steptime_lab.experiments.gemm.memory import MEM_LAWS
from steptime_lab.results import claim, target


# ---------------------------------------------------------------- head-to-head against the roofline peers (E1.23)
def head_to_head_claims(recs: list[dict], targets: dict, sensitivity: dict | None = None) -> dict:
    """metrics + claims of E1.23. `targets` (config/experiments.yaml E1.23): `mape`, the held-out
    LLM-cell MAPE bound per architecture family (`default` for the others); `bare_ratio`, how many
    times lower than the bare roofline."""
    import pandas as pd

    r = pd.DataFrame(recs)
    piv = r.pivot_table(index=["gpu", "subset"], columns="predictor", values="mape")
    claims = []
    summary = {}
    for g in sorted(r["gpu"].unique()):
        ours = piv.loc[(g, "llm"), "steptime"]
        bare = piv.loc[(g, "llm"), "bare_roofline"]
        cal = piv.loc[(g, "llm"), "calibrated_roofline"]
        tgt = targets["mape"].get(get_gpu(g).architecture, targets["mape"]["default"])
        summary[g] = {"steptime": ours, "bare_roofline": bare, "calibrated_roofline_in_sample": cal,
                      "ratio_bare_over_steptime": bare / ours, "target": tgt}
        claims.append(claim(f"{g}: held-out GEMM MAPE on LLM-shaped cells {ours:.1%} (target <= {tgt:.0%})", ours,
                            "steptime MAPE, LLM-shaped cells", target=tgt, met=ours <= tgt, op="<=", unit="fraction"))
        claims.append(claim(f"{g}: {bare / ours:.1f}x lower than the bare roofline ({bare:.1%})", bare / ours,
                            "bare-roofline MAPE / steptime MAPE, LLM-shaped cells", target=targets["bare_ratio"],
                            met=bare / ours >= targets["bare_ratio"], op=">=", unit="x"))
        claims.append(claim(f"{g}: {'below' if ours < cal else 'NOT below'} the best single calibrated roofline "
                            f"({cal:.1%}, 3 constants fitted in-sample on these very cells)", cal,
                            "calibrated_roofline (IN-SAMPLE) MAPE, LLM-shaped cells", target=ours, met=ours < cal, op=">",
                            unit="fraction"))
    if sensitivity:
        for g, sv in sensitivity.items():
            for name, alts in sv["alternatives"].items():
                if alts:
                    lo, hi = min(alts.values()), max(alts.values())
                    claims.append(claim(f"{g}: moving the {name} reading to a neighbouring cell moves the LLM-cell "
                                        f"MAPE between {lo:.1%} and {hi:.1%} (single-cell reading noise)",
                                        {"min": lo, "max": hi}, f"LLM MAPE over alternative {name} cells"))
    return {"metrics": {"records": recs, "summary_llm": summary, "reading_sensitivity": sensitivity,
                        "note": "steptime: every GPU held out (global constants from the other GPUs, three deploy "
                                "readings of its own, excluded from scoring); calibrated_roofline is an IN-SAMPLE "
                                "reference fitted per GPU and subset on the scored cells",
                        "disclosed": " ".join(GEMM_DISCLOSED)},
            "claims": claims}


# ---------------------------------------------------------------- SM fill: wave quantisation (E1.2)
def wave_fill_claims(an: dict) -> dict:
    claims = []
    for gpu, a in an.items():
        ab = a["ablation"]
        w, nf = ab["with_fill"]["mape"], ab["without_fill"]["mape"]
        claims.append(claim(f"{gpu}: the tile ladder + last-wave tail {'lowers' if w < nf else 'does NOT lower'} the "
                            f"held-out MAPE on m >= {ab['m_min']} LLM-shaped cells ({w:.1%} with fill vs {nf:.1%} "
                            f"without)", w, "MAPE with vs without the fill factor", target=nf, met=w < nf, op="<", unit="fraction"))
        js = a.get("jumps", {})
        if js.get("pairs"):
            claims.append(claim(f"{gpu}: at tile boundaries (m -> m+1) the measured latency steps by > 5% on "
                                f"{js['measured_steps_over_5pct']} of {js['pairs']} pairs; the wave model flags "
                                f"{js.get('caught', 0)} of them (mean |jump error| {js.get('mae', float('nan')):.3f} vs "
                                f"{js.get('mae_nofill', float('nan')):.3f} without fill)", js.get("mae"),
                                "mean absolute error of t(m+1)/t(m)", target=js.get("mae_nofill"),
                                met=js.get("mae", 1) < js.get("mae_nofill", 0), op="<"))
    return {"metrics": an, "claims": claims}


# ---------------------------------------------------------------- SM fill: Hopper's cluster size (E1.11) and grid cap (E1.2b)
def cluster_size_decision(df, comparison: dict, sizes=CLUSTER_SIZES, targets=HOPPER) -> dict:
    caps = {g: cap_table(g) for g in targets}
    g0 = get_gpu(targets[0])
    meas = {g: {c: get_gpu(g).max_active_clusters[c] * c for c in get_gpu(g).max_active_clusters} for g in targets}
    geo_ok = all(r["geometry_layout"] == r["measured"] for g in targets for r in caps[g] if r["measured"])
    even16 = G.geometry_cluster_cap(g0.sms, g0.gpcs, 16)
    blind16 = G.blind_cluster_cap(g0.sms, 16)
    lay16 = G.geometry_cluster_cap(g0.sms, g0.gpcs, 16, G.gpc_layout(g0))
    mean_llm = {c: float(np.mean([comparison[(c, t)]["llm"] for t in targets])) for c in sizes}
    best_fit = min(sizes, key=lambda c: (round(mean_llm[c], 4), c))
    peaks = {g: peak_fraction(df, g) for g in targets}
    ceiling16 = lay16 / g0.sms
    # admissible caps: with eta_active <= 1 the grid must allow the highest measured throughput
    top = max(p["max"] for p in peaks.values())
    admissible = [c for c in sizes if G.cluster_cap(g0, c) / g0.sms >= top]
    tol = 0.005
    near = [c for c in sizes if mean_llm[c] <= mean_llm[best_fit] + tol]
    pool = [c for c in near if c in admissible] or admissible or [best_fit]
    best = min(pool, key=lambda c: (round(mean_llm[c], 4), c))
    metrics = {
        "gpc_layout": {g: G.gpc_layout(get_gpu(g)) for g in targets},
        "caps": caps,
        "measured_max_active_clusters_x_size": meas,
        "latency_fit": {f"cluster_{c}": {t: {k: v for k, v in comparison[(c, t)].items() if k != "params"}
                                         for t in targets} for c in sizes},
        "mean_llm_mape_by_cluster": mean_llm,
        "peak_fraction_measured": peaks,
        "cap16_ceiling_fraction": ceiling16,
    }
    # the target is the measured reading (gpus.yaml max_active_clusters), never a typed number
    meas16 = meas[targets[0]].get(16)
    if meas16 is None:
        raise ValueError(f"{targets[0]}: gpus.yaml max_active_clusters has no measured 16-CTA cluster count")
    claims = [
        claim(f"GPC geometry (layout {G.gpc_layout(g0)}) gives {lay16} CTAs for 16-CTA clusters on {g0.sms} SMs, "
              f"matching the measured cudaOccupancyMaxActiveClusters ({meas16 // 16} x 16 = {meas16}); an even SM "
              f"spread gives {even16} and the cluster-blind floor(SMs/16) x 16 gives {blind16}", lay16,
              "geometry vs measured vs blind", target=meas16, met=geo_ok and lay16 == meas16, op="==", unit="CTAs"),
        claim("held-out Hopper LLM MAPE barely depends on the assumed cluster size ("
              + ", ".join(f"c={c} (cap {G.cluster_cap(g0, c)}) {mean_llm[c]:.2%}" for c in sizes)
              + "): the compute deploy reading absorbs the grid cap into eta_active, so latency alone does not "
                "identify it", max(mean_llm.values()) - min(mean_llm.values()),
              "spread of mean held-out MAPE across cluster sizes"),
        claim(f"settled: cluster size {best} (cap {G.cluster_cap(g0, best)} CTAs), the best-fitting size (within "
              f"{tol:.1%}) whose cap admits the measured peak fraction {top:.2f} with eta_active <= 1 "
              f"(admissible: {admissible})", best, "decision rule"),
        claim(f"the measured tables reach {max(p['max'] for p in peaks.values()):.2f} of the datasheet peak, above "
              f"the {ceiling16:.2f} a 112-CTA grid allows at full clock: the 7 x 16 cap cannot be what these "
              f"kernels run", max(p["max"] for p in peaks.values()), "max measured fraction of peak vs 112/132",
              target=ceiling16, met=max(p["max"] for p in peaks.values()) > ceiling16, op=">",
              unit="fraction of peak"),
    ]
    return {"metrics": metrics, "claims": claims,
            "decision": {"cluster_size": best, "mean_llm_mape": mean_llm, "best_fit": best_fit,
                         "admissible": admissible,
                         "rule": "lowest held-out MAPE among sizes within 0.5 pp of the best whose cap / SMs >= "
                                 "the highest measured fraction of peak"}}


# what each side of E1.2b's cluster-cap comparison was fitted on (wave 40, helper review10): the alternative cap is
# priced with the settled fit's globals (fitted with the settled cluster size fixed) and its own eta_active re-read
# from the same deploy cells, so the globals were fitted for one side only; E1.11:2 refits them per cluster size
_SAME_FIT = ("; both priced with the globals fitted at cluster {s} (the 16-CTA side's eta_active re-read from the same "
             "deploy cells, its globals not refitted: the comparison favours the settled size; E1.11:2 refits each size)")


def cluster_cap_claims(an: dict) -> dict:
    s, a = an["settled_cluster_size"], an["alternative_cluster_size"]
    claims = []
    for gpu, r in an["gpus"].items():
        ms, ma = r[f"cluster_{s}"]["prefill"]["mape"], r[f"cluster_{a}"]["prefill"]["mape"]
        claims.append(claim(f"{gpu}: persistent grid of {r[f'cluster_{s}']['grid_cap']} CTAs (cluster {s}) gives "
                            f"{ms:.1%} held-out MAPE on prefill-sized cells vs {ma:.1%} with the 7 x 16 = "
                            f"{r[f'cluster_{a}']['grid_cap']} cap{_SAME_FIT.format(s=s)}", ms,
                            "prefill-cell MAPE, settled vs 16-CTA clusters",
                            target=ma, met=ms < ma, op="<", unit="fraction"))
        js = r[f"cluster_{s}"]["jumps"]
        claims.append(claim(f"{gpu}: measured staircases in m are shallow (mean t(m+1)/t(m) "
                            f"{js['measured_jump_mean']:.3f}, {js['measured_steps_over_5pct']} of {js['pairs']} "
                            f"pairs step > 5%); the model's mean |jump error| is {js['mae']:.3f}",
                            js["mae"], "mean absolute error of t(m+1)/t(m)"))
    # wave 39 (helper spec9): the same comparison on every LLM-shaped cell, not only the prefill-sized ones (where the
    # settled size was expected to win); appended after the claims above so no claim id moves
    for gpu, r in an["gpus"].items():
        ms, ma = r[f"cluster_{s}"]["llm"]["mape"], r[f"cluster_{a}"]["llm"]["mape"]
        claims.append(claim(f"{gpu}: on every LLM-shaped cell ({r[f'cluster_{s}']['llm']['cells']}) the persistent grid "
                            f"of {r[f'cluster_{s}']['grid_cap']} CTAs (cluster {s}) gives {ms:.1%} held-out MAPE vs "
                            f"{ma:.1%} with the {r[f'cluster_{a}']['grid_cap']}-CTA cap of {a}-CTA clusters (same "
                            f"readings, cap switched){_SAME_FIT.format(s=s)}", ms,
                            "LLM-cell MAPE, settled vs 16-CTA clusters",
                            target=ma, met=ms < ma, op="<", unit="fraction"))
    return {"metrics": an, "claims": claims}


# ---------------------------------------------------------------- SM fill: Blackwell's paradigm (E1.12)
def paradigm_claims(scores: dict) -> dict:
    claims, decision = [], {}
    for gpu, sc in scores.items():
        w = sc["wave"]["scores"]["prefill"]["mape"]
        p = sc["persistent"]["scores"]["prefill"]["mape"]
        best = "wave" if w < p else "persistent"
        coded = G.fill_paradigm(get_gpu(gpu))
        decision[gpu] = {"data": best, "coded": coded, "agree": best == coded,
                         "prefill_mape": {"wave": w, "persistent": p},
                         "llm_mape": {k: sc[k]["scores"]["llm"]["mape"] for k in sc}}
        claims.append(claim(f"{gpu}: the {best} paradigm fits the measured curves better (held-out prefill MAPE "
                            f"wave {w:.1%}, persistent {p:.1%}); fill_paradigm() says {coded}", best,
                            "prefill-sized LLM cells, same constants, paradigm switched", target=coded,
                            met=best == coded, op="=="))
    return {"metrics": {"scores": scores, "decision": decision}, "claims": claims}


# ---------------------------------------------------------------- the memory law (E1.3)
def memory_law_claims(study: dict, l2_gemm: dict, l2_stream: dict, targets: dict) -> dict:
    """E1.3's metrics and claims; `targets` is the registry's E1.3 `targets:` (global_gap, held_out_mape)."""
    gap_target = target(targets, "global_gap", "E1.3")
    loo_target = target(targets, "held_out_mape", "E1.3")
    sku_target = target(targets, "per_gpu_mape", "E1.3")
    g = study["gemm"]
    loo_mean = {law: float(np.mean([v["mape"] for v in g["loo"][law].values()])) for law in MEM_LAWS}
    law = min(MEM_LAWS, key=lambda k: loo_mean[k])
    glob = g["global"][law]["per_gpu"]
    per = g["per_gpu"][law]
    worst_gap = max(glob[x]["mape"] - per[x]["mape"] for x in glob)
    loo = g["loo"][law]
    cal = Calibration()
    for kind, st in study.items():
        for lw, lo in st["loo"].items():
            for gpu, v in lo.items():
                cal.record(f"eta_max[{kind},{lw}]@{gpu}", [tuple(v["reading_cell"])],
                           note="held-out GPU: eta_max from this one reading, shape from the other GPUs")
    hbm = [x for x in l2_gemm if get_gpu(x).mem_type.startswith("HBM")]
    gddr = [x for x in l2_gemm if x not in hbm]
    metrics = {
        "laws": {"x": "t = (bytes + x_half L2) / (BW eta_max)  (eta = eta_max x/(x + x_half), x = bytes/L2)",
                 "bytes": "t = bytes / (BW eta_max) + t_half  (eta = eta_max B/(B + eta_max BW t_half))"},
        "note": "fits include the launch floor in the offset; DRAM regime only (GEMM working set >= 0.3 L2, "
                "scale_matrix >= 1 L2)",
        "study": study,
        "loo_mean_mape_gemm": loo_mean,
        "l2_resident_gemm": l2_gemm,
        "l2_resident_scale_matrix": l2_stream,
    }
    sm = study["scale_matrix"]
    ratio = {x: sm["per_gpu"][law][x]["eta_max"] / g["per_gpu"][law][x]["eta_max"]
             for x in sm["per_gpu"][law] if x in g["per_gpu"][law]}
    metrics["eta_max_scale_matrix_over_gemm"] = ratio
    claims = [
        claim(f"one {law}-law (shared shape, eta_max per GPU) fits every GPU's memory-bound GEMM cells within "
              f"{worst_gap:.1%} MAPE of its own per-GPU fit", worst_gap, "global minus per-GPU MAPE, worst GPU",
              target=gap_target, met=worst_gap <= gap_target, op="<=", unit="fraction"),
        claim(f"held out (shape from the other GPUs, eta_max from one reading), the {law}-law's MAPE averages "
              f"{loo_mean[law]:.1%} (worst {max(v['mape'] for v in loo.values()):.1%})", loo_mean[law],
              "mean held-out-GPU MAPE on memory-bound GEMM cells", target=loo_target, met=loo_mean[law] <= loo_target,
              op="<=",
              unit="fraction"),
        claim(f"the {law}-law beats the other law held out ({loo_mean[law]:.1%} vs "
              f"{loo_mean[[o for o in MEM_LAWS if o != law][0]]:.1%})", loo_mean[law], "mean held-out MAPE, both laws"),
        claim("single-token GEMMs beat DRAM speed only on the GDDR parts with a large L2 ("
              + ", ".join(f"{x} up to {l2_gemm[x]['max_bw_over_dram']:.2f}x" for x in gddr) + "); no HBM part does ("
              + ", ".join(f"{x} max {l2_gemm[x]['max_bw_over_dram']:.2f}x" for x in hbm) + ")",
              {x: l2_gemm[x]["max_bw_over_dram"] for x in l2_gemm}, "max achieved / datasheet DRAM bandwidth"),
        claim("the streaming scale_matrix kernel stays above DRAM speed up to working sets of "
              + ", ".join(f"{x} {v['largest_x_above_dram']:.2f} L2" for x, v in l2_stream.items()
                          if v["largest_x_above_dram"] is not None),
              {x: v["largest_x_above_dram"] for x, v in l2_stream.items()}, "largest x = bytes/L2 above DRAM speed"),
        claim("scale_matrix's streaming eta_max relative to the GEMM's: "
              + ", ".join(f"{x} {v:.2f}" for x, v in ratio.items()), ratio, "per-GPU ratio of fitted eta_max"),
    ]
    # wave 39 (helper spec9): the catalogue's own form, "every per-SKU MAPE <= 7% under the global law", read on
    # this repository's global fit of the chosen law (shape shared by every GPU, eta_max per GPU: round 1 also
    # shared eta_max), appended so no claim id moves
    worst_gpu = max(glob, key=lambda x: glob[x]["mape"])
    worst_sku = float(glob[worst_gpu]["mape"])
    claims.append(claim(f"under the {law}-law's global fit (shared shape, eta_max per GPU) every GPU's MAPE on its "
                        f"memory-bound GEMM cells is within {sku_target:.0%} (worst {worst_gpu} {worst_sku:.1%}; "
                        f"in-sample: each GPU's eta_max and the shared shape are fitted on the cells scored, "
                        f"the held-out form is claim 2)",
                        worst_sku, "global-fit MAPE per GPU, worst GPU", target=sku_target,
                        met=worst_sku <= sku_target, op="<=", unit="fraction"))
    return {"metrics": metrics, "claims": claims, "calibration": cal.to_dict(),
            "decision": {"law": law, "shape": g["global"][law]["shape"],
                         "reason": "lower mean held-out-GPU MAPE on memory-bound GEMM cells ("
                                   + ", ".join(f"{k} {v:.4f}" for k, v in loo_mean.items()) + ")"}}


# ---------------------------------------------------------------- the factor product vs one scalar, the factor ablation (E1.13)
def scalar_claims(an: dict, ablation: dict | None = None) -> dict:
    claims = ablation_claims(ablation) if ablation else []
    for gpu, a in an.items():
        f, s = a["latency_factor"]["mape"], a["latency_scalar"]["mape"]
        claims.append(claim(f"{gpu}: on LLM-shaped cells with m >= 128 the factor product's held-out MAPE is {f:.1%} vs "
                            f"{s:.1%} for one scalar eta_bar = {a['eta_bar']:.3f} read off the same deploy cell "
                            f"(drift of the scalar vs the factors: mean {a['drift_abs_mean']:.1%}, max "
                            f"{a['drift_abs_max']:.1%})", f, "latency MAPE, factors vs scalar", target=s, met=f < s, op="<",
                            unit="fraction"))
    metrics = {g: {k: v for k, v in a.items() if not k.startswith("_")} for g, a in an.items()}
    if ablation:
        metrics = {"scalar_vs_factors": metrics, "factor_ablation": ablation,
                   "note": "ablation: each factor off, global constants refitted on all GPUs (in-sample for the "
                           "globals), per-GPU deploy readings re-applied; LLM-shaped cells"}
        metrics["disclosed"] = " ".join(GEMM_DISCLOSED)
        if ablation.get("fit_noise"):
            metrics["disclosed"] += (" The ablation's tie band has a declared floor (config sizes e1_13_ablation "
                                     "tie_floor), chosen after seeing the refits' scores under two numeric "
                                     "environments (wave 37, helper repro).")
    return {"metrics": metrics, "claims": claims}


def ablation_claims(ab: dict) -> list:
    """One claim per ablation entry: the factor helps (the mean LLM-cell MAPE rises without it). Where the ablation
    carries its fit noise ("fit_noise", `factor_ablation`), an effect no larger than the noise band is a tie: a
    descriptive claim without a verdict, so a rebuild on another CPU (which moves the capped refits by about that
    much) cannot flip it; an effect beyond the band keeps its verdict against the band (met: d > band; an effect
    below -band is met=False, the factor hurts)."""
    base = ab["all factors"]["mean_llm_mape"]
    noise = ab.get("fit_noise")
    band = None if noise is None else float(noise["band"])
    if band is not None and not (np.isfinite(band) and band >= 0):
        raise ValueError(f"ablation_claims: the fit-noise band must be a finite number >= 0, got {band!r}")
    out = []
    for name, v in ab.items():
        if name in ("all factors", "settings", "fit_noise"):
            continue
        d = v["mean_llm_mape"] - base
        what = f"with {name}" if "fitted back in" in name else f"without {name}"
        text = (f"{what}: mean LLM-cell MAPE {v['mean_llm_mape']:.2%} vs {base:.2%} with the shipped "
                f"factors ({'+' if d >= 0 else ''}{d * 100:.2f} pp)")
        comparison = "change in mean MAPE over the 9 GPUs when the factor is off (globals refitted, all-GPU fit)"
        if band is None:
            out.append(claim(text, d, comparison, target=0.0, met=d > 0, op=">", unit="fraction"))
        elif abs(d) <= band:
            out.append(claim(text + f": a tie, within the refit's own noise (+-{band * 100:.2f} pp: across CPUs and fit "
                                    f"samples the capped refit moves by about that much); no verdict", d,
                             comparison + "; within the fit-noise band, no verdict"))
        else:
            out.append(claim(text + f", beyond the refit's noise band ({band * 100:.2f} pp)", d,
                             comparison + "; against the fit-noise band", target=band, met=d > band, op=">",
                             unit="fraction"))
    return out


# ---------------------------------------------------------------- the implied-alpha ledger (L0.2)
def implied_alpha_claims(an: dict) -> dict:
    claims = []
    for branch in ("compute", "memory"):
        lo = min(a[branch]["alpha_min"] for a in an.values())
        hi = max(a[branch]["alpha_max"] for a in an.values())
        cvs = [a[branch]["alpha_cv"] for a in an.values()]
        after = [a[branch]["after_factors_cv"] for a in an.values()]
        claims.append(claim(f"{branch} branch: a bare roofline needs alpha between {lo:.3f} and {hi:.3f} across GPUs "
                            f"and cells (CV per GPU {min(cvs):.1%}-{max(cvs):.1%}); after our factors the spread of "
                            f"predicted/measured is CV {min(after):.1%}-{max(after):.1%} "
                            f"({np.median(np.array(cvs) / np.array(after)):.1f}x collapse, median GPU)",
                            {"alpha_range": [lo, hi], "cv_before": float(np.median(cvs)), "cv_after": float(np.median(after))},
                            "CV of implied alpha vs CV of predicted/measured, per GPU"))
        claims.append(claim(f"{branch} branch: alpha < 1 on every cell ({hi:.3f} max)", hi, "max implied alpha",
                            target=1.0, met=hi < 1.0, op="<"))
    metrics = {g: {k: v for k, v in a.items() if not k.startswith("_")} for g, a in an.items()}
    return {"metrics": metrics, "claims": claims}
