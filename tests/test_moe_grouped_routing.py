"""E3.1 wave 22: the collector's balanced router under a model's group-limited top-k (DeepSeek-V3: 8 groups, top 4)."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from steptime.errors import ModelConfigError
from steptime.specs.moe import moe_from_config, moe_model_table
from steptime.terms import moe as M
from steptime_lab.experiments import moe as E

ROOT = Path(__file__).resolve().parent.parent


def test_balanced_selection_is_the_collectors_stride_pattern():
    s = M.balanced_selection(64, 256, 8)             # T >= stride (32): (t + 32 i) mod 256
    assert s[0].tolist() == [0, 32, 64, 96, 128, 160, 192, 224]
    assert s[33].tolist() == [(33 + 32 * i) % 256 for i in range(8)]
    assert M.balanced_selection(4, 256, 8)[1].tolist() == [8 + 32 * i for i in range(8)]   # floor(t 32 / 4)
    assert np.bincount(s.ravel(), minlength=256).tolist() == [2] * 256                     # balanced
    with pytest.raises(ValueError, match="topk"):
        M.balanced_selection(4, 8, 9)


def test_grouped_counts_put_every_pair_in_the_first_groups():
    c = M.balanced_grouped_counts(16384, 256, 8, 8, 4)
    assert c.sum() == 16384 * 8
    assert c[128:].sum() == 0                       # groups 4-7 never chosen: EP 2's rank 0 holds every pair
    assert c[:64].sum() / c.sum() == pytest.approx(0.75)    # EP 4: two picks + the four fill slots
    assert c[:4].tolist() == [16384] * 4            # the fill slots: the lowest-index experts, every token
    assert c.max() <= 16384                          # a token picks an expert at most once
    assert not c.flags.writeable


def test_one_group_is_the_plain_balanced_router():
    T, E_, k = 512, 128, 8
    c = M.balanced_grouped_counts(T, E_, k, 1, 1)
    assert c.tolist() == np.bincount(M.balanced_selection(T, E_, k).ravel(), minlength=E_).astype(float).tolist()


@pytest.mark.parametrize("g, tg", [(3, 1), (8, 0), (8, 9), (64, 1)])
def test_grouped_counts_refuse_impossible_groups(g, tg):
    with pytest.raises(ValueError, match="group"):
        M.balanced_grouped_counts(16, 256, 8, g, tg)


def test_routed_load_grouped_takes_rank_zero():
    eps = [1, 2, 4, 8, 256]
    P, Et, R = M.routed_load([16384] * 5, 256, 8, eps, "balanced_grouped_8_4", tile=64)
    assert (P / (8 * 16384)).tolist() == [1.0, 1.0, 0.75, 0.625, 0.125]
    assert Et.tolist() == [128, 128, 64, 32, 1]
    Pb, Etb, _ = M.routed_load([16384] * 5, 256, 8, eps, "balanced", tile=64)
    assert Pb[1] == P[1] / 2 and Etb[0] == 256     # the plain balanced router halves EP 2's pairs


def test_grouped_routing_slows_deepseek_at_ep2_only_where_the_groups_say():
    from steptime.specs import get_gpu
    mc = M.MoEConstants.default()
    g = get_gpu("b200")
    kw = dict(tp=1, dtype="fp8_block", regime="resident")
    def t(r, ep):
        return float(M.routed_experts_time(4096, 7168, 2048, 8, 256, g, mc, ep=ep, routing=r, **kw)["t"])
    assert t("balanced_grouped_8_4", 2) > 1.5 * t("balanced", 2)
    assert t("balanced_grouped_1_1", 2) == pytest.approx(t("balanced", 2))


def test_deepseek_v3_spec_carries_its_group_limited_router():
    m = moe_model_table()["deepseek-v3"]
    cfg = json.loads((ROOT / "raw/aiconfigurator/model_configs/deepseek-ai--DeepSeek-V3_config.json").read_text())
    assert (m.n_group, m.topk_group) == (cfg["n_group"], cfg["topk_group"]) == (8, 4)
    c = moe_from_config(cfg, "deepseek/config.json")
    assert (c.n_group, c.topk_group) == (8, 4)
    assert moe_model_table()["kimi-k2"].n_group == 1
    with pytest.raises(ModelConfigError, match="n_group"):
        dataclasses.replace(m, n_group=3)
    with pytest.raises(ModelConfigError, match="topk_group"):
        dataclasses.replace(m, topk_group=9)


def test_cell_routing_names_the_grouped_shape_on_balanced_cells_only():
    d = pd.DataFrame({"hidden_size": [7168, 7168, 4096], "inter_size": [2048, 2048, 1536], "topk": [8, 8, 8],
                      "num_experts": [256, 256, 128], "distribution": ["balanced", "power_law_1.01", "balanced"]})
    assert E.cell_routing(d).tolist() == ["balanced_grouped_8_4", "power_law_1.01", "balanced"]
    assert E.grouped_routing_shapes() == {(7168, 2048, 8, 256): "balanced_grouped_8_4"}
