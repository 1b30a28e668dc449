"""Figures of the GEMM family (house style via steptime.plotting): the panels a figure draws
(`*_panels`: held-out parameters per GPU, built from the settled folds) and the drawings."""

from __future__ import annotations

import numpy as np

from steptime.calibration import Constants
from steptime.plotting import PALETTE, save, subplots
from steptime.specs import by_family, get_gpu, gpu_keys
from steptime.terms import gemm as G
from steptime_lab.experiments.gemm.contract import predict
from steptime_lab.experiments.gemm.fill import (
    BLACKWELL, HOPPER, WAVE_GPUS, _shape_cells, params_cluster, params_no_fill, vidur_readings,
)
from steptime_lab.experiments.gemm.folds import fold_from_json, gpu_params

GPU_ORDER = tuple(by_family(gpu_keys(tables="aic")))  # the AIConfigurator GPUs by generation
GPU_COLORS = dict(zip(GPU_ORDER, ("#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d",
                                  "#666666", "#1f78b4")))


def _gpus(keys):
    return [g for g in GPU_ORDER if g in set(keys)] + sorted(set(keys) - set(GPU_ORDER))


def _gpu_bars(ax, gpus, series, w, ylabel=None, **ticklabels):
    """Grouped bars, one group per GPU: series = [(values, bar keywords)], centred on each GPU's tick; with a
    y label given, also that label and the legend."""
    x = np.arange(len(gpus))
    for i, (values, kw) in enumerate(series):
        ax.bar(x + (i - (len(series) - 1) / 2) * w, values, w, **kw)
    ax.set_xticks(x)
    ax.set_xticklabels(gpus, **ticklabels)
    if ylabel is not None:
        ax.set_ylabel(ylabel)
        ax.legend()


def memory_law_figure(tab, study: dict, stem: str) -> None:
    fig, axes = subplots(1, 3, figsize=(13, 4))
    g = tab[tab["kind"] == "gemm"]
    for law, ax in zip(("x", "bytes"), axes[:2]):
        glob = study["gemm"]["global"][law]
        shape = glob["shape"]
        for gpu in _gpus(g["gpu"].unique()):
            gg = get_gpu(gpu)
            d = g[g["gpu"] == gpu]
            e = glob["per_gpu"][gpu]["eta_max"]
            eta = d["bytes"] / (gg.mem_bw * d["latency_ms"] * 1e-3) / e
            if law == "x":
                xv = d["x"]
            else:
                xv = d["bytes"] / (e * gg.mem_bw * shape)
            ax.scatter(xv, eta, s=3, alpha=0.35, color=GPU_COLORS.get(gpu), label=gpu)
        xs = np.logspace(np.log10(max(1e-3, ax.get_xlim()[0])), np.log10(ax.get_xlim()[1]), 200)
        if law == "x":
            ax.plot(xs, xs / (xs + shape), color="k", lw=1.5, label=f"x/(x+{shape:.2f})")
            ax.set_xlabel("working set / L2 (x)")
        else:
            ax.plot(xs, xs / (xs + 1.0), color="k", lw=1.5, label=f"B/(B+B_half), t_half={shape * 1e6:.1f} us")
            ax.set_xlabel("bytes / (eta_max BW t_half)")
        ax.set_xscale("log")
        ax.set_ylabel("achieved eta_mem / eta_max (GPU)")
        ax.set_ylim(0, 1.3)
        ax.set_title(f"{law}-law, one shape for all GPUs")
    axes[0].legend(markerscale=4, fontsize=7, ncol=2)
    ax = axes[2]
    loo = study["gemm"]["loo"]
    gpus = _gpus(loo["x"].keys())
    _gpu_bars(ax, gpus, [([loo[law][x]["mape"] * 100 for x in gpus], {"label": f"{law}-law held out"})
                         for law in ("x", "bytes")], 0.38, "MAPE on memory-bound GEMM cells (%)",
              rotation=45, ha="right")
    ax.set_title("held-out GPU error (shape from the others)")
    save(fig, stem, "E1.3: memory efficiency on memory-bound GEMM cells (m <= 16, working set >= 0.3 L2) of every "
                    "GPU, normalised by each GPU's eta_max, against the working set over L2 (left) and the bytes "
                    "read over the fixed-ramp scale (middle); right: held-out-GPU MAPE of each law.")


def cluster_figure(doc: dict, stem: str) -> None:
    m = doc["metrics"]
    fig, axes = subplots(1, 2, figsize=(10, 4))
    ax = axes[0]
    gpu = sorted(m["caps"])[0]
    rows = m["caps"][gpu]
    c = [r["cluster"] for r in rows]
    ax.plot(c, [r["geometry_layout"] for r in rows], "o-", label=f"GPC geometry {m['gpc_layout'][gpu]}")
    ax.plot(c, [r["geometry_even"] for r in rows], "s--", label="geometry, even SM spread")
    ax.plot(c, [r["blind"] for r in rows], "^:", label="cluster-blind floor(SMs/c) c")
    meas = [(r["cluster"], r["measured"]) for r in rows if r["measured"]]
    if meas:
        ax.scatter(*zip(*meas), s=80, color="k", zorder=5, label="measured (cudaOccupancyMaxActiveClusters)")
    ax.set_xlabel("cluster size (CTAs)")
    ax.set_ylabel("co-resident CTAs (grid cap)")
    ax.set_title(f"{gpu}: persistent grid cap")
    ax.legend(fontsize=7)
    ax = axes[1]
    sizes = sorted(int(k.split("_")[1]) for k in m["latency_fit"])
    for gpu in sorted(m["latency_fit"][f"cluster_{sizes[0]}"]):
        ax.plot(sizes, [m["latency_fit"][f"cluster_{s}"][gpu]["llm"] * 100 for s in sizes], "o-", label=gpu)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("cluster size assumed by the model")
    ax.set_ylabel("held-out MAPE, LLM-shaped cells (%)")
    ax.set_title("which cap the latency tables support")
    ax.legend()
    save(fig, stem, "E1.11: left, CTAs a persistent grid can keep co-resident on Hopper by cluster size: GPC "
                    "geometry (clusters stay inside one GPC) vs an even SM spread vs a cluster-blind count, with the "
                    "measured 7 x 16 = 112; right, held-out MAPE of the GEMM term on H100/H200 LLM-shaped cells "
                    "when the model assumes each cluster size.")


def head_to_head_figure(recs: list[dict], stem: str) -> None:
    import pandas as pd

    r = pd.DataFrame(recs)
    preds = ["steptime", "calibrated_roofline", "aic_empirical", "datasheet_alpha", "bare_roofline"]
    fig, axes = subplots(1, 2, figsize=(13, 4.2), sharey=True)
    for ax, subset in zip(axes, ("llm", "all")):
        s = r[r["subset"] == subset]
        gpus = _gpus(s["gpu"].unique())
        series = []
        for p in preds:
            d = s[s["predictor"] == p].set_index("gpu").reindex(gpus)
            v = d["mape"].to_numpy() * 100
            lo = v - np.array([c[0] for c in d["mape_ci"]]) * 100
            hi = np.array([c[1] for c in d["mape_ci"]]) * 100 - v
            label = p + (" (in-sample)" if p == "calibrated_roofline" else "")
            series.append((v, {"yerr": [lo, hi], "color": PALETTE.get(p), "label": label, "capsize": 1.5}))
        _gpu_bars(ax, gpus, series, 0.16, rotation=45, ha="right")
        ax.set_yscale("log")
        ax.set_title({"llm": "LLM-shaped cells (n, k >= 1024, m <= 16384)", "all": "full grid"}[subset])
    axes[0].set_ylabel("MAPE (%), 95% bootstrap CI")
    axes[0].legend(fontsize=7)
    save(fig, stem, "E1.23: GEMM latency MAPE per GPU, every GPU held out for steptime (constants from the other "
                    "GPUs + three deploy readings of its own), against the bare roofline, datasheet alphas, "
                    "AIConfigurator's empirical constants and the best 3-constant roofline fitted in-sample.")


def error_atlas_figure(ape, stem: str) -> None:
    gpus = _gpus(ape["gpu"].unique())
    ncol = 3
    nrow = int(np.ceil(len(gpus) / ncol))
    fig, axes = subplots(nrow, ncol, figsize=(13, 3.8 * nrow), squeeze=False)
    fig.subplots_adjust(hspace=0.55, wspace=0.4, right=0.86)
    mb = np.array([1, 2, 8, 32, 128, 512, 2048, 8192, 40000])
    wb = 2.0 ** np.arange(10, 34, 2)
    im = None
    for ax, gpu in zip(axes.flat, gpus):
        d = ape[ape["gpu"] == gpu]
        w = (d["n"] * d["k"]).to_numpy(float)
        mi = np.clip(np.digitize(d["m"], mb) - 1, 0, len(mb) - 2)
        wi = np.clip(np.digitize(w, wb) - 1, 0, len(wb) - 2)
        grid = np.full((len(mb) - 1, len(wb) - 1), np.nan)
        for a in range(len(mb) - 1):
            for b in range(len(wb) - 1):
                sel = (mi == a) & (wi == b)
                if sel.any():
                    grid[a, b] = d["ape"].to_numpy()[sel].mean() * 100
        im = ax.imshow(grid, origin="lower", aspect="auto", cmap="magma_r", vmin=0, vmax=30)
        ax.set_xticks(np.arange(len(wb) - 1)[::2])
        ax.set_xticklabels([f"2^{int(np.log2(x))}" for x in wb[:-1][::2]], fontsize=7)
        ax.set_yticks(np.arange(len(mb) - 1))
        ax.set_yticklabels([f"{mb[i]}-{mb[i + 1] - 1}" for i in range(len(mb) - 1)], fontsize=7)
        ax.set_title(gpu)
        ax.set_xlabel("weight elements n k")
        ax.set_ylabel("m (tokens)")
        ax.grid(False)
    for ax in list(axes.flat)[len(gpus):]:
        ax.axis("off")
    if im is not None:
        cax = fig.add_axes([0.89, 0.3, 0.015, 0.4])
        fig.colorbar(im, cax=cax, label="MAPE (%) of held-out steptime")
    save(fig, stem, "E1.23 error atlas: held-out steptime MAPE per GPU over m and weight size n k (all grid "
                    "cells, deploy cells excluded); colour capped at 30%.")


def _curve_panel(ax, axf, gpu, cells, params_list, title):
    """Measured latency vs m for one (n, k), model lines, and the factors on a lower axis."""
    m = cells["m"].to_numpy(float)
    n = float(cells["n"].iloc[0])
    k = float(cells["k"].iloc[0])
    ax.scatter(m, cells["latency_ms"] * 1e3, s=9, color=PALETTE["measured"], label="measured", zorder=5)
    mm = np.unique(np.concatenate([np.arange(1, int(m.max()) + 1, max(1, int(m.max()) // 2000)), m]))
    for name, p, style in params_list:
        r = predict(gpu, mm, n, k, p, paradigm=p.get("_paradigm"), full=True)
        ax.plot(mm, r["t"] * 1e6, style, lw=1.2, label=name)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_ylabel("latency (us)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6)
    if axf is not None:
        name, p, _ = params_list[0]
        r = predict(gpu, mm, n, k, p, paradigm=p.get("_paradigm"), full=True)
        for f, st in (("eta_cluster", "-"), ("eta_duty", "--"), ("f_clk", ":"), ("eta_c", "-")):
            axf.plot(mm, np.broadcast_to(r[f], mm.shape), st, lw=1.4 if f == "eta_c" else 1, label=f)
        axf.plot(mm, np.minimum(r["eta_mem"], 1.5), "-.", lw=1, label="eta_mem")
        axf.set_xscale("log", base=2)
        axf.set_ylim(0, 1.2)
        axf.set_xlabel("m (tokens)")
        axf.set_ylabel("factor")
        axf.legend(fontsize=6, ncol=3)


def staircase_figure(panels: list, stem: str, caption: str) -> None:
    """panels: [(gpu, cells of one (n, k), [(label, params, style), ...], title)]."""
    fig, axes = subplots(2, len(panels), figsize=(4.4 * len(panels), 6.5), squeeze=False,
                         gridspec_kw={"height_ratios": [2, 1]}, sharex="col")
    for i, (gpu, cells, plist, title) in enumerate(panels):
        _curve_panel(axes[0, i], axes[1, i], gpu, cells, plist, title)
    save(fig, stem, caption)


def paradigm_figure(decision: dict, stem: str) -> None:
    gpus = _gpus(decision)
    fig, ax = subplots(figsize=(7, 3.6))
    _gpu_bars(ax, gpus, [([decision[g]["prefill_mape"][par] * 100 for g in gpus], {"label": f"{par} SM fill"})
                         for par in ("wave", "persistent")], 0.38, "held-out MAPE, prefill-sized cells (%)")
    for j, g in enumerate(gpus):
        ax.text(j, max(decision[g]["prefill_mape"].values()) * 100 + 0.3,
                "data: " + decision[g]["data"][:4], ha="center", fontsize=7)
    save(fig, stem, "E1.12: held-out GEMM MAPE on prefill-sized LLM cells of each Blackwell GPU with the wave "
                    "(Ampere-style) and the persistent (Hopper-style) SM-fill model, same constants and readings; "
                    "the label names the paradigm the data prefers.")


def scalar_figure(an: dict, stem: str) -> None:
    fig, axes = subplots(1, 2, figsize=(11, 4.2))
    ax = axes[0]
    for gpu in _gpus(an):
        s = an[gpu]["_scatter"]
        ax.scatter(s["eta_meas"], s["eta_c"], s=2, alpha=0.3, color=GPU_COLORS.get(gpu), label=gpu)
        ax.axhline(an[gpu]["eta_bar"], color=GPU_COLORS.get(gpu), lw=0.8, ls="--")
    ax.plot([0, 1.1], [0, 1.1], "k-", lw=0.8)
    ax.set_xlim(0, 1.1)
    ax.set_ylim(0, 1.1)
    ax.set_xlabel("measured efficiency (2mnk / P_peak) / (t - floor)")
    ax.set_ylabel("predicted eta_c (dots: factors; dashed: scalar)")
    ax.legend(markerscale=5, fontsize=6, ncol=2)
    ax = axes[1]
    gpus = _gpus(an)
    _gpu_bars(ax, gpus, [([an[g]["latency_factor"]["mape"] * 100 for g in gpus],
                          {"label": "factor product", "color": PALETTE["steptime"]}),
                         ([an[g]["latency_scalar"]["mape"] * 100 for g in gpus],
                          {"label": "one scalar per GPU", "color": PALETTE["datasheet_alpha"]})],
              0.38, "held-out MAPE, LLM-shaped cells with m >= 128 (%)", rotation=45, ha="right")
    save(fig, stem, "E1.13: left, measured compute efficiency per LLM-shaped cell with m >= 128 against the factor product "
                    "eta_c (dots) and the one scalar eta_bar read off the same deploy cell (dashed); right, latency "
                    "MAPE of both on the same held-out cells.")


def alpha_figure(an: dict, stem: str) -> None:
    fig, axes = subplots(1, 2, figsize=(12, 4.2))
    gpus = _gpus(an)
    for ax, key, title in ((axes[0], "_comp", "compute branch: (2mnk/P)/t"),
                           (axes[1], "_mem", "memory branch: (bytes/BW)/t")):
        raw = [an[g][key][0] for g in gpus]
        after = [an[g][key][1] * np.mean(an[g][key][0]) for g in gpus]
        pos = np.arange(len(gpus))
        b1 = ax.boxplot(raw, positions=pos - 0.2, widths=0.35, showfliers=False, patch_artist=True)
        b2 = ax.boxplot(after, positions=pos + 0.2, widths=0.35, showfliers=False, patch_artist=True)
        for b in b1["boxes"]:
            b.set_facecolor("#bbbbbb")
        for b in b2["boxes"]:
            b.set_facecolor(PALETTE["steptime"])
        ax.set_xticks(pos)
        ax.set_xticklabels(gpus, rotation=45, ha="right")
        ax.set_ylabel("implied alpha")
        ax.set_title(title)
        ax.legend([b1["boxes"][0], b2["boxes"][0]], ["bare roofline needs", "left after our factors (x mean)"],
                  fontsize=7)
    save(fig, stem, "L0.2: the efficiency a bare roofline must absorb per cell (grey; compute branch on "
                    "LLM-shaped cells with m >= 128 that the model calls compute-bound, memory branch on single-token cells in the DRAM regime) and "
                    "the spread left after the factor model (blue: predicted/measured scaled by the mean alpha).")


# ---------------------------------------------------------------- the panels the staircase figures draw
def wave_fill_panels(df, doc: dict, vidur_cells, *, constants: Constants) -> list:
    panels = []
    for gpu in WAVE_GPUS:
        fold = fold_from_json(doc, gpu, constants=constants)
        pnf = params_no_fill(gpu, fold["globals"], fold["readings"], constants=constants)
        cells = _shape_cells(df, gpu, 4096, 4096)
        panels.append((gpu, cells, [("model (held out)", fold["params"], "-"), ("without SM fill", pnf, "--")],
                       f"{gpu}: n = k = 4096"))
    if vidur_cells is not None and len(vidur_cells):
        rd = vidur_readings(vidur_cells, "a40")
        p = gpu_params("a40", doc["all"], rd, constants=constants)
        pnf = params_no_fill("a40", doc["all"], rd, constants=constants)
        c = vidur_cells[vidur_cells["op"] == "mlp_up_proj"]
        n, k = c.groupby(["n", "k"]).size().idxmax()
        panels.append(("a40", _shape_cells(vidur_cells, "a40", n, k),
                       [("model (held out)", p, "-"), ("without SM fill", pnf, "--")],
                       f"a40 (Vidur mlp_up_proj): n = {n}, k = {k}"))
    return panels


def cluster_cap_panels(df, doc: dict, alt_cluster: int = 16, *, constants: Constants) -> list:
    panels = []
    settled = int(doc["fixed"].get("hopper_cluster_size", 2))
    for gpu, (n, k) in zip(HOPPER, ((4096, 4096), (16384, 4096))):
        fold = fold_from_json(doc, gpu, constants=constants)
        palt = params_cluster(gpu, fold["globals"], fold["readings"], alt_cluster, constants=constants)
        panels.append((gpu, _shape_cells(df, gpu, n, k),
                       [(f"cluster {settled} (settled)", fold["params"], "-"),
                        (f"cluster {alt_cluster} (112-CTA cap)", palt, "--")], f"{gpu}: n = {n}, k = {k}"))
    return panels


def paradigm_panels(df, doc: dict, n: int = 8192, k: int = 4096, *, constants: Constants) -> list:
    panels = []
    for gpu in BLACKWELL:
        coded = G.fill_paradigm(get_gpu(gpu))
        other = "wave" if coded == "persistent" else "persistent"
        fa = fold_from_json(doc, gpu, constants=constants)
        fb = fold_from_json(doc, gpu, paradigm=other, constants=constants)
        pb = dict(fb["params"], _paradigm=other)
        panels.append((gpu, _shape_cells(df, gpu, n, k),
                       [(f"{coded} (fill_paradigm)", fa["params"], "-"), (f"{other}", pb, "--")],
                       f"{gpu}: n = {n}, k = {k}"))
    return panels
