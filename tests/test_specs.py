import json
import re

import pytest

from steptime.errors import UnknownGPUError, UnknownModelError
from steptime.specs import get_gpu, get_model, gpu_keys, gpu_table, model_keys

REQUIRED_GPUS = ["a100-sxm", "a40", "h100-sxm", "h200-sxm", "l40s", "b200", "gb200", "b300", "gb300", "rtx-pro-6000"]
REQUIRED_MODELS = ["llama-3.1-8b", "llama-3-8b", "llama-3-70b", "llama-3.1-70b", "llama-2-7b", "llama-2-70b",
                   "codellama-34b", "internlm-20b", "qwen-72b", "phi-2", "opt-13b", "mistral-7b"]


def test_required_gpus_present():
    assert set(REQUIRED_GPUS) <= set(gpu_keys())


def test_every_gpu_figure_has_a_known_source():
    from steptime.specs import gpu_sources

    sources = gpu_sources()
    for g in gpu_table().values():
        for field, fig in g.figures.items():
            assert fig.source in sources, f"{g.key}.{field} cites unknown source {fig.source!r}"


@pytest.mark.parametrize("alias,key", [("h100_sxm", "h100-sxm"), ("h100", "h100-sxm"),
                                       ("NVIDIA H100 80GB HBM3", "h100-sxm"), ("A100", "a100-sxm"),
                                       ("rtx_pro_6000_server", "rtx-pro-6000"), ("b200_sxm", "b200")])
def test_aliases(alias, key):
    assert get_gpu(alias).key == key


def test_unknown_gpu_lists_closest():
    with pytest.raises(UnknownGPUError, match="closest: h100-sxm"):
        get_gpu("h100-sxm-96")


def test_hopper_peaks_and_ridge():
    h100, h200 = get_gpu("h100-sxm"), get_gpu("h200-sxm")
    assert h100.peak_flops == h200.peak_flops  # same compute, different memory
    assert h200.mem_bw > h100.mem_bw
    assert h100.ridge_flop_per_byte > h200.ridge_flop_per_byte


def test_required_models_present_and_shapes():
    assert set(REQUIRED_MODELS) <= set(model_keys())
    m = get_model("meta-llama/Meta-Llama-3-8B")
    assert (m.hidden_size, m.num_key_value_heads, m.qkv_out, m.mlp_up_out) == (4096, 8, 6144, 28672)
    assert 7.9e9 < m.n_params() < 8.1e9  # Llama-3-8B has 8.03 B parameters


def test_model_from_config_json(tmp_path):
    cfg = {"hidden_size": 2048, "num_hidden_layers": 4, "num_attention_heads": 16, "num_key_value_heads": 4,
           "intermediate_size": 5632, "vocab_size": 32000, "hidden_act": "silu", "max_position_embeddings": 2048}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = get_model(str(p))
    assert m.head_dim == 128 and m.gated_mlp and m.num_key_value_heads == 4


def test_unknown_model():
    with pytest.raises(UnknownModelError, match="closest"):
        get_model("llama-3.1-7b")


# ---------------------------------------------------------------- one home per fact
def test_gpu_sets_come_from_gpus_yaml(repo_root):
    import yaml

    from steptime.specs import by_family

    aic = gpu_keys(tables="aic")
    assert len(aic) == 9 and "a40" not in aic
    # the GPUs the manifest holds AIConfigurator GEMM tables for are exactly these
    man = yaml.safe_load((repo_root / "raw/MANIFEST.yaml").read_text())
    assert {e["gpu"] for e in man["files"] if e.get("table") == "aic_gemm"} == set(aic)
    assert gpu_keys("hopper", tables="aic") == ["h100-sxm", "h200-sxm"]
    assert gpu_keys("blackwell", tables="aic") == ["b200", "gb200", "b300", "gb300", "rtx-pro-6000"]
    assert gpu_keys("blackwell")[:5] == ["b200", "gb200", "b300", "gb300", "rtx-pro-6000"]  # then the datasheet-only ones
    assert "a40" in gpu_keys(tables="vidur") and "h200-sxm" not in gpu_keys(tables="vidur")
    # the families partition the GPUs, and by_family orders by generation
    from steptime.specs import ARCHITECTURES

    fams = [gpu_keys(f) for f in ARCHITECTURES]
    assert sorted(sum(fams, [])) == sorted(gpu_keys())
    assert by_family(["b200", "l40s", "a100-sxm", "h100-sxm"]) == ["a100-sxm", "l40s", "h100-sxm", "b200"]
    with pytest.raises(ValueError, match="unknown GPU family"):
        gpu_keys("volta")
    with pytest.raises(ValueError, match="unknown table source"):
        gpu_keys(tables="mlperf")


def test_experiment_gpu_sets_follow_gpus_yaml():
    from steptime_lab.experiments import attention, gemm

    assert gemm.AIC_GPUS == attention.AIC_GPUS == tuple(gpu_keys(tables="aic"))
    assert all(get_gpu(g).architecture == "hopper" for g in gemm.HOPPER)
    assert all(get_gpu(g).architecture == "blackwell" for g in gemm.BLACKWELL)
    assert {get_gpu(g).architecture for g in gemm.WAVE_GPUS} == {"ampere", "ada"}
    # orders chosen per experiment (ranking's tie order, Vidur's home-first order), members from gpus.yaml
    from steptime_lab.experiments import cells, ranking, transfer

    assert set(ranking.GPUS) == set(gpu_keys(tables="aic")) and len(ranking.GPUS) == len(set(ranking.GPUS))
    assert set(cells.VIDUR_GPUS) == set(gpu_keys(tables="vidur"))
    assert transfer.TARGETS == {"vidur_step": cells.VIDUR_GPUS, "aic_gemm": gemm.AIC_GPUS,
                                "aic_attention": gemm.AIC_GPUS}


def test_vidur_operator_map_is_data():
    from steptime.specs import vidur_operators
    from steptime.step import VIDUR_GEMM, VIDUR_LAYER_OPS, VIDUR_LIGHT, layer_shapes
    from steptime.terms.light import LIGHT_KERNELS

    ops = vidur_operators()
    assert len(ops) == 10 and list(ops)[0] == "emb"
    assert set(vidur_operators(kind="gemm").values()) == set(layer_shapes(get_model("llama-2-7b"), 1))
    assert set(vidur_operators(kind="light").values()) <= set(LIGHT_KERNELS)
    assert vidur_operators(per="step") == {"emb": "emb"}
    assert set(VIDUR_LAYER_OPS) == set(ops) - {"emb"} and {**VIDUR_GEMM, **VIDUR_LIGHT} == ops


def test_parallel_block_is_a_model_field(tmp_path):
    assert get_model("phi-2").parallel_block
    assert not any(get_model(m).parallel_block for m in model_keys() if m != "phi-2")
    cfg = {"architectures": ["PhiForCausalLM"], "hidden_size": 2560, "num_hidden_layers": 32,
           "num_attention_heads": 32, "vocab_size": 51200, "intermediate_size": 10240, "hidden_act": "gelu_new",
           "max_position_embeddings": 2048}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert get_model(str(tmp_path / "config.json")).parallel_block
# --------------------------------------------------------------------------- issue 11: wall-clock dense models
# (key, HF id as the wall-clock sets spell it, published parameter count in billions, its tolerance)
WALLCLOCK_DENSE = [
    ("qwen3-14b", "Qwen/Qwen3-14B", 14.8, 0.1),
    ("gemma-2-9b", "google/gemma-2-9b-it", 9.24, 0.05),
    ("codellama-7b", "codellama/CodeLlama-7b-hf", 6.74, 0.05),
    ("codellama-13b", "codellama/CodeLlama-13b-hf", 13.0, 0.1),
    ("gemma-2-27b", "google/gemma-2-27b-it", 27.2, 0.1),
    ("phi-3-mini-4k", "microsoft/Phi-3-mini-4k-instruct", 3.82, 0.02),
    ("phi-3-medium-4k", "microsoft/Phi-3-medium-4k-instruct", 14.0, 0.1),
    ("llama-3.1-8b", "meta-llama/Meta-Llama-3.1-8B-Instruct", 8.03, 0.05),
    ("llama-3.1-70b", "meta-llama/Llama-3.1-70B-Instruct", 70.6, 0.2),
    ("llama-3.1-405b", "meta-llama/Llama-3.1-405B-Instruct", 405.8, 1.0),
    ("mistral-7b-v0.3", "mistralai/Mistral-7B-Instruct-v0.3", 7.25, 0.02),
]


@pytest.mark.parametrize("key,hf_id,params_b,tol", WALLCLOCK_DENSE)
def test_wallclock_dense_models_build_with_sane_shapes(key, hf_id, params_b, tol):
    m = get_model(hf_id)
    assert m.key == key
    assert m.num_attention_heads % m.num_key_value_heads == 0  # every kv head serves a whole group of q heads
    assert m.q_size == m.num_attention_heads * m.head_dim and m.qkv_out == m.q_size + 2 * m.kv_size
    assert m.head_dim % 8 == 0 and m.intermediate_size > m.hidden_size
    assert abs(m.n_params() / 1e9 - params_b) < tol, m.n_params()


def test_gemma2_head_dim_is_not_hidden_over_heads():
    """Gemma-2 9B's attention width (16 x 256 = 4096) exceeds its hidden size (3584): q_size must follow
    head_dim, and its embeddings are tied (one vocab x hidden matrix, not two)."""
    m = get_model("google/gemma-2-9b-it")
    assert m.head_dim == 256 and m.q_size == 4096 != m.hidden_size
    assert m.tie_word_embeddings


def test_instruct_alias_only_where_its_config_was_read():
    # CodeLlama-34b-hf (base) is NOT an alias of codellama-34b (read from the Instruct config: vocab 32000,
    # while the one base copy found says 32016); Mistral-Nemo-Instruct has no entry (its config not read)
    # FP8 releases are another weight dtype, not an alias; Gemma-2 2B-it: no config of the -it release read
    for name in ("codellama/CodeLlama-34b-hf", "mistralai/Mistral-Nemo-Instruct-2407", "google/gemma-2-2b-it",
                 "meta-llama/Llama-3.1-405B-Instruct-FP8", "microsoft/Phi-3-small-8k-instruct"):
        with pytest.raises(UnknownModelError):
            get_model(name)


def test_mistral_v03_is_not_v01():
    """v0.3 extends the vocabulary (32768) and drops the sliding window: it must not resolve to v0.1's entry."""
    assert get_model("mistralai/Mistral-7B-Instruct-v0.3").vocab_size == 32768
    assert get_model("mistralai/Mistral-7B-v0.1").vocab_size == 32000


# ---------------------------------------------------------------- issue 21: the GPUs a buyer compares
BUYER_GPUS = ["h100-pcie", "h100-nvl", "h200-nvl", "gh200", "l4", "l40", "a10", "a30", "rtx-6000-ada",
              "mi300x", "mi325x", "mi355x", "mi350x",
              # wave 5: the GPUs still missing, and power-limited variants as their own entries
              "h20", "h800", "a800-sxm", "b100", "l20", "rtx-pro-6000-ws", "rtx-pro-6000-maxq", "rtx-5090",
              "rtx-5000-ada", "rtx-4500-ada", "rtx-4000-ada",
              # wave 6: the RTX PRO Blackwell cards below the 6000 (memory and power variants their own entries)
              "rtx-pro-5000", "rtx-pro-5000-72gb", "rtx-pro-4500", "rtx-pro-4000", "rtx-pro-4000-sff", "rtx-2000-ada",
              "a100-pcie"]


def test_buyer_gpus_present_with_node_and_interconnect():
    for k in BUYER_GPUS:
        g = get_gpu(k)
        assert g.gpus_per_node >= 1 and g.interconnect, k
        assert g.bf16_dense_tflops > 0 and g.mem_bw_gbps > 0 and g.mem_gb > 0, k


def test_buyer_gpu_sources_name_a_document_and_url():
    from steptime.specs import gpu_sources

    src = gpu_sources()
    for k in BUYER_GPUS:
        g = get_gpu(k)
        for f in ("bf16_dense_tflops", "mem_bw_gbps", "mem_gb", "power_w"):
            fig = g.figures[f]
            if fig.confidence == "low":  # no document read states it (DERIVED or ASSUMED): flagged, not passed off
                continue
            text = src[fig.source]
            assert "http" in text and re.search(r"\b20(2[0-9])\b", text), (k, f)


def test_amd_is_its_own_family_and_never_calibrated():
    from steptime.calibration import Constants

    c = Constants.default()
    assert gpu_keys("cdna3") == ["mi300x", "mi325x"] and gpu_keys("cdna4") == ["mi355x", "mi350x"]
    for k in gpu_keys(("cdna3", "cdna4")):
        assert get_gpu(k).vendor == "AMD" and not c.calibrated(k)
    assert c.calibrated("h100-sxm") and not c.calibrated("h100-pcie")


def test_power_limited_variants_are_their_own_entries():
    # same die and memory, lower clock and power: a lower peak, the same bandwidth
    a, b = get_gpu("mi350x"), get_gpu("mi355x")
    assert a.power_w < b.power_w and a.boost_mhz < b.boost_mhz and a.peak_flops < b.peak_flops
    assert a.mem_bw == b.mem_bw
    # the sparse datasheet figure halved, and the CDNA peaks = CUs x clock x per-CU rate
    assert get_gpu("h100-pcie").bf16_dense_tflops == 1513 / 2
    m = get_gpu("mi300x")
    assert abs(m.sms * m.boost_mhz * 1e6 * 2048 / 1e12 - m.bf16_dense_tflops) < 0.1


# every output labels a GPU without readings `uncalibrated` (issue 21)
def test_uncalibrated_label_in_every_output(capsys):
    from steptime import predict_step
    from steptime.cli import main

    assert not predict_step("llama-3.1-8b", "mi300x", decode=[(4, 512)]).calibrated
    assert predict_step("llama-3.1-8b", "h100-sxm", decode=[(4, 512)]).to_dict()["uncalibrated"] is False
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "l4", "--decode", "4x512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["uncalibrated"] is True
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "mi355x", "--decode", "4x512"]) == 0
    assert "mi355x is uncalibrated" in capsys.readouterr().out
    assert main(["serve", "--model", "llama-3.1-8b", "--gpu", "h100-pcie", "--rate", "2", "--n", "8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["uncalibrated"] is True
    assert main(["serve", "--model", "llama-3.1-8b", "--gpu", "h100-pcie", "--rate", "2", "--n", "8"]) == 0
    assert "h100-pcie is uncalibrated" in capsys.readouterr().out
    assert main(["gpus", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["mi325x"]["uncalibrated"] and not d["a100-sxm"]["uncalibrated"]
    assert main(["gpus"]) == 0
    rows = {ln.split()[0]: ln.split()[-1] for ln in capsys.readouterr().out.splitlines()[1:] if ln and ln[0] != "u"}
    assert rows["gh200"] == "uncalibrated" and rows["h200-sxm"] == "calibrated"


# wave 5 (issue 21): how well each figure is checked is data, and `high`/`medium` mean a document was read
def test_confidence_levels_are_checked_and_read_sources_are_dated():
    from steptime.specs import CONFIDENCE, Figure, _unwrap, gpu_sources

    src = gpu_sources()
    seen = set()
    for g in gpu_table().values():
        for f, fig in g.figures.items():
            assert fig.confidence in CONFIDENCE, (g.key, f)
            seen.add(fig.confidence)
            if fig.confidence in ("high", "medium"):
                # a figure marked read-in-session cites a document with its address and the day it was read
                assert "http" in src[fig.source] and re.search(r"read 20\d\d-\d\d-\d\d|retrieved http", src[fig.source]), \
                    (g.key, f)
    assert seen == set(CONFIDENCE)
    with pytest.raises(ValueError, match="confidence"):
        _unwrap({"sms": {"value": 1, "confidence": "verified"}}, "sms", "x")
    # a bare figure takes the GPU's default confidence; one citing another document does not inherit it
    assert _unwrap({"sms": 1}, "sms", "a", "high") == Figure(1, "a", "high")
    assert _unwrap({"sms": {"value": 1, "source": "b"}}, "sms", "a", "high").confidence == "datasheet"


def test_power_limited_workstation_variants():
    ws, maxq = get_gpu("rtx-pro-6000-ws"), get_gpu("rtx-pro-6000-maxq")
    server = get_gpu("rtx-pro-6000")
    assert ws.sms == maxq.sms == server.sms and ws.mem_bw == maxq.mem_bw
    assert maxq.power_w < ws.power_w and maxq.boost_mhz < ws.boost_mhz and maxq.peak_flops < ws.peak_flops
    # export-limited parts: the H800/A800 cut the links, not the math; the H20 cuts the math, not the memory
    assert get_gpu("h800").peak_flops == get_gpu("h100-sxm").peak_flops and get_gpu("h800").link_bw < get_gpu("h100-sxm").link_bw
    assert get_gpu("a800-sxm").link_bw < get_gpu("a100-sxm").link_bw
    assert get_gpu("h20").peak_flops < 0.2 * get_gpu("h100-sxm").peak_flops
    assert get_gpu("h20").mem_bw > get_gpu("h100-sxm").mem_bw


def test_new_gpus_predict_uncalibrated_and_plan_over_them(capsys):
    from steptime.cli import main

    for k in ("h20", "l20", "rtx-5090", "b100"):
        assert main(["predict", "--model", "llama-3.1-8b", "--gpu", k, "--decode", "8x1024", "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["uncalibrated"] is True and d["total_ms"] > 0, k


def test_gpus_sources_counts_how_each_figure_was_checked(capsys):
    from steptime.cli import main

    assert main(["gpus", "--sources"]) == 0
    lines = {ln.split(":")[0]: ln for ln in capsys.readouterr().out.splitlines() if ln and ln[0] != " "}
    assert "high" in lines["mi355x"] and "l2_mb" not in lines["mi355x"]  # stated by ROCm's spec table
    assert "low: " in lines["h20"] and "boost_mhz" in lines["h20"]        # no document gives an H20 clock
    assert "datasheet" in lines["h100-sxm"] and "high" not in lines["h100-sxm"]


# wave 6 (issue 21): which figures a session re-read is data, checked to name real fields and a real day
def test_rechecked_figures_are_recorded_and_checked(capsys):
    from steptime.cli import main
    from steptime.specs import _GPU_FIELDS, _rechecked

    for k in ("a30", "h100-nvl", "h200-nvl", "rtx-pro-4500", "rtx-2000-ada"):
        g = get_gpu(k)
        assert g.rechecked and all(set(figs) <= set(_GPU_FIELDS) for _, figs in g.rechecked), k
    # the A30's clocks, SMs and L2 were found in a spec database this session: no longer `low`
    a30 = get_gpu("a30")
    assert {a30.figures[f].confidence for f in ("sms", "l2_mb", "boost_mhz", "base_mhz")} == {"medium"}
    # the NVL parts' clocks and L2 were looked for and not found: re-read, still `low`
    nvl = get_gpu("h100-nvl")
    assert "boost_mhz" in nvl.rechecked[0][1] and nvl.figures["boost_mhz"].confidence == "low"
    for bad, msg in [([{"date": "2026-12-03", "figures": ["clock"]}], "must name fields"),
                     ([{"date": "recently", "figures": ["sms"]}], "YYYY-MM-DD"),
                     ([{"date": "2026-12-03"}], "date, figures")]:
        with pytest.raises(ValueError, match=msg):
            _rechecked({"rechecked": bad}, "x")
    assert main(["gpus", "--sources"]) == 0
    lines = {ln.split(":")[0]: ln for ln in capsys.readouterr().out.splitlines() if ln and ln[0] != " "}
    assert "re-read 2026-12-03: sms, l2_mb, boost_mhz" in lines["h100-nvl"]
    assert main(["gpus", "--sources", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["a30"]["rechecked"]["2026-12-03"][0] == "bf16_dense_tflops"


def test_rtx_pro_blackwell_family_is_ordered_by_its_documents():
    # the 140 W and 70 W RTX PRO 4000 share SMs and memory size; the SFF's lower clock and power give a lower peak
    full, sff = get_gpu("rtx-pro-4000"), get_gpu("rtx-pro-4000-sff")
    assert full.sms == sff.sms and full.mem_gb == sff.mem_gb
    assert sff.power_w < full.power_w and sff.boost_mhz < full.boost_mhz and sff.peak_flops < full.peak_flops
    # a DERIVED peak says so; the SFF's, stated by the page read, is medium
    assert full.figures["bf16_dense_tflops"].confidence == "low" and sff.figures["bf16_dense_tflops"].confidence == "medium"
    # the two RTX PRO 5000 memory sizes: same GPU and bandwidth, more memory
    a, b = get_gpu("rtx-pro-5000"), get_gpu("rtx-pro-5000-72gb")
    assert a.peak_flops == b.peak_flops and a.mem_bw == b.mem_bw and b.mem_gb == 1.5 * a.mem_gb
    # the RTX 2000 Ada's peak is the datasheet's tensor figure (FP8 with sparsity) halved: 22 SMs x 2,130 MHz x 2,048
    r = get_gpu("rtx-2000-ada")
    assert abs(r.sms * r.boost_mhz * 1e6 * 2048 / 1e12 - r.fp8_dense_tflops) < 0.05
    # the A100 PCIe: the SXM4 part's math at lower power and bandwidth
    pcie, sxm = get_gpu("a100-pcie"), get_gpu("a100-sxm")
    assert pcie.peak_flops == sxm.peak_flops and pcie.mem_bw < sxm.mem_bw and pcie.power_w < sxm.power_w


def test_wave6_gpus_predict_uncalibrated(capsys):
    from steptime.cli import main

    for k in ("rtx-pro-5000", "rtx-pro-5000-72gb", "rtx-pro-4500", "rtx-pro-4000", "rtx-pro-4000-sff", "rtx-2000-ada",
              "a100-pcie"):
        # llama-3.1-8b's bf16 weights alone (16 GB) overflow the 16 GB RTX 2000 Ada: it gets a 3B model
        model = "llama-3.2-3b" if k == "rtx-2000-ada" else "llama-3.1-8b"
        assert main(["predict", "--model", model, "--gpu", k, "--decode", "8x1024", "--json"]) == 0
        d = json.loads(capsys.readouterr().out)
        assert d["uncalibrated"] is True and d["total_ms"] > 0, k
    assert main(["predict", "--model", "llama-3.1-8b", "--gpu", "rtx-2000-ada", "--decode", "8x1024"]) == 2
    assert "rtx-2000-ada has 16 GB" in capsys.readouterr().err

