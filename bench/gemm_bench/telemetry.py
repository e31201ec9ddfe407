"""What the GPU did while a group was timed: SM clock and board power (NVML), and a cross-check.

Every timed group of a run (one op's autocast Linears, one pass's pre-quantized GEMMs, one layer
step) records a ``groups`` entry in the result:

* ``clock``: the SM clock in MHz and board power in W sampled by NVML every
  :data:`SAMPLE_INTERVAL_S` while the group's timed rounds ran (median and minimum clock, median
  and maximum power, number of samples). After the run, a group whose median clock fell more than
  :data:`CLOCK_DROP` below the median of the run's groups is flagged ``clock_low``: its numbers
  were measured on a throttled GPU, and ``gemm-bench report`` says so.
* ``cross_check``: a few extra rounds of the same group, timed by CUDA events *and* by the
  profiler's kernel time of the very same launches; per timed region, the ratio of the two
  medians (events / kernels). Events include launch gaps and the casts TE runs around a GEMM;
  the ratio shows how far the stored (events) numbers are from pure kernel time.

The pure functions (summaries, flags, validation helpers) need neither torch nor NVML; the
sampler imports NVML (``nvidia-ml-py``, in the GPU image) when it starts, and records why when it
cannot.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Seconds between NVML samples while a group is timed.
SAMPLE_INTERVAL_S = 0.02

#: A group whose median SM clock is this fraction below the run's median is flagged.
CLOCK_DROP = 0.05

#: Rounds of each group timed again under the profiler for the events-vs-kernels cross-check.
CROSS_CHECK_ROUNDS = 3


def method() -> dict[str, Any]:
    """What this module adds to a run's method (stored in ``provenance.method``)."""
    return {
        "telemetry": f"NVML SM clock and board power sampled every {SAMPLE_INTERVAL_S * 1000:g} ms during each "
        f"group's timed rounds; a group whose median clock is more than {CLOCK_DROP:.0%} below the run's "
        "median group clock is flagged clock_low",
        "cross_check": f"each group timed {CROSS_CHECK_ROUNDS} more rounds under torch.profiler: per region, "
        "median CUDA-event time / median kernel time of the same launches",
    }


class ClockSampler:
    """Samples one GPU's SM clock and power on a background thread between ``start`` and ``stop``.

    ``unavailable`` holds the reason when NVML cannot be used (no library, no such device): the
    group then records that reason instead of numbers.
    """

    def __init__(self, device_index: int | None = None) -> None:
        """``device_index``: torch's index of the GPU to sample (default: the current device)."""
        self.unavailable = ""
        self._nvml: Any = None
        self._handle: Any = None
        self._clocks: list[float] = []
        self._power: list[float] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        try:
            import pynvml  # nvidia-ml-py, in the GPU image
        except ImportError as exc:
            self.unavailable = f"NVML unavailable: {exc}"[:300]
            return
        try:
            pynvml.nvmlInit()
            self._handle = _handle(pynvml, device_index)
            self._nvml = pynvml
        except (pynvml.NVMLError, AttributeError, TypeError, ValueError) as exc:
            # NVML's own errors, or a torch whose device properties lack the UUID / PCI id
            self.unavailable = f"NVML unavailable: {type(exc).__name__}: {exc}"[:300]

    def _sample(self) -> None:
        nvml = self._nvml
        try:
            self._clocks.append(float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)))
            self._power.append(nvml.nvmlDeviceGetPowerUsage(self._handle) / 1000.0)
        except nvml.NVMLError as exc:
            self.unavailable = f"NVML sample failed: {type(exc).__name__}: {exc}"[:300]
            self._stop.set()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(SAMPLE_INTERVAL_S)

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Sample while the body runs (one sample at least, taken at the start)."""
        self._clocks, self._power = [], []
        if self.unavailable:
            yield
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="gemm-bench-nvml", daemon=True)
        self._thread.start()
        try:
            yield
        finally:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def summary(self) -> dict[str, Any]:
        """This group's clock block (see :func:`summarize`)."""
        return summarize(self._clocks, self._power, self.unavailable)


def _handle(pynvml: Any, device_index: int | None) -> Any:
    """The NVML handle of the GPU torch calls ``device_index`` (NVML ignores CUDA_VISIBLE_DEVICES)."""
    import torch

    if device_index is None:
        device_index = torch.cuda.current_device()

    props = torch.cuda.get_device_properties(device_index)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
        except pynvml.NVMLError:
            pass  # older drivers: fall back to the PCI bus id
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        domain = getattr(props, "pci_domain_id", 0)
        device = getattr(props, "pci_device_id", 0)
        return pynvml.nvmlDeviceGetHandleByPciBusId(f"{domain:08x}:{bus:02x}:{device:02x}.0")
    return pynvml.nvmlDeviceGetHandleByIndex(device_index)


def summarize(clocks: Sequence[float], power: Sequence[float], unavailable: str = "") -> dict[str, Any]:
    """A group's clock block: ``{"samples", "sm_clock_mhz_median", "sm_clock_mhz_min",
    "power_w_median", "power_w_max"}``, or ``{"samples": 0, "reason": ...}``."""
    if unavailable or not clocks:
        return {"samples": 0, "reason": unavailable or "no sample was taken (the group ran shorter than one)"}
    out: dict[str, Any] = {
        "samples": len(clocks),
        "sm_clock_mhz_median": round(statistics.median(clocks), 1),
        "sm_clock_mhz_min": round(min(clocks), 1),
    }
    if power:
        out["power_w_median"] = round(statistics.median(power), 1)
        out["power_w_max"] = round(max(power), 1)
    return out


def flag_clock_drops(groups: list[dict[str, Any]]) -> float | None:
    """Mark each group whose median clock is more than :data:`CLOCK_DROP` below the run's median.

    Sets ``clock_low`` (bool) on every group with clock samples; returns the run's median group
    clock (MHz), or None when no group has one.
    """
    medians = [g["clock"]["sm_clock_mhz_median"] for g in groups if g.get("clock", {}).get("samples")]
    if not medians:
        return None
    run_median = statistics.median(medians)
    for group in groups:
        clock = group.get("clock", {})
        if clock.get("samples"):
            group["clock_low"] = clock["sm_clock_mhz_median"] < (1 - CLOCK_DROP) * run_median
    return run_median


def cross_check_block(events: dict[str, dict[str, Any]], kernels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"rounds", "ratios": {"competitor/region": events median / kernel median}, "max_deviation"}``.

    ``events`` and ``kernels`` map competitor -> region -> samples (anything with ``median``).
    A region whose kernel time is zero (nothing ran on the GPU) has no ratio.
    """
    ratios: dict[str, float] = {}
    rounds = 0
    for name, regions in events.items():
        for region, ev in regions.items():
            kern = kernels.get(name, {}).get(region)
            if kern is None or not kern.median > 0:
                continue
            rounds = max(rounds, len(getattr(ev, "ms", ())))
            ratios[f"{name}/{region}"] = round(ev.median / kern.median, 5)
    out: dict[str, Any] = {"rounds": rounds, "ratios": ratios}
    if ratios:
        out["max_deviation"] = round(max(abs(r - 1) for r in ratios.values()), 5)
    return out
