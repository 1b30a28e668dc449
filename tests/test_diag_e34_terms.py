"""workflow/scripts/diag_e34_terms.py (issue 20, wave 42, silmoe): E3.4's term knock-out and the patch helper it shares
with diag_moe_engine_kernels.py. Diagnostics only (no rule), checked on a few of E3.4's committed token rows."""
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow/scripts"))

import diag_e34_terms as T  # noqa: E402
import diag_moe_engine_kernels as D  # noqa: E402


@pytest.fixture(scope="module")
def rows():
    import os

    here = os.getcwd()
    os.chdir(ROOT)  # the diag scripts read results/ and config/ relative to the checkout
    try:
        r, s = D.e34_rows("trtllm")
        yield r.head(12), s
    finally:
        os.chdir(here)


@pytest.fixture(autouse=True)
def _at_root(monkeypatch):
    monkeypatch.chdir(ROOT)


def test_e34_rows_all_engines_is_the_union():
    every, _ = D.e34_rows()
    one, _ = D.e34_rows("trtllm")
    assert len(one) and len(every) > len(one)
    assert set(every["engine"]) > {"trtllm"}


def test_patch_is_restored_after_an_error(rows):
    import steptime_lab.experiments.wallclock.steps as S

    orig = S.predict_steps

    def wrap(_):
        def boom(*a, **k):
            raise RuntimeError("probe")
        return boom

    with pytest.raises(RuntimeError, match="probe"):
        D.e34_predict_patched(rows[0], rows[1], S, "predict_steps", wrap)
    assert S.predict_steps is orig


def test_knock_out_matches_the_kernel_factor_probe(rows):
    """Zeroing the moe_experts term in every step equals the expert kernel's time x 0 (the older probe's route)."""
    r, s = rows
    base = T.predict(r, s)
    assert np.allclose(base["pred_ms"], D.e34_predict(r, s, lambda *k: None)["pred_ms"])
    off = T.predict(r, s, ("moe_experts",))
    assert np.allclose(off["pred_ms"], D.e34_predict(r, s, lambda *k: 0.0)["pred_ms"])
    assert (off["pred_ms"].to_numpy() < base["pred_ms"].to_numpy()).all()
