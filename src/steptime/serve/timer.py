"""Exact fast step times for the serving simulator.

`predict_steps` costs about half a millisecond a call; a replay runs 10^5-10^6 steps. The
step equation separates (see steptime.step):

    body   = max(A[T] + B_lm[N] + L * (a_dec + a_pre), D)
    t_step = body + (1 - ov) S[N] + ov max(0, S[N] - body) + samp[N]

A[T]   the GEMM, light-kernel and all-reduce terms: functions of the step's tokens T alone
B_lm   the LM head: a function of the step's requests N alone
S, samp the engine's scheduler floor and sampling: functions of N alone; ov the engine's
       host overlap (what of S hides under the GPU body)
D      the engine's kernel-dispatch floor: a function of T and of whether the step holds a
       prefill (CUDA-graph mode), tabulated for decode-only steps (T = N) and prefill steps
a_dec  decode-phase attention: the per-request sums it needs (bytes, work units) are
       linear in the requests' KV lengths, so it depends on (n_decode, sum of KV) only
a_pre  prefill-phase attention over the step's prefill chunks (per-request work, summed)

A, B_lm and H are tabulated once per run from `predict_steps` itself (its per-term
output), attention goes through steptime.terms.attention's own functions. Nothing is
approximated: `StepTimer.check` compares against `predict_steps` on random batches and
the constructor refuses to run if they differ by more than 1e-9 relative.
"""

from __future__ import annotations

import math

import numpy as np

from steptime.calibration import Constants, check_constants
from steptime.errors import ServeError
from steptime.specs import get_gpu, get_model
from steptime.specs.engines import check_engine_gpu, get_engine
from steptime.specs.moe import is_moe
from steptime.step import (ATTN_TERMS, BLOCK_TERMS, check_dense_layout, check_tp, memory_bytes, predict_steps,
                           resolve_dtype)
from steptime.terms import attention
from steptime.terms.gemm import smax, smax1
from steptime.terms.moe import MoEConstants
from steptime.validation import check_choice, check_f_clk, check_tp_heads

TOKEN_TERMS = tuple(t for t in BLOCK_TERMS if t not in ATTN_TERMS + ("lm_head",))
EXACT_RTOL = 1e-9


def _ndim(x) -> int:
    """np.ndim(x), answered without numpy's dispatch for a Python number or an ndarray (the simulator asks once or
    twice a step): the same number for every input."""
    t = type(x)
    if t is float or t is int or t is bool:
        return 0
    if t is np.ndarray:
        return x.ndim
    return np.ndim(x)


def _token_terms(model) -> tuple:
    """The terms that are functions of the step's tokens alone (a mixture-of-experts model's blocks included)."""
    if not is_moe(model):
        return TOKEN_TERMS
    from steptime import moe_step

    return tuple(t for t in moe_step.BLOCK_TERMS if t not in ATTN_TERMS + moe_step.MLA_GEMM_TERMS + ("lm_head",))


def _checked(model, gpu, tp, f_clk, kv_dtype, engine, dtype, constants, ep=1):
    """The timers' arguments checked at the boundary (one clear line each): model, GPU, engine
    (with the fitted engine constants of `constants`), a whole tp >= 1 the GPU's node holds, a finite
    f_clk > 0, known KV and projection dtypes (fp8 only where the GPU has it); for a mixture-of-experts
    model the expert dtype and the tp/ep layout (steptime.moe_step.check_layout), ep = 1 for a dense one.
    `dtype` None: the checkpoint's own precision (step.resolve_dtype, as predict_steps); returned resolved, the
    dtype the timer prices and sizes memory at."""
    check_constants(constants)
    model, gpu, engine = get_model(model), get_gpu(gpu), get_engine(engine, fitted=constants.engines)
    dtype = resolve_dtype(model, dtype, ServeError)  # a quantized config.json is served at its own precision only
    check_engine_gpu(engine, gpu)
    tp = check_tp(tp, gpu, ServeError)
    check_f_clk(f_clk, allow_boost=True)  # as predict_steps: the API caller chose it
    check_choice(kv_dtype, "KV-cache dtype kv_dtype", tuple(attention.KV_BYTES))
    if is_moe(model):
        from steptime import moe_step

        check_tp_heads(model, tp, ServeError)
        ep = moe_step.check_layout(model, gpu, tp, ep, dtype)[1]
        if getattr(model, "n_linear_layers", 0):
            raise ServeError(f"{model.key} has Gated DeltaNet linear-attention layers: the serving simulator's timer "
                             "does not represent them yet (predict_steps does: steptime.moe_step)")
    else:
        check_dense_layout(model, gpu, ep, dtype, ServeError)
        ep = 1
    return model, gpu, tp, engine, ep, dtype


class StepTimer:
    """Step time (seconds) of a batch composition, exact against `predict_steps`."""

    name = "steptime"  # its key in steptime.peers.PRODUCT

    def __init__(self, model, gpu, *, tp: int = 1, constants: Constants | None = None,
                 f_clk: float | None = None, kv_dtype: str = "bf16", engine=None, dtype: str | None = None,
                 max_tokens: int = 8192, max_requests: int = 256, check: bool = True, ep: int = 1,
                 moe_constants=None):
        self.constants = constants or Constants.default()
        self.model, self.gpu, self.tp, self.engine, self.ep, self.dtype = _checked(
            model, gpu, tp, f_clk, kv_dtype, engine, dtype, self.constants, ep)
        dtype = self.dtype
        self.f_clk = f_clk
        self.kv_dtype = kv_dtype
        m = self.model
        self.moe = is_moe(m)
        # MLA (steptime.moe_step): decode attention over the latent KV read once, and the per-head GEMMs that
        # depend on the step's split (absorbed for decode tokens, kv_b over each prefill's tokens and context)
        self.mla = self.moe and m.attention == "mla"
        self._mc = (moe_constants or MoEConstants.default()) if self.mla else None
        self._Mab, self._Mup, self._Mpt = [0.0], [0.0], [0.0]
        self._kw = dict(tp=self.tp, f_clk=f_clk, constants=self.constants, kv_dtype=kv_dtype, engine=self.engine,
                        dtype=dtype)
        if self.moe:  # the experts' layout and constants; a DP rank's step (steptime.moe_step)
            self._kw.update(ep=self.ep, moe_constants=moe_constants)
        self._token_terms = _token_terms(m)
        self.ov = float(self.engine.get("overlap", self.gpu, self.constants)) if self.engine.host_terms else 0.0
        self.L = m.num_hidden_layers
        self.heads = m.num_attention_heads // self.tp
        self.kv_heads = max(1, m.num_key_value_heads // self.tp)
        self.head_dim = m.head_dim
        # sliding-window layers (gpt-oss): attention over min(KV, window) on n_slide of the L layers
        self.n_slide, self.window = 0, 0
        if self.moe:
            from steptime import moe_step

            self.heads, self.kv_heads, self.head_dim = moe_step.attention_geometry(m, self.tp)
            self.n_slide, self.window = moe_step.sliding_layers(m), m.attention_window
        self.L_full = self.L - self.n_slide
        self.needs_kvs = bool(self.n_slide)  # decode_steps needs each request's KV, not only their sum
        self.fc = attention.attention_constants(self.gpu, self.constants)
        if self.mla:
            self._grow_mla(16, 16)
        # decode attention: per-request bytes = b0 + b1 * kv, work units = u0 (linear in kv)
        r = self._req_terms(np.ones(2), np.array([0.0, 1.0]))
        self._b0 = float(r["bytes"][0])
        self._b1 = float(r["bytes"][1] - r["bytes"][0])
        self._u0 = float(r["units"][0])
        kvb = float(attention._kvb(kv_dtype))
        fp8 = kvb == 1.0
        f = float(self.constants.get("f_clk", self.gpu)) if f_clk is None else float(f_clk)
        self._pf = (float(self.heads), float(self.kv_heads), float(self.head_dim), kvb)
        self._q_pf = attention.prefill_q_tile(self.gpu)  # causal prefill query tile (SM fill)
        self._eta_c = f * self.fc["attn_eta_ceil"] * (self.fc["attn_fp8_compute"] if fp8 else 1.0)
        self._exp = float(attention.exp_time(4.0, 1.0, self.gpu, self.fc, f))  # s per score element (exp_time)
        self._unit = self.fc["attn_fp8_unit"] if fp8 else 1.0
        self._pf_heads = float(attention.prefill_unit_heads(self.heads, self.kv_heads, self.fc))  # prefill units
        # scalar constants of decode attention (the hot path works in Python floats)
        fc = self.fc
        self._dp = float(fc["attn_overlap_p"])
        self._dinvp = 1.0 / self._dp
        self._dunit = self._u0 * fc["attn_cta_us"] * 1e-6 / self.gpu.sms
        self._dmem = 1.0 / (self.gpu.mem_bw * fc["attn_eta_mem"])
        # an fp8 cache's stream is also bounded by the SM-side fp8 read rate (attention.fp8_read_time): the
        # stream time is linear in the bytes on both sides, so the bound is the slower of the two per byte
        self._fp8 = fp8
        rate = float(attention.fp8_read_bandwidth(self.gpu, fc)) if fp8 else 0.0
        if rate > 0:
            self._dmem = max(self._dmem, 1.0 / rate)
        self._dfloor = fc["attn_floor_us"] * 1e-6
        # the decode floor without FA2's GQA query-transposition copy (attention.swap_copy: one request, or
        # H_kv < 2, or no GQA); with it, the floor as read (attention._decode_floor_rel)
        self._dfloor_free = self._dfloor * float(attention._decode_floor_rel(False, fc))
        # whether a batch of two or more pays the copy (the rule lives in attention.swap_copy alone)
        self._dgqa = bool(attention.swap_copy(2, self.heads, self.kv_heads))
        # the split-KV combine (attention.split_kv): its floor share and the KV tile it splits past
        self._dsplit = self._dfloor * float(fc.get("attn_split_rel", 0.0))
        self._dtile = float(attention.split_tile(self.head_dim, fc))
        self._ctile = float(attention.split_count_tile(self.head_dim, fc))  # the blocks `_splits_of` caches counts by
        self._nsplit = {}  # (requests, KV blocks) -> split count (`_splits_of`): the heuristic scans 128
        self._dfl = {}  # (requests, KV blocks, splits) -> one layer's decode floor (`_dfloor1`)
        self._dn = {}  # requests -> decode attention's factors of the request count alone (`_decode_attention_n`)
        # FA2's unswapped decode (attention.unswapped: H_q == H_kv on a lane with a stream rate): no split-KV,
        # the copy-free floor x (1 - attn_noswap_rel), each (request, KV head) stream bounded by attention.stream_rate
        self._unsw = bool(attention.unswapped(self.heads, self.kv_heads, fc))
        if self._unsw:
            self._dfloor_free = self._dfloor * float(attention._decode_floor_rel(False, fc, False, True))
            self._dsplit = 0.0
        # FlashAttention-2's per-split combine cost (attention.split_count / split_us_s) where the decode's splits
        # are priced (attention.decode_splits: a per-split cost, and not unswapped); 0: none
        priced = attention.decode_splits(fc, self._unsw, lambda: 1.0) is not None
        self._dsplit_us = float(fc["attn_split_us"]) if priced else 0.0
        # one request's streams' rate (attention.stream_rate: attn_stream_clk from the datasheet, else attn_stream_gbs)
        self._srate = float(attention.stream_rate(self.gpu, fc)) * float(self.kv_heads)
        # and the bytes of one request's streams that bound does not charge (attention.stream_first_bytes: the floor
        # holds each stream's first block on the clocks law); > 0 only there: the stream time is then affine in the
        # bytes (`_tmem`), else linear (`_dmem_n`)
        self._soff = float(attention.stream_first_bytes(fc)) * float(self.kv_heads) if self._unsw else 0.0
        # FA3's split CTAs (attention.split_ctas / cta_read_time: a decode reads at most split_ctas x attn_cta_gbs);
        # seconds per byte of that bound per request count, cached (`_cta_dmem`); 0 rate: no bound
        self._crate = float(fc.get("attn_cta_gbs", 0.0)) * 1e9
        self._cdm = {}
        self._ar = np.arange(1024, dtype=float)
        self.A = np.zeros(1)
        self.Dp = np.zeros(1)
        self.B = np.zeros(1)
        self.Dd = np.zeros(1)
        self.S = np.zeros(1)
        self.Sm = np.zeros(1)
        self._grow_tokens(max_tokens)
        self._grow_requests(max_requests)
        if check:
            err = self.check()
            if err > EXACT_RTOL:
                raise ServeError(f"fast step timer differs from predict_steps by {err:.2e} (relative); "
                                 "the step equation changed shape: update steptime.serve.timer")

    # -- tables --------------------------------------------------------------------------
    def _req_terms(self, new, kv):
        return attention.attention_request_terms(new, kv, self.heads, self.kv_heads, self.head_dim, self.gpu,
                                                 self.constants, self.kv_dtype, self.f_clk, self.fc)

    def _grow_tokens(self, t_max: int) -> None:
        t_max = int(max(t_max, 2 * (len(self.A) - 1), 16))
        T = np.arange(1, t_max + 1)
        r = predict_steps(self.model, self.gpu, np.arange(t_max), T, np.zeros(t_max), t_max, **self._kw,
                          rows="work")  # a row holds a whole step's tokens: not bounded by one request's context
        self.A = np.concatenate([[0.0], sum(r["terms_ms"][t] for t in self._token_terms) * 1e-3])
        # dispatch floor of a step holding a prefill of T tokens (row T = 1 is a decode: unused)
        self.Dp = np.concatenate([[0.0], (r["terms_ms"]["dispatch_floor"] + r["hidden_ms"]["dispatch_floor"]) * 1e-3])
        self._Al, self._Dpl = self.A.tolist(), self.Dp.tolist()

    def _grow_requests(self, n_max: int) -> None:
        n_max = int(max(n_max, 2 * (len(self.B) - 1), 16))
        N = np.arange(1, n_max + 1)
        try:  # one row per request of each step size 1..n_max: n_max (n_max + 1) / 2 rows
            sid = np.repeat(np.arange(n_max), N)
            r = predict_steps(self.model, self.gpu, sid, np.ones(sid.size), np.zeros(sid.size), n_max, **self._kw)
        except MemoryError:
            raise ServeError(f"steps of up to {n_max:,} running requests: the step timer's table of "
                             f"{n_max * (n_max + 1) // 2:,} rows does not fit in memory; lower --max-num-seqs "
                             "(or a static --batch)") from None
        self.B = np.concatenate([[0.0], r["terms_ms"]["lm_head"] * 1e-3])
        self.Dd = np.concatenate([[0.0], (r["terms_ms"]["dispatch_floor"] + r["hidden_ms"]["dispatch_floor"]) * 1e-3])
        self.S = np.concatenate([[0.0], (r["terms_ms"]["host"] + r["hidden_ms"]["host"]) * 1e-3])
        self.Sm = np.concatenate([[0.0], r["terms_ms"]["sampling"] * 1e-3])
        self._Bl, self._Ddl, self._Sl, self._Sml = self.B.tolist(), self.Dd.tolist(), self.S.tolist(), self.Sm.tolist()
        if self.moe:  # a decode-only step's token terms (its all-to-all runs in the low-latency mode)
            self.Ad = np.concatenate([[0.0], sum(r["terms_ms"][t] for t in self._token_terms) * 1e-3])
            self._Adl = self.Ad.tolist()

    def _grow_mla(self, n_dec: int, up: int, pt: int = 0) -> None:
        """Tables of the MLA per-head terms over all layers (seconds): the absorbed BMMs by decode tokens, kv_b and
        the K / V copies by prefill rows, the per-token passes by prefill tokens (steptime.moe_step.mla_gemm_times,
        the function predict_steps sums)."""
        from steptime import moe_step

        for attr, key, size in (("_Mab", "absorb", n_dec), ("_Mup", "kv_up", up), ("_Mpt", "prefill_tok", pt)):
            have = len(getattr(self, attr))
            if size < have:
                continue
            x = np.arange(max(size + 1, 2 * have))
            g = moe_step.mla_gemm_times(self.model, self.gpu, self.tp, x if key == "absorb" else 0 * x,
                                        x if key == "kv_up" else 0 * x, dtype=self.dtype, constants=self.constants,
                                        mc=self._mc, f_clk=self.f_clk,
                                        prefill_tokens=x if key == "prefill_tok" else 0 * x)
            setattr(self, attr, (self.L * g[key]).tolist())

    def _mla1(self, n_dec: int, up: int, pt: int = 0) -> float:
        """MLA per-head terms of one step (seconds, all layers): 0 for a GQA model. `pt`: its prefill tokens."""
        if not self.mla:
            return 0.0
        if n_dec >= len(self._Mab) or up >= len(self._Mup) or pt >= len(self._Mpt):
            self._grow_mla(n_dec, up, pt)
        return self._Mab[n_dec] + self._Mup[up] + self._Mpt[pt]

    def _A_decode(self):
        """Token terms of a decode-only step of T = N tokens (a list, the hot path's)."""
        return self._Adl if self.moe else self._Al

    # -- memory --------------------------------------------------------------------------
    def memory_bytes(self, kv_tokens) -> float:
        """Weights plus KV cache on one GPU (bytes) at this timer's layout and dtypes: a mixture-of-experts
        model's experts sharded by EP (or sliced by TP) and its latent KV for MLA (steptime.moe_step)."""
        if self.moe:
            from steptime import moe_step

            return moe_step.memory_bytes(self.model, kv_tokens, self.tp, self.ep, dtype=self.dtype,
                                         kv_dtype=self.kv_dtype)
        return memory_bytes(self.model, kv_tokens, self.tp, weight_dtype=self.dtype, kv_dtype=self.kv_dtype)

    def kv_bytes_per_token(self) -> float:
        """KV-cache bytes one token adds on one GPU."""
        if self.moe:
            return self.memory_bytes(1) - self.memory_bytes(0)
        return (memory_bytes(self.model, 1, self.tp, kv_dtype=self.kv_dtype)
                - memory_bytes(self.model, 0, self.tp, kv_dtype=self.kv_dtype))

    def _total(self, blocks, disp, N):
        body = np.maximum(blocks, disp)
        S = self.S[N]
        return body + (1.0 - self.ov) * S + self.ov * np.maximum(0.0, S - body) + self.Sm[N]

    def _total1(self, blocks: float, disp: float, N: int) -> float:
        """`_total` of one step in Python floats (same operations, same order)."""
        body = blocks if blocks >= disp else disp
        S = self._Sl[N]
        hid = S - body
        return body + (1.0 - self.ov) * S + self.ov * (hid if hid > 0.0 else 0.0) + self._Sml[N]

    # -- attention -----------------------------------------------------------------------
    def decode_attention(self, n_dec, sum_kv):
        """Decode-phase attention of one layer (seconds), arrays over steps.

        attention.combine for a decode-only group (no compute branch, no SM-fill factor, cold
        L2), written out so a scalar costs microseconds; `check` holds it to combine's value.
        """
        if self.mla:
            return self._mla_decode(n_dec, sum_kv)
        n = np.asarray(n_dec, dtype=float)
        nb = n * self._b0 + self._b1 * np.asarray(sum_kv, dtype=float)
        fc = self.fc
        p = fc["attn_overlap_p"]
        t_units = n * self._u0 * fc["attn_cta_us"] * 1e-6 / self.gpu.sms
        t_mem = self._tmem(n, nb)
        floor = np.where(attention.swap_copy(n, self.heads, self.kv_heads), self._dfloor, self._dfloor_free)
        floor = floor + np.where(self._split(n, np.asarray(sum_kv, dtype=float)), self._dsplit, 0.0)
        if self._dsplit_us:
            floor = floor + self._split_us(n, np.asarray(sum_kv, dtype=float))
        return np.where(n > 0, floor + smax(t_units, t_mem, p), 0.0)

    def _decode_attention_n(self, n: int, sum_kv) -> np.ndarray:
        """`decode_attention(np.full(k, n), sum_kv)` for steps of one request count `n` (a run of decode steps):
        the factors of `n` alone (the GQA copy's floor, the units' time, the seconds per byte: exact arithmetic on a
        one-element array) computed once per `n` and cached, the rest over the steps as decode_attention computes
        it, element for element (smax gets arrays of the same shape). The affine stream bound (`_soff`) and MLA go
        through decode_attention itself."""
        s = np.asarray(sum_kv, dtype=float)
        if self.mla or self._soff or not n > 0:
            return self.decode_attention(np.full(s.shape, float(n)), s)
        c = self._dn.get(n)
        if c is None:
            na = np.array([float(n)])
            fc = self.fc
            tu = na * self._u0 * fc["attn_cta_us"] * 1e-6 / self.gpu.sms
            fl = np.where(attention.swap_copy(na, self.heads, self.kv_heads), self._dfloor, self._dfloor_free)
            c = self._dn[n] = ((na * self._b0)[0], tu[0], np.broadcast_to(self._dmem_n(na), (1,))[0], fl[0])
        nb0, tu, dm, fl = c
        fn = float(n)
        t_mem = (nb0 + self._b1 * s) * dm
        floor = fl + np.where(self._split(fn, s), self._dsplit, 0.0)
        if self._dsplit_us:
            floor = floor + self._split_us(fn, s)
        return floor + smax(np.full(s.shape, tu), t_mem, self.fc["attn_overlap_p"])

    def _split_us(self, n, sum_kv):
        """attention.split_us_s of `n` decode requests holding `sum_kv` cached tokens, at their mean KV length
        (attention._group_splits' rule), the split counts cached per (requests, KV blocks) (`_splits_of`); Python
        numbers take a plain-float path (the simulator asks one step at a time)."""
        if _ndim(n) or _ndim(sum_kv):
            n_a, kv_a = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(sum_kv, dtype=float))
            mean = np.divide(kv_a, n_a, out=np.zeros(n_a.shape), where=n_a > 0)
            blocks = np.maximum(1.0, np.ceil(mean / self._ctile))
            # each distinct (requests, KV blocks) pair once (a run of steps repeats a few pairs many times)
            pairs, inv = np.unique(np.stack([n_a.ravel(), blocks.ravel()], axis=1), axis=0, return_inverse=True)
            got = np.array([self._splits_of(float(nn), float(bb)) for nn, bb in pairs], dtype=float)
            return attention.split_us_s(got[inv.ravel()].reshape(n_a.shape), self.fc)
        nn = float(n)
        mean = float(sum_kv) / nn if nn > 0 else 0.0
        splits = self._splits_of(nn, max(1.0, math.ceil(mean / self._ctile)) if math.isfinite(mean) else math.inf)
        return self._dsplit_us * 1e-6 * splits if splits > 1 else 0.0

    def _splits_of(self, n: float, blocks: float) -> float:
        """attention.split_count of `n` requests at `blocks` KV blocks, cached per (requests, KV blocks)."""
        key = (n, blocks)
        splits = self._nsplit.get(key)
        if splits is None:
            splits = self._nsplit[key] = float(attention.decode_splits(self.fc, self._unsw, lambda: attention.split_count(
                n, self.heads, self.kv_heads, blocks * self._ctile, self.head_dim, self.gpu, self.fc)))
        return splits

    def _tmem(self, n, nb):
        """Decode stream seconds of a step of `n` requests reading `nb` bytes: nb x `_dmem_n`, or, where the unswapped
        stream's bound leaves each stream's first block to the floor (`_soff` > 0), max(nb / (BW eta_mem),
        (nb - n _soff) / (n H_kv stream_rate)) (attention.stream_read_time). Python numbers give a float, arrays an
        array."""
        if not self._soff:
            return nb * self._dmem_n(n)
        if _ndim(n) or _ndim(nb):
            n, nb = np.broadcast_arrays(np.asarray(n, dtype=float), np.asarray(nb, dtype=float))
            bound = np.divide(nb - n * self._soff, n * self._srate, out=np.zeros(n.shape), where=n > 0)
            return np.maximum(nb * self._dmem, bound)
        return max(nb * self._dmem, (nb - n * self._soff) / (n * self._srate)) if n > 0 else nb * self._dmem

    def _dmem_n(self, n):
        """Seconds per decode byte for a step of `n` requests: 1 / (BW eta_mem) (or the fp8 read's bound), and, for
        an unswapped decode on the GB/s law, at least 1 / (n H_kv stream_rate) (attention.stream_read_time: both
        sides are linear in the bytes; on the clocks law the bound is affine: `_tmem`), or, on a lane with attn_cta_gbs, at least 1 / (split_ctas x attn_cta_gbs)
        (`_cta_dmem`). A Python number gives a float, an array an array."""
        if not self._unsw:
            return self._cta_dmem(n) if self._crate > 0 else self._dmem
        if _ndim(n):
            n = np.asarray(n, dtype=float)
            return np.maximum(self._dmem, np.divide(1.0, n * self._srate, out=np.zeros(n.shape), where=n > 0))
        return max(self._dmem, 1.0 / (n * self._srate)) if n > 0 else self._dmem

    def _cta_dmem(self, n):
        """`_dmem_n` on a lane with a per-CTA read rate: at least 1 / (split_ctas x attn_cta_gbs) seconds per byte for
        `n` decode requests (attention.cta_read_time; both sides linear in the bytes), cached per request count."""
        if _ndim(n):
            n = np.asarray(n, dtype=float)
            ct = attention.split_ctas(n * self.kv_heads, self.gpu, self.fc)
            return np.maximum(self._dmem, np.divide(1.0, ct * self._crate, out=np.zeros(n.shape), where=ct > 0))
        n = float(n)
        dm = self._cdm.get(n)
        if dm is None:
            ct = float(attention.split_ctas(n * self.kv_heads, self.gpu, self.fc))
            dm = self._cdm[n] = max(self._dmem, 1.0 / (ct * self._crate)) if ct > 0 else self._dmem
        return dm

    def _split(self, n, sum_kv):
        """attention.split_kv for `n` decode requests holding `sum_kv` cached tokens (its group rule:
        streams n x H_kv below the SMs, mean KV past one split tile), the timer's one copy of the rule:
        plain arithmetic, so Python numbers give a bool and numpy arrays an array."""
        return (n * self.kv_heads < self.gpu.sms) & (sum_kv > n * self._dtile)

    def decode_attention1(self, n: int, sum_kv: float) -> float:
        """`decode_attention` of one step in Python floats (n > 0)."""
        if self.mla:
            return float(self._mla_decode(n, sum_kv)[()])
        t_units = n * self._dunit
        t_mem = self._tmem(n, n * self._b0 + self._b1 * sum_kv)
        return self._dfloor1(n, sum_kv) + (t_units ** self._dp + t_mem ** self._dp) ** self._dinvp

    def _dfloor1(self, n: int, sum_kv: float) -> float:
        """`_dfloor_n` of one step (Python numbers, n > 0), cached per (requests, KV blocks of `_splits_of`, whether
        the step splits (`_split`)): the three facts the floor reads, computed as `_split_us` and `_split` compute
        them, so a cached value is the one `_dfloor_n` returns for any step of the same key."""
        nn = float(n)
        mean = float(sum_kv) / nn
        blocks = max(1.0, math.ceil(mean / self._ctile)) if math.isfinite(mean) else math.inf
        key = (nn, blocks, bool(self._split(n, sum_kv)))
        v = self._dfl.get(key)
        if v is None:
            v = self._dfl[key] = self._dfloor_n(n, sum_kv)
        return v

    def _dfloor_n(self, n, sum_kv):
        """One layer's decode-attention floor for a step of `n` decode requests (n > 0) holding `sum_kv`
        cached tokens (a float, or an array over steps): the GQA copy's rule and the split-KV combine's."""
        base = self._dfloor if (self._dgqa and n >= 2) else self._dfloor_free
        if self._dsplit_us:
            base = base + self._split_us(n, sum_kv)
        if not self._dsplit:
            return base
        split = self._split(n, sum_kv)
        if _ndim(split):
            return base + np.where(split, self._dsplit, 0.0)
        return base + (self._dsplit if split else 0.0)

    def _mla_decode(self, n_dec, sum_kv):
        """MLA decode attention of one layer (seconds): steptime.moe_step.mla_decode_time."""
        from steptime import moe_step

        return moe_step.mla_decode_time(self.model, self.gpu, self.tp, n_dec, sum_kv, kv_dtype=self.kv_dtype,
                                        mc=self._mc)

    def _decode_attention_ref(self, n_dec, sum_kv):
        if self.mla:
            return self._mla_decode(n_dec, sum_kv)
        n = np.atleast_1d(np.asarray(n_dec, dtype=float))
        nb = n * self._b0 + self._b1 * np.asarray(sum_kv, dtype=float)
        copy = attention.swap_copy(n, self.heads, self.kv_heads)
        # the group rule of attention._group_split on n requests of the mean KV sum_kv / n
        mean = np.divide(np.asarray(sum_kv, dtype=float), n, out=np.zeros(n.shape), where=n > 0)
        split = attention.split_kv(n, self.kv_heads, mean, self.head_dim, self.gpu, self.fc) & (n > 0)
        return attention.combine(np.zeros_like(nb), nb, n * self._u0, n, self.gpu, self.fc, tiles=np.zeros_like(nb),
                                 prefill=np.zeros(nb.shape, dtype=bool),
                                 decode_floor_rel=attention._decode_floor_rel(copy, self.fc, split, self._unsw),
                                 fp8_read=np.full(nb.shape, self._fp8),
                                 splits=attention.decode_splits(self.fc, self._unsw, lambda: attention.split_count(
                                     n, self.heads, self.kv_heads, mean, self.head_dim, self.gpu, self.fc)),
                                 unsplit_streams=n * self.kv_heads if self._unsw else None,
                                 split_ctas=attention.decode_ctas(n * self.kv_heads, (n > 0) & ~self._unsw, self.gpu,
                                                                  self.fc))["t"]

    def prefill_attention(self, new, kv) -> float:
        """Prefill-phase attention of one layer (seconds) for one step's chunks (new > 1).

        attention_request_terms + combine for a prefill group, written out in Python floats
        (a step holds a handful of chunks; numpy's per-call overhead dominated); `check`
        holds it to the library functions (`_prefill_attention_ref`).
        """
        if self.mla:  # not absorbed: steptime.moe_step.mla_prefill_time, predict_steps' function
            return self._mla_prefill(new, kv)
        hq, hkv, d, kvb = self._pf
        fc = self.fc
        tc = nb = un = wk = lg = 0.0
        qp = self._q_pf
        for s, c in zip(new, kv):
            s = float(s)
            c = float(c)
            qt = math.ceil(s / attention.Q_TILE)
            npf = math.ceil(s / qp)
            flops_eff = 4.0 * hq * d * (s * c + s * (s + fc["attn_causal_tile"]) / 2.0)
            eta = self._eta_c * (s / (s + fc["attn_c_tokens"]))
            tc += flops_eff / (self.gpu.peak_flops * eta) + flops_eff / (4.0 * d) * self._exp  # attention.exp_time
            nb += (c + s) * 2.0 * hkv * d * kvb + 4.0 * s * hq * d + 4.0 * s * hkv * d
            un += self._pf_heads * qt * self._unit
            wk += hq * npf * (c / qp + (npf + 1.0) / 2.0)  # attention.prefill_tiles
            lg = max(lg, c / qp + npf)
        ti = wk / lg
        tc /= float(attention.fill_eta(ti, self.gpu.sms, fc))
        p = fc["attn_overlap_p"]
        t_units = un * fc["attn_cta_us"] * 1e-6 / self.gpu.sms
        t_work = max(tc, nb / (self.gpu.mem_bw * fc["attn_eta_mem"]))
        return fc["attn_floor_us"] * 1e-6 * fc["attn_prefill_floor_rel"] + smax1(t_units, t_work, p)

    def _mla_prefill(self, new, kv) -> float:
        from steptime import moe_step

        return float(moe_step.mla_prefill_time(self.model, self.gpu, self.tp, np.asarray(new, dtype=float),
                                               np.asarray(kv, dtype=float), mc=self._mc).sum())

    def _prefill_attention_ref(self, new, kv) -> float:
        if self.mla:
            return self._mla_prefill(new, kv)
        hq, hkv, d, _ = self._pf  # MLA prefill's geometry differs from decode's (not absorbed)
        r = attention.attention_request_terms(np.asarray(new, dtype=float), np.asarray(kv, dtype=float), int(hq),
                                              int(hkv), d, self.gpu, self.constants, self.kv_dtype, self.f_clk,
                                              self.fc)
        a = attention.combine(np.array([r["t_compute"].sum()]), np.array([r["bytes"].sum()]),
                              np.array([r["units"].sum()]), np.array([float(len(new))]), self.gpu, self.fc,
                              tiles=np.array([r["work"].sum() / r["longest"].max()]), prefill=np.array([True]))
        return float(a["t"][0])

    # -- steps ---------------------------------------------------------------------------
    def _ensure(self, T: int, N: int) -> None:
        if T >= len(self.A):
            self._grow_tokens(T)
        if N >= len(self.B):
            self._grow_requests(N)

    def step(self, new, kv) -> float:
        """One step (seconds): `new[i]` tokens of request i over `kv[i]` cached tokens."""
        T = int(sum(new))
        N = len(new)
        self._ensure(T, N)
        if self.n_slide:
            return self._step_windowed(np.asarray(new), np.asarray(kv))
        dec_kv = [k for s, k in zip(new, kv) if s == 1]
        att = 0.0
        mla = (self._mla1(len(dec_kv), int(sum(s + k for s, k in zip(new, kv) if s > 1)), int(sum(s for s in new if s > 1)))
               if self.mla else 0.0)
        if dec_kv:
            att += float(self.decode_attention(len(dec_kv), sum(dec_kv))[()])
        if len(dec_kv) < N:
            pn = [s for s in new if s > 1]
            pk = [k for s, k in zip(new, kv) if s > 1]
            att += self.prefill_attention(pn, pk)
        blocks = (self.Ad if self.moe and len(dec_kv) == N else self.A)[T] + self.B[N] + self.L * att + mla
        return float(self._total(blocks, self.Dd[N] if len(dec_kv) == N else self.Dp[T], N))

    def _step_windowed(self, new, kv) -> float:
        """One step of a model with sliding-window layers: full attention on L - n_slide layers, attention
        over min(KV, window) on the other n_slide."""
        T, N = int(new.sum()), len(new)
        self._ensure(T, N)
        dec = new == 1
        nd = int(dec.sum())
        full = win = 0.0
        if nd:
            kd = kv[dec].astype(float)
            full += self.decode_attention1(nd, float(kd.sum()))
            win += self.decode_attention1(nd, float(np.minimum(kd, self.window).sum()))
        if nd < N:
            pn, pk = new[~dec].tolist(), kv[~dec]
            full += self.prefill_attention(pn, pk.tolist())
            win += self.prefill_attention(pn, np.minimum(pk, self.window).tolist())
        att = self.L_full * full + self.n_slide * win
        if self.mla:
            att += self._mla1(nd, int((new[~dec] + kv[~dec]).sum()), int(new[~dec].sum()))
        if nd == N:
            return self._total1(self._A_decode()[T] + self._Bl[N] + att, self._Ddl[N], N)
        return self._total1(self._Al[T] + self._Bl[N] + att, self._Dpl[T], N)

    def step_arrays(self, new: np.ndarray, kv: np.ndarray) -> float:
        """`step` for integer arrays (the simulator's hot path)."""
        if self.n_slide:
            return self._step_windowed(new, kv)
        T = int(new.sum())
        N = len(new)
        if T >= len(self._Al) or N >= len(self._Bl):
            self._ensure(T, N)
        if T == N:  # every request decodes one token
            att = self.decode_attention1(N, float(kv.sum()))
            mla = self._mla1(N, 0) if self.mla else 0.0
            return self._total1(self._A_decode()[T] + self._Bl[N] + self.L * att + mla, self._Ddl[N], N)
        dec = new == 1
        nd = int(dec.sum())
        att = 0.0
        if nd:
            att += self.decode_attention1(nd, float(kv[dec].sum()))
        pre = ~dec
        att += self.prefill_attention(new[pre].tolist(), kv[pre].tolist())
        mla = self._mla1(nd, int((new[pre] + kv[pre]).sum()), int(new[pre].sum())) if self.mla else 0.0
        return self._total1(self._Al[T] + self._Bl[N] + self.L * att + mla, self._Dpl[T], N)

    def decode_steps(self, n: int, sum_kv0: float, k: int, kvs=None) -> np.ndarray:
        """k consecutive pure-decode steps of the same n requests, KV sum growing by n a step (`kvs`, each
        request's KV at the first step, where `needs_kvs`: a sliding window caps each request's KV)."""
        if n >= len(self._Al) or n >= len(self._Bl):
            self._ensure(n, n)
        if self.n_slide:
            if kvs is None:
                raise ServeError(f"{self.model.key} has sliding-window layers: decode_steps needs each request's KV")
            j = np.arange(k, dtype=float)
            win = np.minimum(np.asarray(kvs, dtype=float)[None, :] + j[:, None], self.window).sum(axis=1)
            att = self.L_full * self._decode_attention_n(n, sum_kv0 + n * j) + self.n_slide * self._decode_attention_n(n,
                                                                                                               win)
            return self._total(att + self._A_decode()[n] + self._Bl[n] + self._mla1(n, 0), self._Ddl[n], n)
        if self.mla:  # the latent read follows the GEMM law (not linear in the KV sum): evaluated per step
            j = np.arange(k, dtype=float)
            att = self.L * self.decode_attention(np.full(k, float(n)), sum_kv0 + n * j)
            return self._total(att + self._A_decode()[n] + self._Bl[n] + self._mla1(n, 0), self._Ddl[n], n)
        if k > len(self._ar):
            self._ar = np.arange(max(k, 2 * len(self._ar)), dtype=float)
        p = self._dp
        # bytes of step j: n b0 + b1 (sum_kv0 + n j), over the achieved bandwidth
        if self._soff:  # the unswapped stream's bound is affine in the bytes (`_tmem`)
            x = self._ar[:k] * (self._b1 * n)
            x += n * self._b0 + self._b1 * sum_kv0
            x = self._tmem(n, x)
        else:
            dm = self._dmem_n(n)
            x = self._ar[:k] * (self._b1 * n * dm)
            x += (n * self._b0 + self._b1 * sum_kv0) * dm
        x **= p
        x += (n * self._dunit) ** p
        x **= self._dinvp
        x += self._dfloor_n(n, sum_kv0 + n * self._ar[:k])  # one layer's decode attention
        x *= self.L
        x += self._A_decode()[n] + self._Bl[n]
        body = np.maximum(x, self._Ddl[n], out=x)
        S = self._Sl[n]
        if self.ov:
            hid = S - body
            np.maximum(hid, 0.0, out=hid)
            hid *= self.ov
            body += (1.0 - self.ov) * S
            body += hid
        else:
            body += S
        body += self._Sml[n]
        return body

    def decode_steps_list(self, n: int, sum_kv0: float, k: int, until: float = math.inf, t0: float = 0.0) -> list:
        """`decode_steps` for a short run, in Python floats (the same operations in the same order; a numpy call
        costs more than a few scalar steps). Models without sliding-window layers. `until`: stop after the first
        step whose end, t0 plus the running sum of the step times (summed left to right), reaches it."""
        if n >= len(self._Al) or n >= len(self._Bl):
            self._ensure(n, n)
        p, invp, L = self._dp, self._dinvp, self.L
        dm = self._dmem_n(n)
        c1 = self._b1 * n * dm
        c0 = (n * self._b0 + self._b1 * sum_kv0) * dm
        u = (n * self._dunit) ** p
        fl = self._dfloor_n(n, sum_kv0)
        # the split-KV combine is paid from the step whose mean KV passes one tile (steps grow n tokens each);
        # where the batch cannot split, fl_split is fl
        fl_split, kv_split = self._dfloor_n(n, math.inf), n * self._dtile
        ab = self._A_decode()[n] + self._Bl[n]
        D, S, Sm, ov = self._Ddl[n], self._Sl[n], self._Sml[n], self.ov
        out = []
        end = 0.0
        soff, b1n, b0n = self._soff, self._b1 * n, n * self._b0 + self._b1 * sum_kv0
        tmem, dsu, dfl1 = self._tmem, self._dsplit_us, self._dfloor1
        for j in range(k):
            if soff:  # the unswapped stream's bound is affine in the bytes (`_tmem`)
                x = tmem(n, float(j) * b1n + b0n)
            else:
                x = float(j) * c1
                x += c0
            x = (x ** p + u) ** invp
            if dsu:  # the per-split cost moves with the KV length: the floor of this step
                x += dfl1(n, sum_kv0 + n * float(j))
            else:
                x += fl_split if sum_kv0 + n * float(j) > kv_split else fl
            x *= L
            x += ab
            body = x if x >= D else D
            if ov:
                hid = S - body
                hid = hid if hid > 0.0 else 0.0
                hid *= ov
                body += (1.0 - ov) * S
                body += hid
            else:
                body += S
            body += Sm
            out.append(body)
            end += body
            if end + t0 >= until:
                break
        return out

    def check(self, n_batches: int = 40, seed: int = 0) -> float:
        """Largest relative difference against predict_steps over random mixed batches."""
        rng = np.random.default_rng(seed)
        ctx = self.model.max_position_embeddings
        worst = 0.0
        rows_sid, rows_new, rows_kv, mine = [], [], [], []
        for b in range(n_batches):
            n_dec = int(rng.integers(0, 64))
            n_pre = int(rng.integers(0 if n_dec else 1, 4))
            new = [1] * n_dec + [int(x) for x in rng.integers(2, 2048, n_pre)]
            kv = [int(x) for x in rng.integers(0, max(2, min(ctx - 2048, 8192)), n_dec + n_pre)]
            mine.append(self.step(new, kv))
            rows_sid += [b] * len(new)
            rows_new += new
            rows_kv += kv
        ref = predict_steps(self.model, self.gpu, np.array(rows_sid), np.array(rows_new), np.array(rows_kv),
                            n_batches, **self._kw)["total_ms"] * 1e-3
        worst = float(np.max(np.abs(np.array(mine) - ref) / ref))
        # and the pure-decode run
        n, kv0, k = 17, 3000.0, 50
        kvs = np.repeat(kv0 / n + np.arange(k)[:, None], n, axis=1)  # n requests, equal KV, growing
        ref = predict_steps(self.model, self.gpu, np.repeat(np.arange(k), n), np.ones(k * n), kvs.ravel(), k,
                            **self._kw, rows="work")["total_ms"] * 1e-3  # equal KV each: fractional
        got = self.decode_steps(n, kv0, k, kvs=kvs[0]) if self.needs_kvs else self.decode_steps(n, kv0, k)
        worst = max(worst, float(np.max(np.abs(got - ref) / ref)))
        nd = np.arange(1, 300.0)
        skv = nd * rng.integers(0, 8192, nd.size)
        a, b = self.decode_attention(nd, skv), self._decode_attention_ref(nd, skv)
        worst = max(worst, float(np.max(np.abs(a - b) / b)))
        for _ in range(20):
            k = int(rng.integers(1, 6))
            new, kv = rng.integers(2, 4096, k), rng.integers(0, 8192, k)
            a, b = self.prefill_attention(new, kv), self._prefill_attention_ref(new, kv)
            worst = max(worst, abs(a - b) / b)
        return worst


class DirectTimer:
    """The reference: every iteration is one `predict_steps` call (about half a millisecond).

    Same interface as StepTimer; `simulate(..., timer=DirectTimer(...), fast=False)` is the
    baseline the simulator's speed is measured against and its exactness tested against.
    """

    def __init__(self, model, gpu, *, tp: int = 1, constants: Constants | None = None, f_clk: float | None = None,
                 kv_dtype: str = "bf16", engine=None, dtype: str | None = None, ep: int = 1, moe_constants=None,
                 **_):
        constants = constants or Constants.default()
        self.model, self.gpu, self.tp, self.engine, self.ep, self.dtype = _checked(
            model, gpu, tp, f_clk, kv_dtype, engine, dtype, constants, ep)
        dtype = self.dtype
        self.kv_dtype = kv_dtype
        self.moe = is_moe(self.model)
        self._kw = dict(tp=self.tp, f_clk=f_clk, constants=constants, kv_dtype=kv_dtype,
                        engine=self.engine, dtype=dtype)
        if self.moe:
            self._kw.update(ep=self.ep, moe_constants=moe_constants)

    def step_arrays(self, new, kv) -> float:
        new = np.asarray(new)
        r = predict_steps(self.model, self.gpu, np.zeros(len(new), dtype=np.int64), new, np.asarray(kv), 1,
                          **self._kw)
        return float(r["total_ms"][0]) * 1e-3

    step = step_arrays

    memory_bytes = StepTimer.memory_bytes
    kv_bytes_per_token = StepTimer.kv_bytes_per_token

    def decode_steps(self, n: int, sum_kv0: float, k: int, kvs=None) -> np.ndarray:
        raise ServeError("DirectTimer times iterations one by one: simulate with fast=False")
