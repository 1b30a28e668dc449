"""Diagnosis (issue 20, wave 38, helper a2ll; no rule, nothing shipped): where E3.2's five missed (engine, mode, GPU)
groups err, and whether a reading placement chosen on the training GPUs, or a floor read from several cells, would
carry them. Replays steptime_lab.experiments.moe.run_a2a_engines on results/data/moe_a2a*.parquet (the committed
E3.2 law and protocol, unchanged) and prints:
  (a) per miss: signed error (mean log predicted / measured), MAPE and share of the summed absolute error by phase
      and message (tokens x hidden x 2 bytes, bf16), and by phase and shape; the EP degree (one per GPU);
  (b) per miss: the MAPE with the protocol's scales, with an oracle floor scale per phase (the best on the GPU's own
      scored cells, the transfer scale as read), an oracle transfer scale per phase (floor as read), and both: a
      level (floor) miss falls to the target with the oracle floor, a slope miss with the oracle transfer scale;
  (c) the low-latency floor readings' token count chosen per held-out GPU by an inner leave-one-GPU-out on the
      other five GPUs only (the same rule for every GPU; candidates 1, 2, 4, 8, 16, 32 tokens on DeepSeek-V3's
      shape), and then the shrinkage weight w of the two 1-token floor scales toward their geometric mean (0, 0.2,
      0.5, 1; wave 29's try 5), each with the held-out MAPE at the choice and at every candidate;
  (d) upper bounds for a protocol change (NOT E3.2's three-reading protocol): a floor scale per phase read as the
      geometric mean of the implied floor scales over several cells of the held-out GPU (the normal mode's relative
      to the same cells of its donors, as its transfer reading is), scored on the cells not read and on the
      protocol's scored cells (the read ones included: in-sample for them);
  (e) the three readings reallocated (module constants swapped for the replay, restored after): the normal mode's
      floor (its smallest DeepSeek-V3 dispatch cell, relative to the donors or absolute) in place of its transfer
      reading, and the same floor as a fourth reading (an upper bound outside the protocol).

    PYTHONPATH=src python workflow/scripts/diag_a2a_misses.py [--skip-inner]
"""
import argparse

import numpy as np
import pandas as pd

from steptime.terms.moe import smax
from steptime_lab.experiments import moe

MISSES = [("vllm", "b200", "ll"), ("vllm", "h100-sxm", "ll"), ("trtllm", "gb200", "ht"), ("trtllm", "gb300", "ht"),
          ("trtllm", "gb300", "ll")]
DSV3 = (7168, 8, 256)
BINS, LAB = [0, 2 ** 16, 2 ** 20, 2 ** 23, 2 ** 26, 2 ** 29, 2 ** 40], ["<64K", "64K-1M", "1-8M", "8-64M", "64-512M",
                                                                       ">512M"]
LL_TOKENS = (1, 2, 4, 8, 16, 32)
LL_SHRINK = (0.0, 0.2, 0.5, 1.0)


def load():
    v = pd.read_parquet("results/data/moe_a2a.parquet")
    t = moe.trtllm_a2a_cells(pd.read_parquet("results/data/moe_a2a_trtllm.parquet"))
    return {"vllm": v, "trtllm": t}


def mape(pred, y):
    return 100 * float(np.mean(np.abs(np.asarray(pred) / np.asarray(y) - 1)))


def implied_floor(rows: pd.DataFrame, law: dict, key: str, s_slope: float = 1.0) -> np.ndarray:
    """Each row's floor scale solved as a2a_scales solves its floor readings: meas = (F^p + (s_slope x)^p)^(1/p)."""
    f, x = moe._a2a_parts(rows, law[key])
    p = law[key].get("overlap_p", 1.0)
    m = rows["latency_ms"].to_numpy("float64")
    return np.maximum(m ** p - (s_slope * x) ** p, (0.25 * m) ** p) ** (1 / p) / f


def breakdown(r: dict):
    for eng, g, mode in MISSES:
        d = r[eng]["cells"]
        e = d[(d.gpu == g) & (d["mode"] == mode) & ~d.reading].copy()
        e["lr"] = np.log(e.pred_ms / e.latency_ms)
        e["ape"] = (e.pred_ms / e.latency_ms - 1).abs()
        e["msg"] = pd.cut(e.num_tokens * e.hidden_size * 2, BINS, labels=LAB, right=False)
        print(f"\n(a) {eng} {mode} {g}: MAPE {100 * e.ape.mean():.2f}, {len(e)} cells, EP {sorted(int(x) for x in e.ep_size.unique())}")
        for by in (["phase", "msg"], ["phase", "hidden_size", "topk", "num_experts"]):
            t = e.groupby(by, observed=True).agg(n=("lr", "size"), signed=("lr", "mean"), mape=("ape", "mean"),
                                                 share=("ape", "sum"))
            t["share"] /= e.ape.sum()
            print(t.round(3).to_string())
        pg = r[eng]["per_gpu"][g]
        print("readings", [(x["mode"], x["phase"], x["num_tokens"]) for x in pg["readings"]],
              {k: round(v, 3) for k, v in pg["scales"].items()})


def oracle(r: dict):
    from scipy.optimize import minimize

    print("\n(b) MAPE %: protocol / oracle floor / oracle transfer / both; floor and transfer scales read -> oracle")
    for eng, g, mode in MISSES:
        d, pg = r[eng]["cells"], r[eng]["per_gpu"][g]
        e = d[(d.gpu == g) & (d["mode"] == mode) & ~d.reading]
        parts = {}
        for ph in moe.A2A_PHASES:
            s = e[e.phase == ph]
            f, x = moe._a2a_parts(s, pg["law"][f"{mode}:{ph}"])
            read = (pg["scales"].get(f"s_floor:{mode}:{ph}", 1.0), pg["scales"]["s_slope:ht"] if mode == "ht" else 1.0)
            parts[ph] = (s.latency_ms.to_numpy(), f, x, pg["law"][f"{mode}:{ph}"].get("overlap_p", 1.0), read)

        def err(ph, a, b):
            y, f, x, p, _ = parts[ph]
            return np.abs(smax(a * f, b * x, p) / y - 1)

        def best(ph, free):
            a0, b0 = parts[ph][4]
            z0 = np.log([a0, b0])[list(free)]

            def obj(z):
                ab = np.log([a0, b0])
                ab[list(free)] = z
                return err(ph, *np.exp(ab)).mean()

            ab = np.log([a0, b0])
            ab[list(free)] = minimize(obj, z0, method="Nelder-Mead").x
            return np.exp(ab)

        out, sc = [], {}
        for name, free in (("protocol", ()), ("floor", (0,)), ("transfer", (1,)), ("both", (0, 1))):
            ab = {ph: (parts[ph][4] if not free else best(ph, free)) for ph in parts}
            sc[name] = ab
            out.append(100 * sum(err(ph, *ab[ph]).sum() for ph in parts) / len(e))
        print(f"{eng} {mode} {g}: " + " / ".join(f"{x:.2f}" for x in out),
              {ph: (round(float(parts[ph][4][0]), 3), round(float(sc['floor'][ph][0]), 3),
                    round(float(parts[ph][4][1]), 3), round(float(sc['transfer'][ph][1]), 3)) for ph in parts})


def inner_ll_tokens(data: dict):
    print("\n(c) low-latency floor readings' token count chosen on the training GPUs (inner leave-one-GPU-out)")
    for eng, raw in data.items():
        d = moe.a2a_cells(raw, moe.A2A_MODEL_ROUTING[eng])
        ll = d[d["mode"] == "ll"]
        gpus = sorted(d.gpu.unique())
        laws = {}

        def law_for(train):
            k = frozenset(train)
            if k not in laws:
                laws[k] = moe.a2a_fit(ll[ll.gpu.isin(list(train))])
            return laws[k]

        def score(h, train, tok, w=0.0):
            law = law_for(train)
            s = ll[ll.gpu == h]
            sc, read = {}, []
            for ph in moe.A2A_PHASES:
                c = s[(s.phase == ph) & (s.hidden_size == DSV3[0]) & (s.topk == DSV3[1]) & (s.num_experts == DSV3[2])
                      & (s.num_tokens == tok)]
                sc[f"s_floor:ll:{ph}"] = float(implied_floor(c, law, f"ll:{ph}")[0])
                read += list(c.index)
            if w:  # each phase's floor scale shrunk toward the two phases' geometric mean (wave 29's try 5)
                gm = np.sqrt(sc["s_floor:ll:dispatch"] * sc["s_floor:ll:combine"])
                sc = {k: v ** (1 - w) * gm ** w for k, v in sc.items()}
            keep = ~s.index.isin(read)
            return mape(moe.a2a_predict(s, law, {h: sc})[keep], s.latency_ms.to_numpy()[keep])

        for label, cands, arg in (("tokens", LL_TOKENS, lambda c: (c, 0.0)), ("shrink w", LL_SHRINK, lambda c: (1, c))):
            for g in gpus:
                others = [o for o in gpus if o != g]
                inner = {c: np.mean([score(h, [o for o in others if o != h], *arg(c)) for h in others]) for c in cands}
                ch = min(inner, key=inner.get)
                held = {c: round(score(g, others, *arg(c)), 2) for c in cands}
                print(f"{eng} {g}: {label} chosen {ch} (inner {inner[ch]:.2f}, protocol's {inner[cands[0]]:.2f}); "
                      f"held out {held[cands[0]]} -> {held[ch]}; every candidate {held}")


FLOOR_SETS = {"ll: 1 token, six shapes": ("ll", (1,), None), "ll: 1-8 tokens, DeepSeek-V3": ("ll", (1, 2, 4, 8), DSV3),
              "ht: 16 tokens, six shapes": ("ht", (16,), None),
              "ht: 16-64 tokens, DeepSeek-V3": ("ht", (16, 32, 64), DSV3),
              "ht: 16-64 tokens, six shapes": ("ht", (16, 32, 64), None)}


def multi_cell_floors(data: dict):
    print("\n(d) a floor scale per phase read from several cells (a protocol change, more than three readings)")
    for eng, raw in data.items():
        d = moe.a2a_cells(raw, moe.A2A_MODEL_ROUTING[eng])
        gpus = sorted(d.gpu.unique())
        for name, (mode, toks, shape) in FLOOR_SETS.items():
            out = {}
            for g in gpus:
                others = [o for o in gpus if o != g]
                donors = moe.a2a_donors(g, others)
                law = moe.a2a_law(d, donors, others)
                sc = moe.a2a_scales(d, g, law, ref_gpus=donors)

                def cells(gpu, ph):
                    c = d[(d.gpu == gpu) & (d["mode"] == mode) & (d.phase == ph) & d.num_tokens.isin(toks)]
                    if shape:
                        c = c[(c.hidden_size == shape[0]) & (c.topk == shape[1]) & (c.num_experts == shape[2])]
                    return c

                used = []
                for ph in moe.A2A_PHASES:
                    c, key = cells(g, ph), f"{mode}:{ph}"
                    s_sl = sc["s_slope:ht"] if mode == "ht" else 1.0
                    lg = np.mean(np.log(implied_floor(c, law, key, s_sl)))
                    if mode == "ht":  # relative to the donors' same cells, as the normal-mode transfer reading
                        lg -= np.mean([np.mean(np.log(implied_floor(cells(o, ph), law, key,
                                                                    moe.a2a_scales(d, o, law)["s_slope:ht"])))
                                       for o in donors])
                    sc[f"s_floor:{key}"] = float(np.exp(lg))
                    used += list(c.index)
                res = []
                for drop in (set(moe.a2a_readings(d, g).index) | set(used), set(moe.a2a_readings(d, g).index)):
                    e = d[(d.gpu == g) & (d["mode"] == mode) & ~d.index.isin(drop)]
                    res.append(round(mape(moe.a2a_predict(e, law, {g: sc}), e.latency_ms), 2))
                out[g] = tuple(res)
            print(f"{eng} {name} (cells not read, the protocol's scored cells): {out}")


ALLOCATIONS = {
    "protocol": (moe.A2A_READINGS, moe.A2A_RELATIVE_READINGS),
    "ht floor (relative) for ht transfer": (moe.A2A_READINGS[:2] + (("ht", "dispatch", "min", "s_floor:ht:dispatch"),),
                                            ("s_floor:ht:dispatch",)),
    "ht floor (absolute) for ht transfer": (moe.A2A_READINGS[:2] + (("ht", "dispatch", "min", "s_floor:ht:dispatch"),),
                                            ()),
    "fourth reading: + ht floor (relative)": (moe.A2A_READINGS + (("ht", "dispatch", "min", "s_floor:ht:dispatch"),),
                                              ("s_slope:ht", "s_floor:ht:dispatch")),
}


def allocations(data: dict):
    print("\n(e) the readings reallocated (held-out MAPE % per engine/mode/GPU; claims <= 12)")
    keep = (moe.A2A_READINGS, moe.A2A_RELATIVE_READINGS)
    try:
        for name, (readings, relative) in ALLOCATIONS.items():
            moe.A2A_READINGS, moe.A2A_RELATIVE_READINGS = readings, relative
            r = moe.run_a2a_engines(data["vllm"], data["trtllm"])
            got = {f"{eng}/{x.mode}/{x.gpu}": round(100 * x.mape, 2)
                   for eng, e in (("vllm", r), ("trtllm", r["engines"]["trtllm"])) for x in e["per"].itertuples()}
            print(f"{name}: met {sum(v <= 12 for v in got.values())} of {len(got)}; "
                  f"{ {k: v for k, v in got.items() if '/ht/' in k} }")
    finally:
        moe.A2A_READINGS, moe.A2A_RELATIVE_READINGS = keep


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip-inner", action="store_true", help="leave out (c), the slowest part")
    a = ap.parse_args()
    data = load()
    r = moe.run_a2a_engines(data["vllm"], data["trtllm"])
    r = {"vllm": r, "trtllm": r["engines"]["trtllm"]}
    for eng, e in r.items():
        print(eng, {f"{x.gpu}/{x.mode}": round(100 * x.mape, 2) for x in e["per"].itertuples()})
    breakdown(r)
    oracle(r)
    if not a.skip_inner:
        inner_ll_tokens(data)
    multi_cell_floors(data)
    allocations(data)


if __name__ == "__main__":
    main()
