"""Engine profiles as data (specs/engines.yaml), the TP sharding table, precision, the CLI."""
import json

import numpy as np
import pytest

from steptime.cli import main
from steptime.errors import InputError, MemoryFitError, UnknownEngineError, UnsupportedError
from steptime.specs import get_gpu
from steptime.specs import engines as E

from engine_edits import without_values
from steptime.step import TERMS, predict_step, predict_steps

GPU = "h100-sxm"
MODEL = "llama-3.1-8b"


def test_profiles_load_with_provenance_and_one_default():
    names = E.engine_names()
    assert {"vllm", "vllm-v0", "trtllm", "sglang", "kernels"} <= set(names)
    assert E.default_engine() == "vllm"
    for e in E.engine_table().values():
        for v in e.values.values():
            assert v.provenance in E.PROVENANCES and v.source
    assert E.get_engine().key == "vllm"


def test_unknown_engine_lists_the_known_ones():
    with pytest.raises(UnknownEngineError) as ei:
        E.get_engine("vllm-v2")
    assert all(n in str(ei.value) for n in E.engine_names())


def test_vllm_v0_reads_the_host_constants_of_defaults_yaml():
    from steptime.calibration import Constants

    g = get_gpu("a100-sxm")
    c = Constants.default()
    v0 = E.get_engine("vllm-v0")
    assert v0.get("sched_a_ms", g, c) == pytest.approx(float(c.get("host_a_ms", g)))
    held = c.with_overrides({"host_a_ms": 9.0}, scope="gpu.a100-sxm")
    assert v0.get("sched_a_ms", g, held) == 9.0  # a fold reaches the engine through its constants


def test_fitted_override_applies_to_its_gpu_only(tmp_path):
    from steptime.calibration import seal_text  # a fitted file is sealed (wave 42: get_engine checks the seal)

    f = tmp_path / "engine_constants.yaml"
    f.write_text(seal_text("engines:\n  vllm:\n    b300:\n      sched_a_ms: {value: 1.5, provenance: FITTED, "
                           "source: test, cells: [[b300, fpm, 1]]}\n"))
    e = E.get_engine("vllm", fitted=f)
    assert e.get("sched_a_ms", get_gpu("b300")) == 1.5
    assert e.get("sched_a_ms", get_gpu("h100-sxm")) == E.get_engine("vllm").get("sched_a_ms")
    assert e.lookup("sched_a_ms", get_gpu("b300")).cells == (("b300", "fpm", 1),)
    e2 = E.get_engine("vllm").with_fitted("h100-sxm", {"overlap": 0.5}, source="x", cells=[("h100-sxm", 1)])
    assert e2.get("overlap", get_gpu("h100-sxm")) == 0.5 and e2.get("overlap", get_gpu("b200")) == 1.0
    with pytest.raises(ValueError, match="no field"):
        E.get_engine("vllm").with_fitted("h100-sxm", {"warp_speed": 1.0}, source="x")
    f.write_text(seal_text("engines:\n  vllm:\n    b300:\n      warp_speed: {value: 1, provenance: FITTED, source: t}\n"))
    with pytest.raises(ValueError, match="unknown field"):
        E.get_engine("vllm", fitted=f)


def test_kernels_engine_is_the_bare_gpu_sum():
    r = predict_step(MODEL, GPU, decode=[(16, 1024)], engine="kernels")
    assert r.terms_ms["host"] == r.terms_ms["sampling"] == r.terms_ms["dispatch_floor"] == 0.0
    body = sum(r.terms_ms[t] for t in TERMS if t not in ("host", "sampling", "dispatch_floor"))
    assert r.total_ms == pytest.approx(body)
    assert r.engine == "kernels" and r.to_dict()["engine"] == "kernels"


def test_engine_changes_only_host_launch_sampling_collectives_and_its_light_kernels():
    # ... and, through engines.yaml light.floor_law, the launch floor of its one-CTA-per-row light kernels, and through
    # fusion.add_rmsnorm, the residual add run inside the RMSNorm kernel (one launch, never more than the two)
    from steptime.calibration import Constants
    from steptime.terms.light import ROW_KERNELS
    SM_RATE = Constants.default().get("light_sm_rate")["kernels"]
    a = predict_step(MODEL, GPU, decode=[(16, 1024)], engine="kernels")
    for name in ("vllm", "vllm-v0", "trtllm", "sglang"):
        b = predict_step(MODEL, GPU, decode=[(16, 1024)], engine=name)
        eng = E.get_engine(name)
        same_law = eng.light_floor_law() == E.get_engine("kernels").light_floor_law()
        assert eng.fuses_add_rmsnorm()
        assert b.terms_ms["add"] == 0.0 < a.terms_ms["add"]
        if same_law:  # the same floors: the one fused launch is cheaper than the two it replaces
            assert b.terms_ms["rmsnorm"] < a.terms_ms["rmsnorm"] + a.terms_ms["add"]
        for t in TERMS:
            if t in ("rmsnorm", "add"):
                continue
            # ... and, under the flat law only, the SM-rate law of the kernels the shipped light_sm_rate lists (emb)
            if t in ROW_KERNELS + ("qk_norm",) + tuple(SM_RATE) and not same_law:
                assert b.terms_ms[t] != a.terms_ms[t] or b.terms_ms[t] == 0.0, (name, t)
                continue
            if t not in ("host", "sampling", "dispatch_floor", "allreduce"):
                assert b.terms_ms[t] == a.terms_ms[t], (name, t)
        assert all(b.terms_ms[t] >= 0.0 for t in ("host", "sampling", "dispatch_floor"))
        assert sum(b.terms_ms.values()) == pytest.approx(b.total_ms)


def test_async_overlap_hides_host_under_a_long_gpu_step_but_not_a_short_one():
    from steptime.terms.host import exposed_host

    exp, hid = exposed_host(np.array([1e-3, 1e-3]), np.array([5e-3, 0.2e-3]), 1.0)
    assert exp[0] == 0 and hid[0] == pytest.approx(1e-3)
    assert exp[1] == pytest.approx(0.8e-3)
    exp, hid = exposed_host(np.array([1e-3]), np.array([5e-3]), 0.0)
    assert exp[0] == pytest.approx(1e-3) and hid[0] == 0
    with pytest.raises(ValueError):
        exposed_host(1e-3, 1e-3, 1.5)
    v1 = predict_step(MODEL, GPU, decode=[(64, 2048)], engine="vllm")
    v0 = predict_step(MODEL, GPU, decode=[(64, 2048)], engine="vllm-v0")
    assert v1.terms_ms["host"] == 0.0 and v1.hidden_ms["host"] > 0
    assert v0.terms_ms["host"] > 0 and v0.hidden_ms["host"] == 0


def test_cuda_graphs_lower_the_launch_floor_and_large_steps_run_eager():
    from steptime.terms.host import engine_dispatch_floor

    g = get_gpu(GPU)
    v1, v0, k = (E.get_engine(n) for n in ("vllm", "vllm-v0", "kernels"))
    T = np.array([8.0, 8.0, 4096.0])
    dec = np.array([True, False, False])
    f1 = engine_dispatch_floor(32, T, dec, g, v1)
    f0 = engine_dispatch_floor(32, T, dec, g, v0)
    assert f1[0] < f1[1] < f1[2]         # full graph < piecewise < eager (above the capture size)
    assert f0[1] == f0[2] > f0[0]        # V0: prefill eager, decode in a graph
    assert np.all(engine_dispatch_floor(32, T, dec, g, k) == 0)


def test_tp_sharding_table_is_what_the_step_does():
    sh = E.tp_sharding()
    kw = dict(prefill=[(1, 1024)], decode=[(8, 2048)], engine="kernels", check_memory=False)
    one = predict_step("llama-3-70b", GPU, tp=1, **kw)
    two = predict_step("llama-3-70b", GPU, tp=2, **kw)
    for term, e in sh.items():
        if term not in one.terms_ms:
            continue
        if e["split"] == "replicated":
            assert two.terms_ms[term] == pytest.approx(one.terms_ms[term]), term
        else:
            assert two.terms_ms[term] < one.terms_ms[term], term
    assert E.allreduces_per_layer() == 2
    assert one.terms_ms["allreduce"] == 0 and two.terms_ms["allreduce"] > 0
    from steptime.specs import get_model
    from steptime.step import layer_shapes

    m = get_model("llama-3-70b")
    full, half = layer_shapes(m, 1), layer_shapes(m, 2)
    for name, (n, k) in full.items():
        how = sh[name]["split"]
        assert half[name] == ((n // 2, k) if how == "split_n" else (n, k // 2))


def test_custom_allreduce_hands_large_messages_to_the_fallback():
    from steptime.calibration import Constants
    from steptime.terms import comm

    g = get_gpu(GPU)
    e = E.get_engine("vllm")
    c = Constants.default()
    assert e.allreduce_for(1e6) == "custom" and e.allreduce_for(1e9) == "nccl"
    x = np.array([1e5, 1e9])
    t = comm.engine_allreduce_time(x, 4, g, e, c)
    assert t[1] == pytest.approx(comm.allreduce_time(1e9, 4, g, c, "nccl"))
    assert np.all(comm.engine_allreduce_time(x, 1, g, e, c) == 0)
    with pytest.raises(ValueError, match="implementation"):
        comm.allreduce_time(x, 2, g, c, "carrier-pigeon")


def test_a_message_of_exactly_max_bytes_runs_the_fallback():
    """vLLM's and SGLang's should_custom_ar take the custom kernel only below max_size (E1.25's tables agree: their
    8 MiB rows are NCCL's), so a message of exactly max_bytes is the fallback's, in both the engine's pick and the
    price on an architecture without a per-TP table (A100). Fails on the old `>` rule."""
    from steptime.calibration import Constants
    from steptime.terms import comm

    c, a100 = Constants.default(), get_gpu("a100-sxm")
    for name in ("vllm", "sglang"):
        e = E.get_engine(name)
        mb = float(e.get("max_bytes"))
        assert e.allreduce_for(mb - 1) == "custom" and e.allreduce_for(mb) == e.allreduce_fallback
        assert not e.allreduce_limits(a100, 4)
        t = comm.engine_allreduce_time(np.array([mb - 1, mb]), 4, a100, e, c)
        assert t[0] == pytest.approx(comm.allreduce_time(mb - 1, 4, a100, c, "custom"))
        assert t[1] == pytest.approx(comm.allreduce_time(mb, 4, a100, c, e.allreduce_fallback))


def test_fp8_projections_are_faster_when_compute_bound_and_refused_on_a100():
    from steptime.calibration import Constants
    from steptime.terms.precision import IDENTITY

    datasheet = Constants.default().with_overrides({"gemm_fp8_rel": IDENTITY}, scope=f"gpu.{GPU}")
    bf = predict_step(MODEL, GPU, prefill=[(1, 8192)], engine="kernels")
    f8 = predict_step(MODEL, GPU, prefill=[(1, 8192)], engine="kernels", dtype="fp8", constants=datasheet)
    shipped = predict_step(MODEL, GPU, prefill=[(1, 8192)], engine="kernels", dtype="fp8")
    for t in ("qkv_proj", "o_proj", "gate_up_proj", "down_proj"):
        assert f8.terms_ms[t] < 0.75 * bf.terms_ms[t]  # the datasheet fp8 peak doubles the compute branch
        assert f8.terms_ms[t] <= shipped.terms_ms[t] < bf.terms_ms[t]  # E1.27: measured fp8 reaches less of it
    g = get_gpu(GPU)
    flops = 2 * 8192 * 4096 * 14336 * 2 * 32
    assert f8.terms_ms["gate_up_proj"] * 1e-3 >= flops / (g.fp8_dense_tflops * 1e12)  # never beats the fp8 peak
    assert f8.terms_ms["attn_prefill"] == bf.terms_ms["attn_prefill"]  # attention stays bf16 unless --kv-dtype
    with pytest.raises(UnsupportedError, match="fp8"):
        predict_step(MODEL, "a100-sxm", decode=[(1, 16)], dtype="fp8")
    with pytest.raises(UnsupportedError):
        predict_steps(MODEL, "a100-sxm", [0], [1], [16], dtype="fp8")
    with pytest.raises(UnsupportedError, match="unknown dtype"):
        predict_step(MODEL, GPU, decode=[(1, 16)], dtype="int3")
    # one dtype check for both APIs: fp16 projections are not modelled by either
    for call in (lambda: predict_step(MODEL, GPU, decode=[(1, 16)], dtype="fp16"),
                 lambda: predict_steps(MODEL, GPU, [0], [1], [16], dtype="fp16")):
        with pytest.raises(UnsupportedError, match=r"unknown dtype 'fp16' \(known: bf16, fp8\)"):
            call()


def test_fp8_weights_and_kv_cache_enter_the_memory_check():
    from steptime.specs import get_model
    from steptime.step import memory_bytes

    m = get_model("llama-3-70b")
    assert memory_bytes(m, 0, 1, weight_dtype="fp8") == pytest.approx(memory_bytes(m, 0, 1) / 2)
    kv16 = memory_bytes(m, 10000, 1) - memory_bytes(m, 0, 1)
    kv8 = memory_bytes(m, 10000, 1, kv_dtype="fp8") - memory_bytes(m, 0, 1)
    assert kv8 == pytest.approx(kv16 / 2)
    # 70B bf16 does not fit one 80 GB H100; in fp8 with an fp8 KV cache a small batch does
    # the memory check's own error and line (a bare Exception passed on any failure, a TypeError included)
    with pytest.raises(MemoryFitError, match=r"needs [\d.]+ GB per GPU .*bf16 weights.* but h100-sxm has"):
        predict_step("llama-3-70b", GPU, decode=[(4, 1024)])
    r = predict_step("llama-3-70b", GPU, decode=[(4, 1024)], dtype="fp8", kv_dtype="fp8")
    assert r.dtype == "fp8" and r.kv_dtype == "fp8"


def test_cli_engines_and_predict_flags(capsys):
    assert main(["engines"]) == 0
    out = capsys.readouterr().out
    assert "vllm (default)" in out and "kernels" in out
    assert main(["engines", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert {r["engine"] for r in rows} >= {"vllm", "vllm-v0", "trtllm", "sglang", "kernels"}
    assert main(["predict", "--model", MODEL, "--gpu", GPU, "--decode", "4x512", "--engine", "trtllm", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["engine"] == "trtllm" and d["dtype"] == "bf16"
    assert main(["predict", "--model", MODEL, "--gpu", GPU, "--decode", "4x512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["engine"] == "vllm"
    assert main(["predict", "--model", MODEL, "--gpu", GPU, "--decode", "4x512", "--engine", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "known engines: vllm" in err[0]
    assert main(["predict", "--model", MODEL, "--gpu", "a100", "--decode", "4x512", "--dtype", "fp8"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "fp8" in err[0]
    assert main(["constants"]) == 0
    out = capsys.readouterr().out
    assert "engine.vllm" in out and "ASSUMED" in out


def test_fp8_kv_cache_halves_the_decode_kv_read():
    bf = predict_step(MODEL, GPU, decode=[(32, 8192)], engine="kernels")
    f8 = predict_step(MODEL, GPU, decode=[(32, 8192)], engine="kernels", kv_dtype="fp8")
    assert f8.terms_ms["attn_decode"] < 0.75 * bf.terms_ms["attn_decode"]
    assert f8.terms_ms["qkv_proj"] == bf.terms_ms["qkv_proj"]


def test_fused_allreduce_takes_the_residual_add_and_norm_at_tp_above_one_only():
    """An engine that fuses (engines.yaml allreduce.fuse_norm_max_bytes) runs the add and RMSNorm after each
    all-reduce inside it: the light kernels' time leaves, their streaming bytes join the all-reduce term,
    the launch count drops; TP 1 (no all-reduce) and an engine without the field are unchanged."""
    fused, plain = E.get_engine("trtllm"), without_values(E.get_engine("trtllm"), "fuse_norm_max_bytes")
    assert fused.fuses_norm(1e6, 2).all() and not fused.fuses_norm(1e6, 1).any()
    assert not plain.fuses_norm(1e6, 2).any() and not E.get_engine("sglang").fuses_norm(1e3, 2).any()
    b = dict(decode=[(16, 1024)])
    a1, p1 = (predict_step(MODEL, GPU, tp=1, engine=e, **b) for e in (fused, plain))
    assert a1.total_ms == pytest.approx(p1.total_ms)
    a, p = (predict_step(MODEL, GPU, tp=2, engine=e, **b) for e in (fused, plain))
    assert a.terms_ms["rmsnorm"] == 0 and a.terms_ms["add"] == 0 and p.terms_ms["rmsnorm"] > 0
    extra = a.terms_ms["allreduce"] - p.terms_ms["allreduce"]
    assert 0 < extra < p.terms_ms["rmsnorm"] + p.terms_ms["add"]  # the bytes stay, the floors go
    assert a.total_ms < p.total_ms
    # vLLM fuses only up to its size limit at that TP (H100, sm 90: 0.5 MB at TP 8, 64 MB at TP 2)
    v = E.get_engine("vllm")
    lim8 = v.allreduce_limits(get_gpu(GPU), 8)["fuse_norm_max_bytes"]
    big = predict_step(MODEL, GPU, tp=8, engine=v, prefill=[(1, 8192)])
    assert lim8 < 2 * 8192 * 4096 and big.terms_ms["rmsnorm"] > 0
    small = predict_step(MODEL, GPU, tp=8, engine=v, prefill=[(1, 32)])
    two = predict_step(MODEL, GPU, tp=2, engine=v, prefill=[(1, 4096)])
    assert 2 * 32 * 4096 <= lim8 and small.terms_ms["rmsnorm"] == 0 and two.terms_ms["rmsnorm"] == 0


def test_every_engine_with_host_terms_states_its_executor_and_a_bad_one_is_refused():
    for name in E.engine_names():
        e = E.get_engine(name)
        if e.host_terms:
            v = e.lookup("executor")
            assert v.value in E.EXECUTORS and v.provenance in E.PROVENANCES and v.source
    doc = {"host_terms": False, "host": {"executor": {"value": "threads", "provenance": "ASSUMED", "source": "x"}},
           "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "DERIVED", "source": "x"}}}
    with pytest.raises(ValueError, match="executor"):
        E._parse_engine("bad", doc)


def test_vllm_picks_its_allreduce_per_size_tp_and_architecture():
    """engines.yaml vllm allreduce.by_tp: on B300 (sm 103) at TP 8 a message up to 2 MB runs fused with the
    norm (FlashInfer one-shot: the custom one-shot branch), an unfused one the custom kernel below 4 MiB
    (one-shot below 256 KiB, two-shot above); above 4 MiB vLLM runs torch symmetric memory, which no table
    covers: priced by the plain rule (custom law up to max_bytes, NCCL above), as is an architecture the
    table does not list (A100, sm 80)."""
    from steptime.calibration import Constants
    from steptime.terms import comm

    c = Constants.default()
    e = E.get_engine("vllm")
    b3, a1 = get_gpu("b300"), get_gpu("a100-sxm")
    lim = e.allreduce_limits(b3, 8)
    assert lim["custom_max_bytes"] == 4 * 2 ** 20 and lim["one_shot_max_bytes"] == 2 ** 18
    assert lim["symm_mem_max_bytes"] == 64 * 2 ** 20 and lim["fuse_norm_max_bytes"] == 2 * 2 ** 20
    assert e.allreduce_limits(a1, 8) == {} and e.allreduce_limits(b3, 1) == {}
    assert e.allreduce_limits(b3, 2)["one_shot_max_bytes"] is None  # one kernel at every size at 2 ranks
    assert e.fuses_norm(2 * 2 ** 20, 8, b3).all() and not e.fuses_norm(2 * 2 ** 20 + 1, 8, b3).any()
    assert e.fuses_norm(64 * 2 ** 20, 2, b3).all()       # TP 2 on sm 103 fuses up to 64 MB
    x = np.array([1e5, 3e5, 5e6, 1e8])
    t = comm.engine_allreduce_time(x, 8, b3, e, c)
    custom = lambda m, osm: comm.allreduce_time(m, 8, b3, c, "custom", one_shot_max=osm)
    assert t[0] == pytest.approx(custom(1e5, 2 ** 18)) and t[1] == pytest.approx(custom(3e5, 0.0))
    assert t[2] == pytest.approx(comm.allreduce_time(5e6, 8, b3, c, "custom"))
    assert t[3] == pytest.approx(comm.allreduce_time(1e8, 8, b3, c, "nccl"))
    f = comm.engine_allreduce_time(x[:2], 8, b3, e, c, fused=True)
    assert f == pytest.approx(custom(x[:2], np.inf))      # the fused one-shot kernel up to 2 MB
    old = comm.engine_allreduce_time(np.array([1e5, 1e9]), 4, a1, e, c)
    assert old[1] == pytest.approx(comm.allreduce_time(1e9, 4, a1, c, "nccl"))
    assert old[0] == pytest.approx(comm.allreduce_time(1e5, 4, a1, c, "custom"))


def test_allreduce_table_is_checked(tmp_path):
    base = {"provenance": "DERIVED", "source": "x", "one_shot_max_bytes": {2: 1, 8: 1},
            **{k: {90: {2: 1, 8: 1}} for k in E.AR_LIMIT_TABLES}}
    assert E._parse_limits(base, "t")["custom_max_bytes"] == {90: {2: 1.0, 8: 1.0}}
    with pytest.raises(ValueError, match="TP"):
        E._parse_limits({**base, "symm_mem_max_bytes": {90: {2: 1}}}, "t")
    with pytest.raises(ValueError, match="unknown"):
        E._parse_limits({**base, "nvls_max_bytes": {}}, "t")
    with pytest.raises(ValueError, match="provenance"):
        E._parse_limits({k: v for k, v in base.items() if k != "source"}, "t")


def test_schedule_mixed_prefill_is_data_sglang_runs_prefill_first():
    """engines.yaml schedule.mixed_prefill: SGLang's default (enable_mixed_chunk False, prefill batches first as
    steps of their own) is false; every other profile mixes (absent: true); a bad value or field is refused."""
    assert not E.get_engine("sglang").mixes_prefill()
    assert E.get_engine("sglang").lookup("mixed_prefill").provenance == "DERIVED"
    for name in ("vllm", "vllm-v0", "vllm-v1-sync", "trtllm"):
        assert E.get_engine(name).mixes_prefill()
    base = E._doc()["engines"]["sglang"]
    with pytest.raises(ValueError, match="true or false"):
        E._parse_engine("x", {**base, "schedule": {"mixed_prefill": {"value": 0, "provenance": "ASSUMED", "source": "t"}}})
    with pytest.raises(ValueError, match="unknown field schedule.mixed_chunk"):
        E._parse_engine("x", {**base, "schedule": {"mixed_chunk": {"value": False, "provenance": "ASSUMED", "source": "t"}}})


def test_schedule_join_steps_is_data_sync_two_overlap_three():
    """engines.yaml schedule.join_steps: vLLM V1's synchronous engine core (vllm-v1-sync) lets a closed-loop request
    join 2 steps after its predecessor's last, the overlap / async loops (TensorRT-LLM, SGLang, vLLM >= 0.14) 3; an
    engine without it is refused by name unless the caller names its `absent` value; a value that is not a whole
    number >= 1 is refused."""
    assert E.get_engine("vllm-v1-sync").join_steps() == 2
    for overlap in ("trtllm", "sglang", "vllm", "vllm-v1-unfused", "vllm-no-p2p"):
        assert E.get_engine(overlap).join_steps() == 3, overlap
    assert E.get_engine("trtllm").lookup("join_steps").provenance == "DERIVED"
    assert E.get_engine("sglang").lookup("join_steps").provenance == "DERIVED"
    with pytest.raises(InputError, match="vllm-v0.*join_steps"):
        E.get_engine("vllm-v0").join_steps()
    assert E.get_engine("vllm-v0").join_steps(absent=1) == 1
    assert E.get_engine("trtllm").join_steps(absent=1) == 3  # the profile's value wins over `absent`
    base = E._doc()["engines"]["sglang"]
    for bad in (0, 2.5, True, "2"):
        with pytest.raises(ValueError, match="whole number"):
            E._parse_engine("x", {**base, "schedule": {"join_steps": {"value": bad, "provenance": "ASSUMED", "source": "t"}}})


def test_schedule_chunked_prefill_is_data_vllm_v0_runs_prompts_whole():
    """engines.yaml schedule.chunked_prefill: vLLM V0's default (chunked prefill opt-in) is false, every other
    profile chunks (absent: true); the replay's scheduler reads it instead of naming the engine; a bad value is refused."""
    from steptime_lab.experiments.replay import policy_for

    assert not E.get_engine("vllm-v0").chunks_prefill()
    assert E.get_engine("vllm-v0").lookup("chunked_prefill").provenance == "DERIVED"
    for name in ("vllm", "vllm-v1-sync", "trtllm", "sglang"):
        assert E.get_engine(name).chunks_prefill()
    assert policy_for("vllm-v0", 8).chunked_prefill is False
    assert policy_for("vllm-v1-sync", 8).chunked_prefill is True
    whole = policy_for("trtllm", 8, isl=1024)  # AIConfigurator's harness: whole prompts under c + ISL + 1500
    assert whole.chunked_prefill is False and whole.max_num_batched_tokens == 8 + 1024 + 1500
    base = E._doc()["engines"]["vllm-v0"]
    with pytest.raises(ValueError, match="true or false"):
        E._parse_engine("x", {**base, "schedule": {"chunked_prefill": {"value": "no", "provenance": "ASSUMED", "source": "t"}}})


def test_schedule_inline_launch_world_marks_vllm_world_size_one_rows_not_own():
    """engines.yaml schedule.inline_launch_world: vLLM V1 (async scheduling, single-process executor at world size 1)
    records a step's wall time with the next step's host launch in it at tp = dp = 1 only; the synchronous V1 loop
    and the other engines lack the field (every recorded step its own); bad layouts and values are refused."""
    v = E.get_engine("vllm")
    assert not v.step_time_is_own(1) and v.step_time_is_own(2) and v.step_time_is_own(1, dp=2)
    assert v.step_time_is_own(1, pp=2)
    assert v.lookup("inline_launch_world").provenance == "DERIVED"
    assert not E.get_engine("vllm-v1-unfused").step_time_is_own(1)  # 0.14-0.17: async on, same executor rule
    for name in ("vllm-v1-sync", "sglang", "trtllm"):
        assert E.get_engine(name).step_time_is_own(1)
    for bad in (0, 1.5, True):
        with pytest.raises(InputError, match="whole number"):
            v.step_time_is_own(bad)
    base = E._doc()["engines"]["sglang"]
    with pytest.raises(ValueError, match="whole number"):
        E._parse_engine("x", {**base, "schedule": {"inline_launch_world": {"value": 0, "provenance": "ASSUMED",
                                                                            "source": "t"}}})


def test_read_join_steps_overlap_loops_two_and_closed_join_one_more():
    """engines.yaml schedule.read_join_steps (wave 28): every overlap / async loop (TensorRT-LLM's
    _executor_loop_overlap, SGLang's event_loop_overlap, vLLM's step_with_batch_queue) reads its input queue with the
    next step already launched, so an arrival joins two steps after the read; the synchronous loops one. In every
    profile that states both, a closed-loop client's join is one step more (its reply reaches the loop only at the
    read after the step in flight): join_steps = read_join_steps + 1."""
    assert E.get_engine("trtllm").read_join_steps() == 2
    assert E.get_engine("sglang").read_join_steps() == 2
    assert E.get_engine("vllm").read_join_steps() == 2
    assert E.get_engine("vllm-v1-sync").read_join_steps() == 1
    assert E.get_engine("vllm-v0").read_join_steps() == 1  # absent: 1
    both = [k for k in E._doc()["engines"] if "join_steps" in E.get_engine(k).values
            and "read_join_steps" in E.get_engine(k).values]
    assert set(both) >= {"trtllm", "sglang", "vllm", "vllm-v1-sync"}
    for k in both:
        eng = E.get_engine(k)
        assert eng.join_steps() == eng.read_join_steps() + 1, k


def test_a_negative_server_law_value_in_engines_yaml_is_refused():
    """host.server_a_ms / server_b_ms / server_tp_ms are host costs: a negative one in a profile is refused with an
    error naming the field."""
    base = {"host_terms": False, "backend": "none",
            "allreduce": {"impl": "nccl", "max_bytes": {"value": 0, "provenance": "DERIVED", "source": "x"}}}
    for name in E.SERVER_FIELDS:
        doc = {**base, "host": {name: {"value": -1.0, "provenance": "FITTED", "source": "x"}}}
        with pytest.raises(ValueError, match=f"host.{name} .*>= 0"):
            E._parse_engine("bad", doc)
    zero = {"server_tp_ms": {"value": 0.0, "provenance": "FITTED", "source": "x"}}
    ok = E._parse_engine("ok", {**base, "host": zero})
    assert ok.lookup("server_tp_ms").value == 0.0
