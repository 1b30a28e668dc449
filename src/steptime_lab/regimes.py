"""Decode-sized and prefill-sized cells: the one definition every experiment uses.

A cell's size is its number of new tokens: a GEMM's m, a step's num_tokens. The thresholds
sit on either side of every GPU's ridge point m* = peak FLOP/s / DRAM bytes/s (a GEMM over
a large weight is memory-bound below m*, compute-bound above it; 153 on the A100 to 419 on
the L40S in specs/gpus.yaml):

* decode-sized: at most DECODE_MAX_TOKENS = 64 new tokens, below half of every GPU's m*:
  memory-bound everywhere (a decode batch of up to 64 requests, one token each);
* prefill-sized: at least PREFILL_MIN_TOKENS = 1024 new tokens, above twice every GPU's m*:
  compute-bound everywhere;
* in between ("mid") the regime depends on the GPU, so a cell there is neither.

DERIVED from the datasheet figures; tests/test_physics.py checks both margins on every GPU
of gpus.yaml. LLM-shaped GEMM cells (`llm_shaped`) are the projection shapes of the models
steptime serves: n and k at least 1024, m at most 16384.
"""

from __future__ import annotations

import numpy as np

DECODE_MAX_TOKENS = 64
PREFILL_MIN_TOKENS = 1024
LLM_MIN_NK = 1024
LLM_MAX_M = 16384


def is_decode(tokens) -> np.ndarray:
    """True where a cell of `tokens` new tokens is decode-sized."""
    return np.asarray(tokens) <= DECODE_MAX_TOKENS


def is_prefill(tokens) -> np.ndarray:
    """True where a cell of `tokens` new tokens is prefill-sized."""
    return np.asarray(tokens) >= PREFILL_MIN_TOKENS


def size_class(tokens) -> np.ndarray:
    """'decode', 'prefill' or 'mid' per cell."""
    return np.where(is_decode(tokens), "decode", np.where(is_prefill(tokens), "prefill", "mid"))


def llm_shaped(m, n, k) -> np.ndarray:
    """True where a GEMM cell has an LLM projection's shape (n, k >= 1024, m <= 16384)."""
    m, n, k = np.asarray(m), np.asarray(n), np.asarray(k)
    return (n >= LLM_MIN_NK) & (k >= LLM_MIN_NK) & (m <= LLM_MAX_M)

# Vidur's measurement-stack factor (E1.29 since wave 31, helper vgemm; E1.1 since wave 32, helper e11h): fitted on
# the projection rows with m >= this (compute-bound at the large tile on both A100 and H100), chosen after seeing
# A100's and H100's Vidur GEMM rows. One place for it: tp_shapes and step both read it here.
VIDUR_STACK_MIN_M = 2048
