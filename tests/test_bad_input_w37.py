"""Wave 37, helper harden5: bad input waves 34-36 left open, the dense kv_budget's layout checks, and a tidy of
precision.apply_rel (DESIGN.md `Bad input, wave 37`). One test per defect; each failed on the code before its fix.
CLI: one line on stderr, exit 2; API: a SteptimeError that is also a ValueError, in one line (tests/refusals.py)."""
import numpy as np
import pytest

from steptime import specs
from steptime.terms import gemm
from steptime.terms import precision as PT
from refusals import clean, refuses


# ---- tidy: apply_rel reads the fp8 memory factor once, bit-identical ------------------------------------------
def test_apply_rel_reads_the_memory_factor_once_and_prices_bit_identically(monkeypatch):
    """SGLang's fp8 GEMM on B200 has own-stream cells (cta_stream_rel): the concurrent limit used to call mem_rel a
    second time on the same t_memory. The result must equal the written-out combination bit for bit."""
    gpu = specs.get_gpu("b200")
    m = np.array([1.0, 2.0, 8.0, 16.0, 64.0, 512.0, 4096.0])
    g = PT.gemm_time_fp8(m, 4096.0, 4096.0, gpu, engine="sglang")
    assert g["own_stream"].any() and not g["own_stream"].all()  # both branches of the np.where are exercised
    rel = PT.fp8_rel(gpu, None, "sglang")
    p = gemm.resolve(gpu, None)
    calls = []
    real = PT.mem_rel
    monkeypatch.setattr(PT, "mem_rel", lambda r, q: calls.append(1) or real(r, q))
    t = PT.apply_rel(g, gpu, None, rel, p)
    assert len(calls) == 1
    # the reference, written out: the same operations in the same order
    r_m, op = real(rel, p), float(p["overlap_p"])
    dk, dk_add = float(p["duty_k"]), rel.get("duty_k_add")
    t_c = g["t_compute"] if dk_add is None else g["t_compute"] * (1.0 + (dk + dk_add) / g["k_cta"]) / (
        1.0 + dk / g["k_cta"])
    t_mem = np.where(g["own_stream"], gemm.smax(g["t_memory"] / r_m, g["t_cta"] * rel["cta_stream_rel"], op),
                     g["t_memory"] / r_m + g["t_cta"])
    ref = gemm.smax(t_c / rel["eta_c_rel"], t_mem, op)
    if rel.get("oob_rate_tbs") is not None and g.get("oob_bytes") is not None:
        ref = ref + PT.oob_time(g, gpu, rel["oob_rate_tbs"])
    ref = ref + g["t_floor"] + rel["floor_add_us"] * 1e-6
    assert np.array_equal(t, ref)
