"""What a collector may do to a GPU, and the promise to put it back.

Collectors measure the card as they find it. Changing a setting (power limit, locked SM
clocks) needs an explicit flag (`--allow-set-power`, `--allow-lock-clocks`); every change
goes through `GpuSettings`, which records the setting before the first change and restores
it on exit: normal return, exception, SIGINT or SIGTERM alike.

The NVML calls sit behind a small backend object, so the plan and the restore path are
tested without a GPU (`tests/test_telemetry_collectors.py` drives a fake backend).
"""

from __future__ import annotations

import signal
from contextlib import contextmanager

from steptime.errors import SteptimeError


class NoGPUError(SteptimeError, RuntimeError):
    """A collector was started where no NVIDIA GPU (or torch/pynvml) is available."""


class SettingNotAllowed(SteptimeError, ValueError):
    """A collector was asked to change a GPU setting without the explicit flag that allows it."""


def require_gpu() -> None:
    """Stop with one clear line unless torch sees a CUDA GPU and pynvml is importable."""
    try:
        import torch
    except ImportError:
        raise NoGPUError("no GPU here: this collector needs PyTorch with CUDA (pip install torch) on a GPU node") \
            from None
    if not torch.cuda.is_available():
        raise NoGPUError("no GPU here: torch.cuda.is_available() is False; run this collector on a GPU node "
                         "(e.g. snakemake --profile profiles/pace <target>)")
    try:
        import pynvml  # noqa: F401
    except ImportError:
        raise NoGPUError("this collector reads clocks and power through NVML: pip install nvidia-ml-py") from None


class NvmlBackend:  # pragma: no cover - needs a GPU
    """The real NVML calls (power limit in W, locked SM clocks in MHz)."""

    def __init__(self, index: int = 0):
        import pynvml

        pynvml.nvmlInit()
        self.nv = pynvml
        self.h = pynvml.nvmlDeviceGetHandleByIndex(index)

    def get_power_limit_w(self) -> float:
        return self.nv.nvmlDeviceGetPowerManagementLimit(self.h) / 1000.0

    def set_power_limit_w(self, watts: float) -> None:
        self.nv.nvmlDeviceSetPowerManagementLimit(self.h, int(round(watts * 1000)))

    def power_limit_range_w(self) -> tuple[float, float]:
        lo, hi = self.nv.nvmlDeviceGetPowerManagementLimitConstraints(self.h)
        return lo / 1000.0, hi / 1000.0

    def lock_clocks_mhz(self, mhz: float) -> None:
        self.nv.nvmlDeviceSetGpuLockedClocks(self.h, int(mhz), int(mhz))

    def reset_clocks(self) -> None:
        self.nv.nvmlDeviceResetGpuLockedClocks(self.h)


class GpuSettings:
    """Change power limit / locked clocks only when allowed; restore what was there on exit."""

    def __init__(self, backend, allow_power: bool = False, allow_clocks: bool = False):
        self.b = backend
        self.allow_power = allow_power
        self.allow_clocks = allow_clocks
        self.saved_power_w: float | None = None
        self.clocks_locked = False
        self.log: list[str] = []

    def set_power_limit(self, watts: float) -> None:
        if not self.allow_power:
            raise SettingNotAllowed(f"setting the power limit to {watts:g} W needs --allow-set-power "
                                    "(collectors leave GPU settings alone unless told)")
        lo, hi = self.b.power_limit_range_w()
        if not lo <= watts <= hi:
            raise SettingNotAllowed(f"power limit {watts:g} W is outside this GPU's range {lo:g}-{hi:g} W")
        if self.saved_power_w is None:
            self.saved_power_w = self.b.get_power_limit_w()
        self.b.set_power_limit_w(watts)
        self.log.append(f"power {watts:g}")

    def lock_clocks(self, mhz: float) -> None:
        if not self.allow_clocks:
            raise SettingNotAllowed(f"locking the SM clock to {mhz:g} MHz needs --allow-lock-clocks")
        self.b.lock_clocks_mhz(mhz)
        self.clocks_locked = True
        self.log.append(f"lock {mhz:g}")

    def unlock_clocks(self) -> None:
        if self.clocks_locked:
            self.b.reset_clocks()
            self.clocks_locked = False
            self.log.append("reset clocks")

    def restore(self) -> None:
        """Put back every setting this object changed (idempotent)."""
        self.unlock_clocks()
        if self.saved_power_w is not None:
            self.b.set_power_limit_w(self.saved_power_w)
            self.log.append(f"restore power {self.saved_power_w:g}")
            self.saved_power_w = None


@contextmanager
def guarded(settings: GpuSettings):
    """Run the body; restore the settings afterwards, also on an exception or SIGINT/SIGTERM."""

    def on_signal(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, on_signal)
    try:
        yield settings
    finally:
        try:
            settings.restore()
        finally:
            for s, h in old.items():
                signal.signal(s, h)


def progress(iterable, total: int | None = None, desc: str = ""):
    """A tqdm progress bar on stderr (plain iteration when tqdm is missing)."""
    try:
        from tqdm import tqdm
    except ImportError:  # pragma: no cover
        return iterable
    return tqdm(iterable, total=total, desc=desc, unit="cell")
