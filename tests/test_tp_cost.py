"""E1.28's per-GPU efficiency and its attribution to term kinds, on synthetic cells built here."""
import pandas as pd
import pytest

from steptime_lab.experiments import tp_cost as T
from steptime_lab.experiments.wallclock import KINDS
from steptime.calibration import Constants


def _cells(scale_comm: float):
    rows = []
    for comp in (1, 2, 3):
        for tp in (1, 2, 4):
            gemm = 8.0 * comp / tp            # ideal split
            comm = 0.0 if tp == 1 else scale_comm * tp  # grows with TP
            host = 1.0                        # replicated
            kinds = {f"{k}_ms": 0.0 for k in KINDS}
            kinds.update(gemm_ms=gemm, comm_ms=comm, host_ms=host)
            pred = gemm + comm + host
            rows.append({"dataset": "d", "gpu": "g", "model": "m", "engine": "e", "tp": tp, "comp": comp,
                         "meas_ms": pred * 1.1 if tp > 1 else pred, "pred_ms": pred, **kinds})
    return pd.DataFrame(rows)


def test_efficiency_is_t1_over_tp_times_t_and_names_the_term_that_grows():
    r = T.efficiency(_cells(0.5), ["dataset", "gpu", "model", "engine"], ["comp"])
    assert [x["tp"] for x in r] == [2, 4]
    x = r[0]
    # comp 2 is the median: t(1) = 17, t(2) = 8 + 1 + 1 = 10 predicted, 11 measured
    assert x["efficiency_predicted"] == pytest.approx(17 / 20)
    assert x["efficiency_measured"] == pytest.approx(17 / 22)
    assert x["efficiency_error"] == pytest.approx((17 / 20) / (17 / 22) - 1)
    # added per-GPU time 2 x 10 - 17 = 3: comm 2 x 1 = 2, host 2 x 1 - 1 = 1, gemm 0
    assert x["added_share_by_kind"]["comm"] == pytest.approx(2 / 3)
    assert x["added_share_by_kind"]["gemm"] == pytest.approx(0.0, abs=1e-12)
    assert x["loss_term"] == "comm"
    r0 = T.efficiency(_cells(0.0), ["dataset", "gpu", "model", "engine"], ["comp"])
    assert r0[0]["loss_term"] == "host"  # no all-reduce: the replicated host is what TP adds


def test_document_scores_each_tp_against_the_registry_target():
    r = {"rows": T.efficiency(_cells(0.5), ["dataset", "gpu", "model", "engine"], ["comp"]), "skipped": []}
    doc = T.document(r, {"efficiency_error": 0.08})
    assert len(doc["claims"]) == 2
    for c in doc["claims"]:
        assert c["value"] >= 0 and c["met"] == (c["value"] <= 0.08)
    from steptime.errors import SteptimeError

    with pytest.raises(SteptimeError):
        T.document(r, {})


def test_rank_overhead_recovers_a_per_rank_cost_held_out_by_tp():
    """Issue 19 item 3: a small step that costs the shipped profile plus 0.1 ms per extra rank gives b = 0.1 ms
    under the per-rank law, also at each held-out TP, and is flagged identifiable; a cost that falls with TP is not."""
    from steptime_lab.experiments.wallclock import make_predictor, predict_table

    rows = []
    for tp in (1, 2, 4, 8):
        for n in (1, 2, 4):
            rows.append(dict(gpu="h100-sxm", engine="vllm", model="llama-3.1-8b", tp=tp, phase="decode",
                             segment="sweep", ctx_tokens=0, ctx_requests=0, ctx_kv_tokens=0, decode_requests=n,
                             mean_decode_kv_tokens=1024.0))
    s = pd.DataFrame(rows)
    base = predict_table(s, make_predictor("vllm", "llama-3.1-8b", "h100-sxm", engine="vllm", constants=Constants.default()))["pred_ms"]
    up = s.assign(latency_ms=base + 0.1 * (s["tp"] - 1))
    r = T.rank_overhead(up, constants=Constants.default())[0]
    per = r["laws"]["per_rank"]
    assert per["b_ms_all"] == pytest.approx(0.1)
    assert all(x["error_ms"] == pytest.approx(0.0, abs=1e-9) for x in per["loo"])
    assert r["identifiable"]  # every law positive here
    down = s.assign(latency_ms=base - 0.1 * (s["tp"] - 1))
    assert T.rank_overhead(down, constants=Constants.default())[0]["identifiable"] is False


def test_efficiency_beyond_the_lowest_tp_above_one():
    """Issue 19 (sgltp): base_tp='lowest' reads b t(b) / (TP t(TP)) from the group's lowest TP > 1 (here 2),
    free of the TP 1 cells; base_tp=1 is E1.28's claimed efficiency, unchanged."""
    c = _cells(0.5)
    r = T.efficiency(c[c["tp"] > 1], ["dataset", "gpu", "model", "engine"], ["comp"], base_tp="lowest")
    assert [(x["base_tp"], x["tp"]) for x in r] == [(2, 4)]
    # comp 2: t(2) = 8 + 1 + 1 = 10, t(4) = 4 + 2 + 1 = 7 predicted; measured 1.1 x both
    assert r[0]["efficiency_predicted"] == pytest.approx(2 * 10 / (4 * 7))
    assert r[0]["efficiency_error"] == pytest.approx(0.0, abs=1e-12)
    # added per-GPU time 4 x 7 - 2 x 10 = 8: comm 4 x 2 - 2 x 1 = 6, host 4 - 2 = 2, gemm 0
    assert r[0]["added_share_by_kind"]["comm"] == pytest.approx(6 / 8)
    assert "base_tp" not in T.efficiency(c, ["dataset", "gpu", "model", "engine"], ["comp"])[0]


def test_held_batch_inverts_the_wave_schedule_and_keeps_unqueued_rows():
    """A row whose TTFT is the wave schedule's mean wait at k = 3 of 16 clients (OSL x TPOT per wave) gives 3;
    a row whose TTFT is below OSL x TPOT (not queued) keeps the concurrency."""
    import numpy as np

    osl, tpot = 128.0, 25.0
    wait = np.mean(np.arange(16) // 3) * osl * tpot
    k = T.held_batch([wait, 0.5 * osl * tpot], [tpot, tpot], [osl, osl], [16, 16])
    assert list(k) == [3.0, 16.0]
    assert T.held_batch([1e9], [tpot], [osl], [16])[0] == 1.0  # everything queued: one at a time


def test_claim_names_releases_and_queued_cells_where_the_tps_are_not_the_same_run():
    c = _cells(0.5)
    c["release"] = c["tp"].map({1: "0.5.8", 2: "0.5.1", 4: "0.5.1"})
    c["queued"] = c["tp"] == 1
    r = {"rows": T.efficiency(c, ["dataset", "gpu", "model", "engine"], ["comp"]), "skipped": []}
    assert r["rows"][0]["releases"] == {"base": ["0.5.8"], "tp": ["0.5.1"]}
    assert r["rows"][0]["queued_cells"] == {"base": 3, "tp": 0}
    text = T.document(r, {"efficiency_error": 0.08})["claims"][0]["claim"]
    assert "TP 1 measured on release 0.5.8, TP 2 on 0.5.1" in text and "3 of 3 at TP 1" in text
    same = _cells(0.5).assign(release="x", queued=False)
    plain = T.document({"rows": T.efficiency(same, ["dataset", "gpu", "model", "engine"], ["comp"]), "skipped": []},
                       {"efficiency_error": 0.08})["claims"][0]["claim"]
    assert "not the same engine run" not in plain


def _silicon_rows(ttft_queued: bool = True):
    """Synthetic silicon TPOT rows (the columns W.tpot_table gives): one SGLang Qwen3-32B configuration at TP 1
    and TP 2, 16 clients; TP 1's TTFT says the engine held 3 of them (the wave schedule's mean wait at k = 3)."""
    import numpy as np

    osl, tpot = 128.0, 25.0
    wait = float(np.mean(np.arange(16) // 3) * osl * tpot)
    base = dict(dataset="aic-silicon", mode="agg", gpu="h100-sxm", model="qwen3-32b", engine="sglang", dtype="bf16",
                batch=16.0, prompt_tokens=1024.0, output_tokens=osl)
    return pd.DataFrame([{**base, "tp": 1, "tpot_ms": tpot, "ttft_ms": wait if ttft_queued else 100.0, "source_id": "a"},
                         {**base, "tp": 2, "tpot_ms": 16.0, "ttft_ms": 800.0, "source_id": "b"}])


MIXED = {"chunked": ["sglang"], "token_budget": 8192}


def test_silicon_cells_price_the_tpot_as_e2_11_does_at_the_held_batch():
    """Helper sglang: with E2.11's mixed settings a cell's prediction is predict_tpot's (the decode step plus the
    prefill the TPOT carries, kind `prefill`), at the batch the engine held (3 at the queued TP 1, 16 at TP 2)."""
    import numpy as np
    from steptime_lab.experiments.wallclock import make_predictor
    from steptime_lab.experiments.wallclock.tokens import predict_tpot, schedule_args

    rows = _silicon_rows()
    c, skipped = T.silicon_cells(rows, constants=Constants.default(), mixed=MIXED, batch="held")
    assert not skipped and list(c["tp"]) == [1, 2]
    assert set(c["predicted_as"]) == {"tpot_at_held"}
    kinds = [f"{k}_ms" for k in T.CELL_KINDS]
    assert np.allclose(c[kinds].sum(axis=1), c["pred_ms"])  # the kinds (prefill included) sum to the prediction
    for tp, k in ((1, 3.0), (2, 16.0)):
        d = rows[rows["tp"] == tp]
        f = make_predictor("sglang", "qwen3-32b", "h100-sxm", engine="sglang", constants=Constants.default())
        want = predict_tpot(d.assign(batch=k), f, tp=tp, variant="mixed", chunked=True, token_budget=8192,
                            **schedule_args("sglang", d))
        got = c[c["tp"] == tp].iloc[0]
        assert got["pred_ms"] == pytest.approx(want["pred_ms"][0])
        assert got["prefill_ms"] == pytest.approx(want["pred_ms"][0] - want["decode_ms"][0])
    # TP 2's wave of 16 x 1024 prompt tokens spans two 8192-token prefill steps: its TPOT carries a wait
    assert c[c["tp"] == 2]["prefill_ms"].iloc[0] > 0
    # one decode step at the concurrency (the old claims' form) has no prefill kind and prices 16 at TP 1
    d0, _ = T.silicon_cells(rows, constants=Constants.default())
    assert "prefill_ms" not in d0 and set(d0["predicted_as"]) == {"decode_at_concurrency"}
    assert d0[d0["tp"] == 1]["pred_ms"].iloc[0] > c[c["tp"] == 1]["pred_ms"].iloc[0] - c[c["tp"] == 1]["prefill_ms"].iloc[0]


def test_silicon_cells_refuse_bad_forms():
    from steptime.errors import SteptimeError

    rows = _silicon_rows()
    with pytest.raises(SteptimeError, match="batch must be one of"):
        T.silicon_cells(rows, constants=Constants.default(), batch="measured")
    with pytest.raises(SteptimeError, match="batch must be one of"):
        T.silicon_cells(rows, constants=Constants.default(), held=True, batch="kv_capacity")
    with pytest.raises(SteptimeError, match="no ttft_ms"):
        T.silicon_cells(rows.drop(columns="ttft_ms"), constants=Constants.default(), batch="held")
    with pytest.raises(SteptimeError, match="token_budget"):
        T.silicon_cells(rows, constants=Constants.default(), mixed={"chunked": ["sglang"]})


def test_run_claims_the_tpot_form_given_mixed_settings_and_reports_every_form():
    rows = _silicon_rows()
    r = T.run(silicon_rows=rows, constants=Constants.default(), mixed=MIXED, claim_form="tpot_at_held")
    assert [x["predicted_as"] for x in r["rows"]] == ["tpot_at_held"]
    assert "prefill" in r["rows"][0]["added_share_by_kind"]
    assert set(r["silicon_forms"]) == set(T.SILICON_FORMS)
    assert r["silicon_forms"]["tpot_at_held"][0]["efficiency_error"] == pytest.approx(r["rows"][0]["efficiency_error"])
    text = T.document(r, {"efficiency_error": 0.08})["claims"][0]["claim"]
    assert "predicted as E2.11's mixed TPOT at the batch the engine held" in text
    old = T.run(silicon_rows=rows, constants=Constants.default())  # the default form: the decode step at c
    assert [x["predicted_as"] for x in old["rows"]] == ["decode_at_concurrency"]
    assert set(old["silicon_forms"]) == {"decode_at_concurrency", "decode_at_held"}
    assert "predicted as" not in T.document(old, {"efficiency_error": 0.08})["claims"][0]["claim"]
    # an unqueued TP 1 row keeps the concurrency: held and concurrency forms agree there
    u = T.run(silicon_rows=_silicon_rows(ttft_queued=False), constants=Constants.default(), mixed=MIXED,
              claim_form="tpot_at_held")
    assert u["silicon_forms"]["decode_at_held"][0]["efficiency_predicted"] == pytest.approx(
        u["silicon_forms"]["decode_at_concurrency"][0]["efficiency_predicted"])


def test_run_refuses_an_unknown_or_unpriceable_claim_form():
    from steptime.errors import SteptimeError

    rows = _silicon_rows()
    with pytest.raises(SteptimeError, match="unknown silicon claim form"):
        T.run(silicon_rows=rows, constants=Constants.default(), mixed=MIXED, claim_form="tpot_at_measured")
    with pytest.raises(SteptimeError, match="needs E2.11 mixed settings"):
        T.run(silicon_rows=rows, constants=Constants.default(), claim_form="tpot_at_kv_capacity")
    with pytest.raises(SteptimeError, match="needs rows with ttft_ms"):
        T.run(silicon_rows=rows.drop(columns="ttft_ms"), constants=Constants.default(), mixed=MIXED,
              claim_form="decode_at_held")
