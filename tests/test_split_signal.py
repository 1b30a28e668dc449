"""E1.26's split-KV signal (issue 19 item 1, wave 37, helper tsplit): does the served decode pay the per-split cost the
per-operator tables price? `wallclock.split_kv_signal` reads the slope in KV length of the residual without any
per-split cost, beside the priced one, at one decode request (DESIGN: a real vLLM engine step and TRT-LLM-gen's
per-split cost)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime.specs import get_gpu
from steptime.terms import attention as A
from steptime_lab.experiments import wallclock as W

ROOT = Path(__file__).resolve().parents[1]


def _one_request_decodes(paid: float, tps=(8,), span=(1000.0, 10000.0), n=40, extra_requests=True):
    """Decode steps of one request over a KV span at each TP; the prediction without splits is 5 ms + 1 us per 1k
    tokens (the KV read), the priced split cost 27.8 us per 1k tokens, and the measured step pays `paid` of it."""
    rows = []
    for tp in tps:
        for kv in np.linspace(*span, n):
            rows.append(dict(tp=tp, decode_requests=1, mean_decode_kv_tokens=kv))
        if extra_requests:  # a 4-request step: not read (its mean KV length is not every request's)
            rows += [dict(tp=tp, decode_requests=4, mean_decode_kv_tokens=kv) for kv in np.linspace(*span, n)]
    s = pd.DataFrame(rows)
    s["gpu"], s["model"], s["engine"], s["phase"], s["segment"] = "b300", "qwen3-32b", "vllm", "decode", "real"
    s["step"] = np.arange(len(s))
    s["ctx_tokens"] = s["ctx_requests"] = s["ctx_kv_tokens"] = 0
    base = 5.0 + 1e-3 * s["mean_decode_kv_tokens"] / 1000.0
    split = 27.8e-3 * s["mean_decode_kv_tokens"] / 1000.0
    s["latency_ms"] = base + paid * split + np.where(s["step"] % 2 == 0, 0.01, -0.01)  # a little noise
    kinds = {f"{k}_ms": 0.0 for k in W.KINDS}
    return s, pd.DataFrame({"pred_ms": base + split, **kinds}, index=s.index), pd.DataFrame({"pred_ms": base, **kinds},
                                                                                             index=s.index)


def test_split_signal_reads_the_paid_split_slope_at_one_request():
    """A step that pays the priced splits reads the priced slope; one that pays none reads 0; 4-request rows and a TP
    whose KV span is too narrow are not read."""
    s, on, off = _one_request_decodes(paid=1.0)
    out = W.split_kv_signal(s, on, off)
    assert [(e["tp"], e["decode_requests"]) for e in out] == [(8, 1)]
    e = out[0]
    assert e["priced_split_us_per_1k"] == pytest.approx(27.8)
    assert e["measured_excess_us_per_1k"] == pytest.approx(27.8, abs=3 * e["measured_excess_se_us_per_1k"] + 0.5)
    assert e["steps"] == 40 and e["kv_p05"] < 2000 < 9000 < e["kv_p95"]
    e0 = W.split_kv_signal(*_one_request_decodes(paid=0.0))[0]
    assert abs(e0["measured_excess_us_per_1k"]) < 1.0 and e0["priced_split_us_per_1k"] == pytest.approx(27.8)
    narrow = W.split_kv_signal(*_one_request_decodes(paid=1.0, span=(4000.0, 4500.0)))
    assert narrow == []


def test_split_signal_refuses_bad_input():
    s, on, off = _one_request_decodes(paid=1.0)
    with pytest.raises(W.WallclockError, match="aligned"):
        W.split_kv_signal(s, on.iloc[1:], off)
    with pytest.raises(W.WallclockError, match="aligned"):
        W.split_kv_signal(s, on, off.drop(columns=["pred_ms"]))
    with pytest.raises(W.WallclockError, match="below pred_nosplit"):
        W.split_kv_signal(s, off, on)
    two = pd.concat([s, s.assign(gpu="b200", step=s["step"] + 10_000)], ignore_index=True)
    with pytest.raises(W.WallclockError, match="one \\(gpu, engine\\)"):
        W.split_kv_signal(two, pd.concat([on, on], ignore_index=True), pd.concat([off, off], ignore_index=True))


def test_without_split_cost_zeroes_every_lanes_per_split_cost():
    """The comparison prediction carries no per-split cost on any lane; the shipped TRT-LLM-gen lane does carry one."""
    c = Constants.default()
    b300 = get_gpu("b300")
    assert A.attention_constants(b300, c)["attn_split_us"] > 0  # the shipped trtllm lane prices its splits
    z = W.without_split_cost(c)
    assert all(v.get("attn_split_us", 0.0) == 0.0 for v in z.get("attn_lane_factors").values())
    assert A.attention_constants(b300, z)["attn_split_us"] == 0.0
    assert A.attention_constants(get_gpu("l40s"), z)["attn_split_us"] == 0.0


def test_e1_26_records_the_split_signal_of_its_one_request_decodes():
    """The committed E1.26 carries the signal (fails on the wave-36 result, which has none): at TP 8 one request over
    4-11k tokens the measured excess follows the priced per-split slope (DESIGN, wave 37 tsplit)."""
    doc = json.loads((ROOT / "results" / "E1_26.json").read_text())
    sig = doc["metrics"]["vllm@b300"]["split_signal"]
    assert "per-split cost" in sig["note"]
    tp8 = [e for e in sig["by_tp"] if e["tp"] == 8 and e["decode_requests"] == 1]
    assert len(tp8) == 1 and tp8[0]["steps"] >= 30 and tp8[0]["kv_p95"] - tp8[0]["kv_p05"] >= 1500
    e = tp8[0]
    assert abs(e["measured_excess_us_per_1k"] - e["priced_split_us_per_1k"]) < 3 * e["measured_excess_se_us_per_1k"]
