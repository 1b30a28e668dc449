"""Light kernels: memory-bound elementwise passes, each a launch floor plus bytes over
an achieved bandwidth of its own (a scatter like the KV-cache write reaches far less).

    t_k = (floor_k^p + stream_k^p)^(1/p),   floor_k = light_floor_us[k],
                                             stream_k = bytes_k / (BW * light_bw_scale * light_eta[k])

(p = light_p[k]: 1 adds the floor to the stream, large p is a sharp max; the measured knee
sits in between.)

`light_bw_scale` is the GPU's achieved fraction of HBM bandwidth on a large RMSNorm (one
per-GPU deploy reading), `light_eta[k]` each kernel's bandwidth relative to it and
`light_floor_us[k]` its floor (both fitted on the other GPUs; E1.1c).

Bytes per kernel for T new tokens (bf16 activations, per GPU after TP):
    rmsnorm   read T h, write T h (+ weight h)          x2 per layer
    add       read 2 T h, write T h                      residual adds, x2 per layer
    rope      read and write T (q + kv)                  q and k
    act       read T I_up, write T I                     I_up = 2 I when gated
    kv_write  read T 2 kv, write T 2 kv                  into the paged cache (scatter)
    emb       read T h (gather), write T h               once per step
    qk_norm   read T q, write T q (+ weight d); then the same for k (kv)   Qwen3 only (models.yaml qk_norm)
    add_rmsnorm  read 2 T h (sublayer output, residual), write 2 T h (new residual, normed), + weight h
                 one launch in place of an add and an RMSNorm, where the engine fuses them (engines.yaml
                 fusion.add_rmsnorm): the RMSNorm launch on its own bytes plus the add's extra traffic
                 (2 T h) at the add law's bandwidth without its floor (add_rmsnorm_time), nothing fitted

qk_norm (issue 19): Qwen3 applies an RMSNorm of width head_dim to every head of q and of k
before RoPE. vLLM's Qwen3Attention.forward (vllm-project/vllm vllm/model_executor/models/qwen3.py,
commit 002456df36fc7a63ca4463f335a49d05634ab2ab) calls `self.q_norm(q_by_head)` and
`self.k_norm(k_by_head)`: two RMSNorm launches per layer, q's and k's, each moving its own
bytes. The fused split-QKV + q/k RMSNorm + RoPE kernel (`torch.ops._C.fused_qk_norm_rope`,
vLLM's `QKNormRoPEFusionPass`) sits behind `pass_config.enable_qk_norm_rope_fusion`, which is
False by default in the vLLM configs found (SGLang's `enable_fused_qk_norm_rope` likewise
defaults False), so steptime times the unfused pair for those engines. Priced with the rmsnorm law
(its floor, eta and p: the same kernel on a narrower row); nothing fitted. TensorRT-LLM's PyTorch
Qwen3 runs the norms and RoPE as one kernel (`torch.ops.trtllm.fused_qk_norm_rope`, its default):
engines.yaml fusion.qk_norm_rope, where step.py drops this term and its launches (the rope term
prices the fused kernel).

Floor laws (issue 19; engines.yaml light.floor_law, a profile-level choice):
    flat  floor_k = light_floor_us[k]                 E1.1c on Vidur's tables (Sarathi-Serve's kernels
                                                      and timer): the vllm-v0 and kernels profiles,
                                                      and every caller that names no law
    row   floor_k = c0 / f_clk + row_bytes_k / (b_cyc x f_clk)   (ROW_KERNELS only)
                                                      one CTA per token row: a fixed cost in SM cycles plus
                                                      the bytes one CTA moves for its row at b_cyc bytes
                                                      per cycle, f_clk the datasheet boost clock;
                                                      light_row_floor {c0_kcycles, bytes_per_cycle},
                                                      fitted leave-one-GPU-out by E1.1c on AIConfigurator's
                                                      vLLM 0.24 quantize kernel (m <= 32 rows, 8 GPUs);
                                                      c0 per host CPU (host_c0_kcycles {grace: ...}, gpus.yaml
                                                      host_cpu; wave 30): the Grace-hosted GB200 / GB300 pay
                                                      ~20% more cycles than the x86-hosted parts
The row law is for the one-block-per-token kernels of vLLM's csrc (RMSNorm and fused add + RMSNorm,
rotary embedding, SiLU-and-mul, reshape_and_cache), which SGLang and TensorRT-LLM mirror: rmsnorm,
rope, act, kv_write (and qk_norm, per head row). `add` (a PyTorch elementwise kernel over all
elements) and `emb` (PyTorch's gather) keep their flat floor under either law. The stream term
is the same under both laws (bytes over BW x light_bw_scale x light_eta), except where the flat law's kernels take
the SM-rate law below.

SM-rate stream law (issue 19, wave 30; E1.1c): under the flat floor law (Sarathi-era kernels), a kernel the
constants' `light_sm_rate` lists:
    stream_k = smax(bytes / (BW x light_dram_eta), bytes / (SMs x f_clk x b_k), q)
    floor_k = floor_us_k (or c_k kcycles / f_clk, the wave-30 form),  p = p_k
The floor in microseconds (wave 31, issue 19): Vidur's small light launches take about the same wall time on A100,
A40 and H100 (rmsnorm median 7 / 6 / 6 us at T <= 16, i.e. 9.9 / 10.4 / 11.9 kcycles), so a cycle floor fitted on
A100 + A40 came out short on H100's 1.98 GHz clock (E1.1's decode-sized step); the us floor carries.
The row law (modern engines' kernels) and light passes outside an engine's layer kernels (floor_law None: the fp8
quantise, predict_ops) keep the bandwidth-scale stream: AIConfigurator's vLLM 0.24 quantize kernel streams at
0.76-0.93 of DRAM on all its 8 GPUs, not at Sarathi's bytes per SM-cycle.
On the HBM GPUs Vidur's norm / rope / act / emb kernels run at a near-constant number of bytes per SM-cycle far
under DRAM (SM-bound), on the GDDR A40 near DRAM (DRAM-bound): one DRAM cap per GPU (`light_dram_eta`, the achieved
fraction of a streaming elementwise add; E1.1c carries it from the GEMM streaming reading) and one SM rate per kernel
(`light_sm_rate` {q, kernels: {k: {bytes_per_sm_cycle, floor_us (or floor_kcycles), p}}}, fitted on the other GPUs)
cover both.
SMs, f_clk (boost) and BW are datasheet inputs. A kernel not listed (kv_write) keeps BW x light_bw_scale x light_eta.
"""

from __future__ import annotations

from types import MappingProxyType

import numpy as np

from steptime.calibration import Constants
from steptime.specs.engines import LIGHT_FLOOR_LAWS
from steptime.terms.gemm import boost_mhz, smax

LIGHT_KERNELS = ("rmsnorm", "add", "rope", "act", "kv_write", "emb")
PER_LAYER = MappingProxyType({"rmsnorm": 2, "add": 2, "rope": 1, "act": 1, "kv_write": 1})
QK_NORM_LAW = "rmsnorm"  # the constants (light_floor_us, light_eta, light_p) qk_norm's launches are priced with
SM_RATE_FLOOR_UNITS = ("floor_us", "floor_kcycles")  # a light_sm_rate kernel's floor: microseconds or boost kcycles
ROW_KERNELS = ("rmsnorm", "rope", "act", "kv_write")  # one CTA per token row under the row law (qk_norm: rmsnorm's)


def _head_widths(model, tp: int):
    """(q, kv) values per token per rank: the query heads split over TP, the KV heads too (at least one)."""
    q = model.num_attention_heads * model.head_dim / tp
    kv = max(1, model.num_key_value_heads // tp) * model.head_dim
    return q, kv


def qk_norm_bytes(tokens, model, tp: int = 1):
    """(q bytes, k bytes) of the two per-head RMSNorm launches of one layer: read and write T x
    heads/TP x head_dim bf16 values, plus the head_dim weight, for q and for k separately."""
    T = np.asarray(tokens, dtype=float)
    d = model.head_dim
    q, kv = _head_widths(model, tp)
    return 2.0 * (2 * T * q + d), 2.0 * (2 * T * kv + d)


def qk_norm_time(tokens, model, gpu, tp: int = 1, constants: Constants | None = None,
                 floor_law: str = "flat") -> np.ndarray:
    """Seconds per layer of a qk_norm model's q and k RMSNorms (two launches); zeros for others.
    Under the row floor law each head of each token is one row (read and write head_dim values
    plus the head_dim weight)."""
    T = np.asarray(tokens, dtype=float)
    if not getattr(model, "qk_norm", False):
        return np.zeros_like(T)
    _check_law(floor_law)
    bq, bk = qk_norm_bytes(T, model, tp)
    rb = 2.0 * 3 * model.head_dim if floor_law == "row" else None
    return (light_time(QK_NORM_LAW, bq, gpu, constants, row_bytes=rb, floor_law=floor_law)
            + light_time(QK_NORM_LAW, bk, gpu, constants, row_bytes=rb, floor_law=floor_law))


def _check_law(floor_law: str) -> None:
    if floor_law not in LIGHT_FLOOR_LAWS:  # the laws an engine profile may name (specs/engines.py light.floor_law)
        raise ValueError(f"unknown light floor law {floor_law!r} (known: {', '.join(LIGHT_FLOOR_LAWS)})")


def row_bytes(kernel: str, model, tp: int = 1) -> float | None:
    """Bytes one CTA moves for one token row of `kernel` (its bytes at T = 1, the weight read by
    every row included); None for a kernel that is not one CTA per row (add, emb)."""
    if kernel not in LIGHT_KERNELS:
        raise ValueError(f"unknown light kernel {kernel!r} (known: {', '.join(LIGHT_KERNELS)})")
    if kernel not in ROW_KERNELS:
        return None
    return float(light_bytes(kernel, 1.0, model, tp))


def row_floor_c0_kcycles(law, gpu) -> float:
    """The row law's fixed cost c0 (kcycles) on `gpu`: light_row_floor's host_c0_kcycles[gpu.host_cpu] where the
    constant lists the GPU's host (gpus.yaml host_cpu: a C2C-attached Grace platform), else c0_kcycles (x86 hosts)."""
    host = getattr(gpu, "host_cpu", None)
    by_host = law.get("host_c0_kcycles") or {}
    return float(by_host[host]) if host is not None and host in by_host else float(law["c0_kcycles"])


def row_floor(row_bytes_, gpu, constants: Constants | None = None):
    """Seconds: the row law's launch floor of a one-CTA-per-row kernel moving `row_bytes_` per row,
    c0 / f_clk + row_bytes / (b_cyc x f_clk) with light_row_floor {c0_kcycles, bytes_per_cycle} (c0 per host CPU
    where the constant carries host_c0_kcycles: `row_floor_c0_kcycles`)."""
    constants = constants or Constants.default()
    rb = np.asarray(row_bytes_, dtype=float)
    if np.any(~np.isfinite(rb)) or np.any(rb < 0):
        raise ValueError(f"row bytes must be finite and >= 0 (got {row_bytes_!r})")
    law = constants.get("light_row_floor", gpu)
    try:
        c0, b = float(row_floor_c0_kcycles(law, gpu)) * 1e3, float(law["bytes_per_cycle"])
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"light_row_floor must be {{c0_kcycles, bytes_per_cycle[, host_c0_kcycles: {{host: "
                         f"kcycles}}]}} (got {law!r})") from None
    if c0 < 0 or b <= 0:
        raise ValueError(f"light_row_floor needs c0_kcycles >= 0 and bytes_per_cycle > 0 (got {law!r})")
    f_clk = gpu.boost_mhz * 1e6
    return c0 / f_clk + rb / (b * f_clk)


def engine_light_time(kernel: str, tokens, model, gpu, tp: int = 1, constants: Constants | None = None,
                      floor_law: str = "flat", nbytes=None) -> np.ndarray:
    """Seconds for one launch of `kernel` over `tokens` new tokens under an engine's floor law
    (engines.yaml light.floor_law): `light_time` with the row law's floor where it applies.
    `nbytes` overrides the bytes (e.g. 0 for the floor alone)."""
    _check_law(floor_law)
    nb = light_bytes(kernel, tokens, model, tp) if nbytes is None else nbytes
    rb = row_bytes(kernel, model, tp) if floor_law == "row" else None
    return light_time(kernel, nb, gpu, constants, row_bytes=rb, floor_law=floor_law)


def add_rmsnorm_bytes(tokens, model, tp: int = 1):
    """Bytes of one fused residual add + RMSNorm launch: read the sublayer output and the residual, write the new
    residual and the normed activations (bf16, T x hidden each), plus the norm's weight: 2 (4 T h + h). The two
    kernels it replaces move rmsnorm's 2 (2 T h + h) and add's 2 (3 T h): the sum is not re-read."""
    T = np.asarray(tokens, dtype=float)
    h = model.hidden_size
    return 2.0 * (4 * T * h + h)


def add_rmsnorm_time(tokens, model, gpu, tp: int = 1, constants: Constants | None = None,
                     floor_law: str = "flat") -> np.ndarray:
    """Seconds of one fused residual add + RMSNorm launch: the RMSNorm kernel on its own bytes, plus the traffic the
    add brings into it (add_rmsnorm_bytes less the norm's: the residual read and the new residual written) streamed
    at the add law's bandwidth without the add's launch floor, as step.py prices the kernels an all-reduce absorbs.
    Under the row floor law (`floor_law` "row") the norm's floor is that of a row of the fused kernel (its bytes at
    one token). Never more than the two launches it replaces under the flat floors."""
    _check_law(floor_law)
    norm = light_bytes("rmsnorm", tokens, model, tp)
    extra = add_rmsnorm_bytes(tokens, model, tp) - norm
    rb = float(add_rmsnorm_bytes(1.0, model, tp)) if floor_law == "row" else None
    return (light_time("rmsnorm", norm, gpu, constants, row_bytes=rb, floor_law=floor_law)
            + light_time("add", extra, gpu, constants, floor_law=floor_law)
            - light_time("add", 0.0 * extra, gpu, constants, floor_law=floor_law))


def light_bytes(kernel: str, tokens, model, tp: int = 1):
    T = np.asarray(tokens, dtype=float)
    h = model.hidden_size
    q, kv = _head_widths(model, tp)
    inter = model.intermediate_size / tp
    if kernel == "rmsnorm":
        return 2.0 * (2 * T * h + h)
    if kernel == "add":
        return 2.0 * 3 * T * h
    if kernel == "rope":
        return 2.0 * 2 * T * (q + kv)
    if kernel == "act":
        up = 2 * inter if model.gated_mlp else inter
        return 2.0 * T * (up + inter)
    if kernel == "kv_write":
        return 2.0 * 2 * T * 2 * kv
    if kernel == "emb":
        return 2.0 * 2 * T * h
    raise ValueError(f"unknown light kernel {kernel!r} (known: {', '.join(LIGHT_KERNELS)})")


def stream_s(kernel: str, nbytes, gpu, constants: Constants | None = None, *, floor_law: str | None = None
             ) -> np.ndarray:
    """Seconds of light kernel `kernel`'s stream term alone (no launch floor): `nbytes` over
    BW x light_bw_scale x light_eta[kernel]. The one bandwidth law of a light kernel: `light_time`
    takes its smooth max with the floor, and the lab's attention-table comparison
    (experiments.attention.table_kv_write_s) adds the KV write's stream to a prefill cell. Under `floor_law`
    "flat" a kernel the constants' `light_sm_rate` lists streams by the SM-rate law (`sm_rate_stream_s`)."""
    constants = constants or Constants.default()
    etas = constants.get("light_eta", gpu)
    if kernel not in etas:
        raise ValueError(f"unknown light kernel {kernel!r} (known: {', '.join(sorted(etas))})")
    nb = np.asarray(nbytes, dtype=float)
    if np.any(nb < 0):
        raise ValueError(f"light stream of {kernel!r}: bytes must be >= 0")
    sm = sm_rate_law(kernel, gpu, constants) if floor_law == "flat" else None
    if sm is not None:
        return sm_rate_stream_s(nb, gpu.mem_bw * sm["eta_dram"], sm_bytes_per_s(gpu, sm["bytes_per_sm_cycle"]),
                                sm["q"])
    return nb / (gpu.mem_bw * float(constants.get("light_bw_scale", gpu)) * float(etas[kernel]))


def sm_bytes_per_s(gpu, bytes_per_sm_cycle):
    """The SM-side streaming rate of a light kernel: SMs x boost clock x bytes per SM-cycle (datasheet SMs, clock)."""
    return gpu.sms * boost_mhz(gpu) * 1e6 * np.asarray(bytes_per_sm_cycle, dtype=float)


def sm_rate_stream_s(nbytes, dram_bytes_per_s, sm_bytes_per_s_, q):
    """Seconds of the SM-rate law's stream: smax(bytes / DRAM rate, bytes / SM rate, q). Arrays broadcast (the
    fit passes one rate per cell)."""
    nb = np.asarray(nbytes, dtype=float)
    return smax(nb / np.asarray(dram_bytes_per_s, dtype=float), nb / np.asarray(sm_bytes_per_s_, dtype=float), q)


def sm_rate_law(kernel: str, gpu, constants: Constants) -> dict | None:
    """{eta_dram, q, bytes_per_sm_cycle, floor_us or floor_kcycles, floor_s, p} of `kernel` on `gpu` when the
    constants carry the SM-rate law for it (`light_sm_rate`, `light_dram_eta`); None else (the kernel keeps the
    light_bw_scale stream). A kernel's floor is `floor_us` (seconds, the same on every GPU: E1.1c's fits since wave 31)
    or `floor_kcycles` (boost-clock cycles, wave 30); `floor_s` is it in seconds on `gpu`."""
    law = constants.get("light_sm_rate", gpu, default=None)
    if law is None:
        return None
    try:
        k = law["kernels"].get(kernel)
        q = float(law["q"])
    except (KeyError, TypeError, AttributeError):
        raise ValueError(f"light_sm_rate must be {{q, kernels: {{kernel: {{...}}}}}} (got {law!r})") from None
    if k is None:
        return None
    units = [u for u in SM_RATE_FLOOR_UNITS if u in k]
    if len(units) != 1:
        raise ValueError(f"light_sm_rate of {kernel!r} needs exactly one floor, {' or '.join(SM_RATE_FLOOR_UNITS)} "
                         f"(got {sorted(k)})")
    try:
        out = {"q": q, "bytes_per_sm_cycle": float(k["bytes_per_sm_cycle"]), units[0]: float(k[units[0]]),
               "p": float(k["p"]), "eta_dram": float(constants.get("light_dram_eta", gpu))}
    except KeyError as e:
        raise ValueError(f"light_sm_rate of {kernel!r} needs bytes_per_sm_cycle, a floor, p and a "
                         f"light_dram_eta for {gpu.key} (missing {e})") from None
    if not (q > 0 and out["bytes_per_sm_cycle"] > 0 and out[units[0]] >= 0 and out["p"] > 0
            and out["eta_dram"] > 0):
        raise ValueError(f"light_sm_rate of {kernel!r} needs q, bytes_per_sm_cycle, p, light_dram_eta > 0 and "
                         f"{units[0]} >= 0 (got {out})")
    # the floor in seconds: microseconds (clock-free, wave 31) or kilocycles of the boost clock (wave 30)
    out["floor_s"] = out["floor_us"] * 1e-6 if units[0] == "floor_us" else out["floor_kcycles"] * 1e3 / (
        gpu.boost_mhz * 1e6)
    return out


def kv_write_stream_s(nbytes, gpu, constants: Constants | None = None) -> np.ndarray:
    """Seconds of the KV-cache write's stream term alone: `stream_s('kv_write', ...)`."""
    return stream_s("kv_write", nbytes, gpu, constants)


def light_time(kernel: str, nbytes, gpu, constants: Constants | None = None, *, row_bytes=None,
               floor_law: str | None = None) -> np.ndarray:
    """Seconds for one launch of `kernel` moving `nbytes`. With `row_bytes` (bytes per token row of
    a one-CTA-per-row kernel, ROW_KERNELS) the floor is the row law's (`row_floor`), else the
    kernel's flat light_floor_us. Under `floor_law` "flat" (the Sarathi-era kernels of Vidur's tables: the
    vllm-v0 / kernels profiles and the Vidur per-operator predictor) a kernel the constants' `light_sm_rate` lists
    takes the SM-rate law (`sm_rate_law`: floor in cycles, SM / DRAM stream); None (a light pass outside an
    engine's layer kernels, e.g. the fp8 quantise) and "row" keep the bandwidth-scale stream."""
    constants = constants or Constants.default()
    etas = constants.get("light_eta", gpu)
    if kernel not in etas:
        raise ValueError(f"unknown light kernel {kernel!r} (known: {', '.join(sorted(etas))})")
    if row_bytes is not None:
        if kernel not in ROW_KERNELS:
            raise ValueError(f"light kernel {kernel!r} is not one CTA per row: the row floor law covers "
                             f"{', '.join(ROW_KERNELS)} only")
        floor = row_floor(row_bytes, gpu, constants)
    if floor_law is not None:
        _check_law(floor_law)
    sm = sm_rate_law(kernel, gpu, constants) if floor_law == "flat" else None
    if sm is not None:  # the SM-rate law: floor in clock cycles, its own knee
        if row_bytes is None:
            floor = sm["floor_s"]
        return smax(floor, stream_s(kernel, nbytes, gpu, constants, floor_law=floor_law), sm["p"])
    if row_bytes is None:
        floors = constants.get("light_floor_us", gpu)
        floor = float(floors[kernel] if isinstance(floors, dict) else floors) * 1e-6
    ps = constants.get("light_p", gpu)
    p = float(ps[kernel] if isinstance(ps, dict) else ps)
    return smax(floor, stream_s(kernel, nbytes, gpu, constants), p)
