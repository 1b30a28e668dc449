"""Part-2 serving integrations (simulated): E2.9 chunk sizing."""

import numpy as np
import pandas as pd
import pytest

from steptime.experiments import serving
from steptime.serve import StepTimer

GRID = [128, 256, 512, 1024, 2048]


@pytest.fixture(scope="module")
def timer():
    return StepTimer("llama-3.1-8b", "h100-sxm")


def test_pick_chunk_honours_the_predicted_slo_and_tightens_with_it(timer):
    picks = []
    for slo in (0.012, 0.02, 0.04, 1.0):
        pk = serving.pick_chunk(timer, 32, 1000, 200, slo, GRID)
        row = pk["table"].set_index("chunk").loc[pk["chunk"]]
        assert row["t_mix_s"] <= slo or not pk["table"]["meets"].any()
        picks.append(pk["chunk"])
    assert picks == sorted(picks) and picks[0] < picks[-1]


def test_pick_chunk_predicted_mixed_step_grows_with_chunk(timer):
    t = serving.pick_chunk(timer, 32, 1000, 200, 1.0, GRID)["table"]["t_mix_s"].to_numpy()
    assert np.all(np.diff(t) > 0)


def _traces(n=400, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"trace": "splitwise_conv", "request_id": np.arange(n), "arrived_at_s": np.arange(n) * 0.1,
                         "num_prefill_tokens": rng.integers(64, 2048, n),
                         "num_decode_tokens": rng.integers(16, 300, n)})


def test_e2_9_document_scores_every_choice_in_the_simulator():
    r = serving.e2_9(_traces(), models=["llama-3.1-8b"], gpus=["h100-sxm"], trace="splitwise_conv", n=200,
                     concurrency=16, grid=GRID, slo_multiples=[2, 5], targets={"pick_meets_slo_fraction": 1.0,
                                                                                "pick_vs_oracle_min": 0.95})
    df = r["cases"]
    assert len(df) == 2 and set(df["pick"]) <= set(GRID)
    # the oracle is the highest-throughput chunk of the sweep that meets the SLO
    sw = r["sweeps"]["llama-3.1-8b|h100-sxm"]
    for row in df.itertuples():
        ok = sw[sw["tbt_p99_s"] <= row.slo_tbt_s]
        assert row.oracle == ok.loc[ok["throughput_tok_s"].idxmax(), "chunk"]
        assert row.pick_tok_s <= row.oracle_tok_s + 1e-9 or not row.pick_meets
    doc = serving.e2_9_document(r)
    assert doc["metrics"]["label"].startswith("simulated")
    assert all("met" in c for c in doc["claims"][:2])
    # a larger chunk never lowers the simulated p99 time between tokens
    assert np.all(np.diff(sw["tbt_p99_s"]) > -1e-9)
