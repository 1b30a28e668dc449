"""The same verdicts on any CPU (wave 37, helper repro): a fit's unidentified globals stay at their start, E1.13's
ablation calls an effect inside its own refit noise a tie, and every result records the numeric environment that
decides its last digits."""
import numpy as np
import pandas as pd
import pytest

from steptime.calibration import Constants
from steptime_lab.experiments import gemm as E
from steptime_lab.experiments.gemm import ablation as A
from steptime_lab.experiments.gemm import claims as CL
from steptime_lab.experiments.gemm import folds as F
from steptime_lab.results import environment, numeric_environment, provenance
from ulps import shift_ulps

C = Constants.default()


def _table(gpu):
    p = E.base_params(gpu, C)
    p.update(eta_active=0.8, eta_mem_max=0.85, kernel_floor_us=2.0)
    cells = list(E.DEPLOY_CELLS.values())
    cells += [(m, n, k) for m in (1, 16, 64, 256, 2048) for n in (1024, 4096, 8192) for k in (1024, 8192)]
    m, n, k = (np.array(x, dtype=float) for x in zip(*cells))
    y = E.predict(gpu, m, n, k, p) * (1.0 + 0.05 * np.sin(m + n / 7.0 + k / 3.0))  # not the model's own numbers
    return pd.DataFrame({"gpu": gpu, "m": m.astype(int), "n": n.astype(int), "k": k.astype(int), "latency_ms": y})


# ---------------------------------------------------------------- unidentified globals (E2.1's steptime_home_only)
def test_a_wave_part_reads_none_of_the_persistent_only_globals_bit_for_bit():
    # the ground of the fix: on a wave-launched GPU each of these globals leaves the prediction unchanged, bit for bit
    gpu = "a100-sxm"
    df = _table(gpu)
    readings = E.deploy_readings(df, gpu)
    glob = {nm: F.FIT_GLOBALS[nm][0] for nm in F.FIT_GLOBALS}
    m, n, k = (df[c].to_numpy(float) for c in ("m", "n", "k"))
    base = E.predict(gpu, m, n, k, F.gpu_params(gpu, glob, readings, constants=C))
    names = F.persistent_only_globals(F.FIT_GLOBALS)
    assert set(names) == {"duty_c", "streamk_rel", "cta_stream_us_mb", "mem_t_half_us", "l2_resident_x", "l2_gain"}
    for nm in names:
        moved = dict(glob, **{nm: F.FIT_GLOBALS[nm][2] * 0.7})
        got = E.predict(gpu, m, n, k, F.gpu_params(gpu, moved, readings, constants=C))
        assert np.array_equal(got, base), nm
    # and a persistent part does read them
    h = _table("h100-sxm")
    hm, hn, hk = (h[c].to_numpy(float) for c in ("m", "n", "k"))
    hr = E.deploy_readings(h, "h100-sxm")
    hb = E.predict("h100-sxm", hm, hn, hk, F.gpu_params("h100-sxm", glob, hr, constants=C))
    moved = dict(glob, duty_c=4.0)
    assert not np.array_equal(E.predict("h100-sxm", hm, hn, hk, F.gpu_params("h100-sxm", moved, hr, constants=C)), hb)


def test_a_wave_only_fit_keeps_the_persistent_only_globals_at_their_start():
    # before wave 37 the least-squares step moved them by rounding noise alone (an A100 home-only fit ended at
    # duty_c 3.09 with AVX512 numpy and 0.56 with AVX2, the same cost), and E2.1 carried them to the persistent GPUs
    gpu = "a100-sxm"
    df = _table(gpu)
    readings = {gpu: E.deploy_readings(df, gpu)}
    kw = dict(constants=C, n_per_gpu=40, max_nfev=6)
    a = F.fit_globals(df, [gpu], readings, **kw)
    b = F.fit_globals(shift_ulps(df, 1), [gpu], {gpu: E.deploy_readings(shift_ulps(df, 1), gpu)}, **kw)
    for nm in F.persistent_only_globals(a):
        assert a[nm] == F.FIT_GLOBALS[nm][0] == b[nm], nm
    x0 = {"duty_c": 1.7}
    assert F.fit_globals(df, [gpu], readings, x0=x0, **kw)["duty_c"] == 1.7  # a warm start is carried as given
    # a fit with a persistent part still fits them
    both = pd.concat([df, _table("h100-sxm")], ignore_index=True)
    rd = {g: E.deploy_readings(both, g) for g in (gpu, "h100-sxm")}
    c = F.fit_globals(both, [gpu, "h100-sxm"], rd, constants=C, n_per_gpu=40, max_nfev=6, names=["duty_c"])
    assert c["duty_c"] != F.FIT_GLOBALS["duty_c"][0]


# ---------------------------------------------------------------- E1.13: ties inside the refit's own noise
def test_shift_ulps_moves_every_latency_by_exactly_k_ulps():
    df = pd.DataFrame({"latency_ms": [1.0, 0.37, 12.5]})
    up, down = shift_ulps(df, 2), shift_ulps(df, -1)
    y = df["latency_ms"].to_numpy()
    assert np.array_equal(up["latency_ms"].to_numpy(), np.nextafter(np.nextafter(y, np.inf), np.inf))
    assert np.array_equal(down["latency_ms"].to_numpy(), np.nextafter(y, -np.inf))
    assert np.array_equal(df["latency_ms"].to_numpy(), y)  # the input is left alone
    with pytest.raises(TypeError, match="integer number of ulps"):
        shift_ulps(df, 0.5)


def _ab(base, **effects):
    out = {"all factors": {"mean_llm_mape": base}}
    out.update({k: {"mean_llm_mape": base + d} for k, d in effects.items()})
    return out


def test_an_effect_inside_the_noise_band_is_a_tie_and_beyond_it_a_verdict():
    ab = _ab(0.0760, **{"a": 0.0002, "b": -0.0003, "c": 0.0050, "d": -0.0040})
    ab["fit_noise"] = {"band": 0.0005}
    got = {c["claim"].split(":")[0]: c for c in CL.ablation_claims(ab)}
    assert "met" not in got["without a"] and "tie" in got["without a"]["claim"]
    assert "met" not in got["without b"]  # a small negative effect is no finding either
    assert got["without c"]["met"] is True and got["without c"]["target"] == 0.0005
    assert got["without d"]["met"] is False  # the factor hurts, beyond the noise
    # the verdicts do not move when the numbers move inside the band (what another CPU does to a capped refit)
    ab2 = _ab(0.0762, **{"a": -0.0001, "b": 0.0004, "c": 0.0047, "d": -0.0043})
    ab2["fit_noise"] = {"band": 0.0005}
    got2 = {c["claim"].split(":")[0]: c.get("met") for c in CL.ablation_claims(ab2)}
    assert got2 == {k: c.get("met") for k, c in got.items()}
    # without a noise band the old sign rule (no ties)
    assert [c["met"] for c in CL.ablation_claims(_ab(0.07, a=0.0001, b=-0.0001))] == [True, False]


def test_a_bad_noise_band_is_named():
    ab = _ab(0.07, a=0.01)
    ab["fit_noise"] = {"band": float("nan")}
    with pytest.raises(ValueError, match="fit-noise band"):
        CL.ablation_claims(ab)


# ---------------------------------------------------------------- the numeric environment in every provenance
def test_every_provenance_records_the_numeric_environment(tmp_path):
    env = numeric_environment()
    assert env["cpu_count"] and env["machine"]
    assert "baseline" in env["numpy_simd"] and isinstance(env["numpy_simd"]["dispatched"], list)
    blas = [t for t in env["threadpools"] if t["user_api"] == "blas"]
    assert blas and blas[0]["internal_api"] and blas[0]["num_threads"] >= 1
    f = tmp_path / "x.txt"
    f.write_text("x")
    assert provenance([f])["environment"]["numeric"] == environment()["numeric"]


def test_the_numeric_environment_names_the_overrides(monkeypatch):
    monkeypatch.setenv("OPENBLAS_CORETYPE", "Haswell")
    monkeypatch.delenv("NPY_DISABLE_CPU_FEATURES", raising=False)
    env = numeric_environment()["env"]
    assert env["OPENBLAS_CORETYPE"] == "Haswell" and "NPY_DISABLE_CPU_FEATURES" not in env


def test_the_band_is_the_larger_of_the_seed_spread_and_the_floor(monkeypatch):
    calls = []

    def fake(df, gpus, fixed, constants, seed, n_per_gpu, max_nfev):
        calls.append(seed)
        return {"llm_mape": {}, "mean_llm_mape": 0.0760 + (0.0003 if seed == 12 else 0.0)}

    monkeypatch.setattr(A, "_refit_mean_llm", fake)
    df = pd.DataFrame({"gpu": ["a100-sxm"]})
    ab = A.factor_ablation(df, {}, constants=C, seed=10, noise_seeds=(1, 2), tie_floor=0.0001)
    assert calls[-2:] == [11, 12]  # the replicas: the same refit on the samples of seed + 1, seed + 2
    assert ab["fit_noise"]["spread"] == pytest.approx(0.0003) and ab["fit_noise"]["band"] == pytest.approx(0.0003)
    ab = A.factor_ablation(df, {}, constants=C, seed=10, noise_seeds=(1, 2), tie_floor=0.0025)
    assert ab["fit_noise"]["band"] == 0.0025
    assert "fit_noise" not in A.factor_ablation(df, {}, constants=C, seed=10, noise_seeds=(), tie_floor=0.0)
    with pytest.raises(ValueError, match="tie_floor"):
        A.factor_ablation(df, {}, constants=C, noise_seeds=(), tie_floor=-0.1)


def test_the_config_declares_the_tie_floor_for_both_sizes():
    import yaml
    from pathlib import Path

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    for size in ("fast", "full"):
        assert 0 < cfg["sizes"]["e1_13_ablation"][size]["tie_floor"] < 0.01


# ---------------------------------------------------------------- R2.1: design-choice rows inside their fits' noise
def test_a_design_choice_inside_its_tie_band_is_a_tie_whichever_side_wins():
    from steptime_lab.experiments import design as D

    kw = dict(metric="m", held_out=True, source="s", tie_band=0.0075)
    # the two numeric environments' E1.11 scores (wave 37): shipped 2 worst by 0.68 pp, then best by 0.10 pp
    a = D._row("hopper_cluster_size", 2, {"16": 0.0828566, "2": 0.0896327, "4": 0.0886225}, **kw)
    b = D._row("hopper_cluster_size", 2, {"16": 0.089092, "2": 0.0878917, "4": 0.0889112}, **kw)
    assert a["tie"] and b["tie"] and not a["shipped_is_best"] and b["shipped_is_best"]
    docs = [D.document([r], [], {}, {}, fast=True)["claims"][0] for r in (a, b)]
    assert all("met" not in c and "ties with the best" in c["claim"] for c in docs)
    assert "chosen after seeing" in D.document([a], [], {}, {}, fast=True)["metrics"]["disclosed"]
    far = D._row("attention_llm_weight", "10.0", {"1.0": 0.113, "10.0": 0.101}, **kw)
    assert not far["tie"] and D.document([far], [], {}, {}, fast=True)["claims"][0]["met"] is True
    assert not D._row("x", "a", {"a": 0.1, "b": 0.1}, metric="m", held_out=True, source="s")["tie"]  # no band: no tie
    with pytest.raises(ValueError, match="tie_band"):
        D._row("x", "a", {"a": 0.1}, metric="m", held_out=True, source="s", tie_band=-1.0)


def test_the_config_declares_the_cluster_tie_band_for_both_sizes():
    import yaml
    from pathlib import Path

    cfg = yaml.safe_load((Path(__file__).resolve().parents[1] / "config" / "config.yaml").read_text())
    for size in ("fast", "full"):
        assert 0 < cfg["sizes"]["r2_1_design"][size]["cluster_tie_band"] < 0.05
