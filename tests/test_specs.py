import json

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
        get_gpu("h100-pcie-96")


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
