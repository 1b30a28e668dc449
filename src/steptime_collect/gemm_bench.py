"""GEMM microbenchmark used by both GPU collectors (runs on a GPU node; needs torch).

    python -m steptime_collect.gemm_bench --m 1,64,1024 --n 4096 --k 4096 --iters 50

Times C = A @ W^T (torch.nn.functional.linear, bf16) with CUDA events; prints CSV rows
`m,n,k,latency_ms` to stdout. Under Nsight Compute use `--iters 1 --warmup 3`.
"""

from __future__ import annotations

# Imports of the product and the lab stay inside the functions that use them: a collector runs on a GPU
# host and loads only what its measurement needs.

import argparse
import sys

from steptime_collect.cli import int_list, nonnegative_int, positive_int, run


def time_linear(m: int, n: int, k: int, iters: int = 50, warmup: int = 10):
    import torch

    dev = torch.device("cuda")
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, k, device=dev, dtype=torch.bfloat16)
    for _ in range(warmup):
        torch.nn.functional.linear(x, w)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        torch.nn.functional.linear(x, w)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / iters


def require_torch_cuda() -> None:
    """One line unless PyTorch is installed and sees a CUDA GPU (this benchmark needs nothing else)."""
    from steptime_collect.safety import NoGPUError

    try:
        import torch
    except ImportError:
        raise NoGPUError("this benchmark needs PyTorch with CUDA (pip install torch) on a GPU node") from None
    if not torch.cuda.is_available():  # pragma: no cover - depends on the node
        raise NoGPUError("no GPU here: torch.cuda.is_available() is False; run this benchmark on a GPU node")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--m", type=int_list, required=True, help="comma-separated m values")
    p.add_argument("--n", type=positive_int, required=True)
    p.add_argument("--k", type=positive_int, required=True)
    p.add_argument("--iters", type=positive_int, default=50)
    p.add_argument("--warmup", type=nonnegative_int, default=10)
    a = p.parse_args(argv)
    require_torch_cuda()
    print("m,n,k,latency_ms")
    for m in a.m:
        print(f"{m},{a.n},{a.k},{time_linear(m, a.n, a.k, a.iters, a.warmup):.6f}")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run(main, "steptime_collect.gemm_bench"))
