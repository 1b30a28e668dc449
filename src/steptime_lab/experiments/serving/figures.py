"""The serving family's figures, one function per computation (steptime.plotting's house style)."""

from __future__ import annotations

import numpy as np

from steptime.plotting import PALETTE, save, subplots
from steptime.serve.report import _ecdf
from steptime_lab.experiments.serving.replay import METRICS


def deadline_queue_figure(r: dict, stem, caption: str = "") -> list:
    df = r["table"]
    fig, ax = subplots(1, 1, figsize=(4.8, 3.2))
    for name, color, label in (("fcfs", PALETTE["bare_roofline"], "FCFS"),
                               ("edf_scalar", PALETTE["calibrated_roofline"], "deadline queue, scalar estimate"),
                               ("edf_steptime", PALETTE["steptime"], "deadline queue, steptime estimate")):
        ax.plot(df["rate_req_s"], df[f"{name}_attainment"], "o-", color=color, label=label)
    ax.set_xlabel("arrival rate (requests/s)")
    ax.set_ylabel("TTFT SLO attainment (simulated)")
    ax.legend(fontsize=7)
    return save(fig, stem, caption=caption, tight_layout=True)


def pool_sizing_figure(r: dict, stem, caption: str = "") -> list:
    cases = r["cases"]
    fig, axes = subplots(1, len(cases), figsize=(4.6 * len(cases), 3.2), squeeze=False)
    for ax, c in zip(axes[0], cases):
        keys = list(c["goodput"]["steptime"])
        x = np.arange(len(keys))
        for i, (name, color) in enumerate((("steptime", PALETTE["steptime"]), ("distserve", PALETTE["aic_empirical"]))):
            ax.bar(x + (i - 0.5) * 0.4, [c["goodput"][name][k] for k in keys], 0.4, color=color,
                   label=f"{name} (pick {c['choice'][name]})")
        ax.set_xticks(x, keys)
        ax.set_xlabel("placement (prefill p / decode d instances)")
        ax.set_ylabel("goodput per GPU (req/s, simulated)")
        ax.set_title(f"{c['model']} tp={c['tp']} on {c['gpu']}", loc="left")
        ax.legend(fontsize=7)
    return save(fig, stem, caption=caption, tight_layout=True)


def chunk_sizing_figure(r: dict, stem, caption: str = "") -> list:
    keys = list(r["sweeps"])
    fig, axes = subplots(1, len(keys), figsize=(4.2 * len(keys), 3.4), squeeze=False)
    df = r["cases"]
    for ax, key in zip(axes[0], keys):
        sw = r["sweeps"][key]
        ax.plot(sw["tbt_p99_s"] * 1e3, sw["throughput_tok_s"], "o-", color="#1b6ca8", label="chunk sweep (oracle set)")
        for c, x, y in zip(sw["chunk"], sw["tbt_p99_s"] * 1e3, sw["throughput_tok_s"]):
            ax.annotate(str(c), (x, y), fontsize=6, xytext=(2, 2), textcoords="offset points")
        model, gpu = key.split("|")
        sub = df[(df["model"] == model) & (df["gpu"] == gpu)]
        for i, row in enumerate(sub.itertuples()):
            ax.axvline(row.slo_tbt_s * 1e3, color="#9e9e9e", lw=0.8, ls="--")
            ax.plot(row.pick_tbt_p99_s * 1e3, row.pick_tok_s, "*", color="#d95f02", ms=10,
                    label="steptime pick" if i == 0 else None)
        ax.set_xscale("log")
        from matplotlib.ticker import NullFormatter, ScalarFormatter

        ax.xaxis.set_major_formatter(ScalarFormatter())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("p99 time between tokens (ms, simulated)")
        ax.set_ylabel("output throughput (tokens/s, simulated)")
        ax.set_title(f"{model} on {gpu}", loc="left")
        ax.legend(fontsize=7)
    return save(fig, stem, caption=caption, tight_layout=True)


def replay_figure(r: dict, stem, caption: str = "") -> list:
    keys = list(r["per_request"])
    fig, axes = subplots(len(keys), 3, figsize=(10, 2.6 * len(keys)), squeeze=False)
    for i, key in enumerate(keys):
        d = r["per_request"][key]
        for j, (m, name, unit, f) in enumerate(zip(METRICS, ("TTFT", "TPOT", "end-to-end"), ("s", "ms", "s"),
                                                   (1.0, 1e3, 1.0))):
            ax = axes[i][j]
            _ecdf(ax, d[f"{m}_measured"] * f, "measured (vLLM 0.19)", color=PALETTE["measured"])
            _ecdf(ax, d[f"{m}_simulated"] * f, "simulated (steptime.serve)", color=PALETTE["steptime"])
            ax.set_xlabel(f"{name} ({unit})")
            ax.set_ylabel("fraction of requests")
            if j == 0:
                ax.set_title(key, loc="left")
                ax.legend(fontsize=7)
    return save(fig, stem, caption=caption, tight_layout=True)
