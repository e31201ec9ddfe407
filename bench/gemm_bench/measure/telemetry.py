"""What the GPU did while a group was timed: SM clock and board power (NVML), and a cross-check.

Every timed group of a run (one op's autocast Linears, one pass's pre-quantized GEMMs, one layer
step) records a ``groups`` entry in the result:

* ``clock``: the SM clock in MHz and board power in W sampled by NVML every
  :data:`SAMPLE_INTERVAL_S` while the group's timed rounds ran (median and minimum clock, median,
  quartiles and maximum power, number of samples). After the run, a group whose median clock fell more than
  :data:`CLOCK_DROP` below the median of the run's groups is flagged ``clock_low``: its numbers
  were measured on a throttled GPU, and ``gemm-bench report`` says so.
* ``cross_check``: the group's first batch of timed rounds runs inside one profiler session, so
  each region's published median (CUDA events) has beside it the kernel time of launches among
  the very ones published: per region, the ratio of the two medians over the profiled rounds,
  the kernel median itself, and the stored (published) median over that kernel time. A stored
  ratio near 1 says the published time is the GPU's time for the region's kernels; well above 1,
  it includes time the GPU spent idle (between the region's kernels, or waiting on the host in an
  eager group).

The pure functions (summaries, flags, validation helpers) need neither torch nor NVML; the
sampler imports NVML (``nvidia-ml-py``, in the GPU image) when it starts, and records why when it
cannot.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

#: Seconds between NVML samples while a group is timed.
SAMPLE_INTERVAL_S = 0.02

#: Longest wait, after a group's window ends, for the child's first sample past it (by then every
#: sample inside the window is in the file). The wait ends at that sample, about half an interval
#: later on average; a fixed ``2 * SAMPLE_INTERVAL_S`` sleep stood here before, so this bound is
#: that sleep and one interval more, for a child that is late (a slow NVML call).
SUMMARY_WAIT_S = 3 * SAMPLE_INTERVAL_S

#: How often the file is read while waiting for that sample.
SUMMARY_POLL_S = SAMPLE_INTERVAL_S / 10

#: A group whose median SM clock is this fraction below the run's median is flagged.
CLOCK_DROP = 0.05



def method(*, teardown: bool = True) -> dict[str, Any]:
    """What this module adds to a run's method (stored in ``provenance.method``). ``teardown``:
    whether CUPTI is torn down after each profiler session (``TEARDOWN_CUPTI=1``)."""
    return {
        "telemetry": f"NVML SM clock and board power sampled every {SAMPLE_INTERVAL_S * 1000:g} ms by a separate "
        "process during each group's timed rounds (power instantaneous where the driver offers it, else NVML's "
        f"1 s average: each group's power_source says); a group whose median clock is more than {CLOCK_DROP:.0%} "
        "below the run's median group clock is flagged clock_low",
        "cross_check": "each group's first batch of timed rounds (min_repetitions rounds; all rounds with the "
        "profiler timer) runs inside one torch.profiler session ("
        + ("CUPTI torn down after each session" if teardown else "CUPTI teardown disabled by the environment")
        + "), the trace split into regions at the L2 flushes: per region, median CUDA-event time / median "
        "kernel time of the same launches (ratios), the "
        "kernel median (kernel_ms, also stored on each cell), and the stored median / that kernel time "
        "(stored_ratios; above 1: the stored time includes GPU idle time between or before the region's kernels)",
    }


class ClockSampler:
    """Samples one GPU's SM clock and power in a *separate process* while a group is timed.

    Why a process: a sampling thread in the timing process takes the GIL at every sample, and a
    timed region whose GPU work is shorter than its host work (small GEMMs, eager autocast) is
    then slowed by the sampler itself. The child (``python -m gemm_bench.measure.telemetry``) writes
    ``monotonic_s clock_mhz power_w`` lines to a file every :data:`SAMPLE_INTERVAL_S`; a group
    keeps the lines inside its own time window (``time.monotonic`` is one clock for every process
    of a Linux machine). The child exits when its stdin closes (:meth:`close`, or this process's
    end). ``unavailable`` holds the reason when no sample can be had (no NVML, no such GPU).
    """

    def __init__(self, device_index: int | None = None) -> None:
        """``device_index``: torch's index of the GPU to sample (default: the current device)."""
        self.unavailable = ""
        self._device_index = device_index
        self._proc: subprocess.Popen[bytes] | None = None
        self._path = ""
        self._offset = 0
        self._window: tuple[float, float] | None = None
        #: What the child's power readings are (the first line of its file), once it has started.
        self._power_source = ""

    def start(self) -> None:
        """Start the child (once): find the GPU's NVML identity, spawn, wait for its first line.

        Called before any group is warmed up (the runner does it with the support checks), so the
        wait never leaves a warmed-up GPU idle before timed rounds. Never raises: whatever stops
        the sampler (no NVML, no such GPU, no temp space) becomes :attr:`unavailable`, and the
        groups record that reason instead of numbers; telemetry never decides a cell's status.
        """
        if self._proc is not None or self.unavailable:
            return
        try:
            ident = gpu_identity(self._device_index)
        except (AttributeError, TypeError, ValueError, RuntimeError) as exc:
            self.unavailable = f"GPU identity unavailable: {type(exc).__name__}: {exc}"[:300]
            return
        try:
            fd, self._path = tempfile.mkstemp(prefix="gemm-bench-nvml-", suffix=".txt")
            os.close(fd)
            package_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(
                p for p in (package_root, os.environ.get("PYTHONPATH", "")) if p)}
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "gemm_bench.measure.telemetry", ident, self._path],
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env,
            )
            self._offset, self._window = 0, None
            deadline = time.monotonic() + 20.0
            while time.monotonic() < deadline:
                if self._proc.poll() is not None:
                    self._died("NVML sampler exited")
                    return
                if os.path.getsize(self._path) > 0:
                    self._power_source = _read_power_source(self._path)
                    return
                time.sleep(0.01)
        except (OSError, subprocess.SubprocessError) as exc:
            self.unavailable = f"NVML sampler could not start: {type(exc).__name__}: {exc}"[:300]
            self.close()
            return
        self.unavailable = "NVML sampler wrote no sample within 20 s"
        self.close()

    def _died(self, what: str) -> None:
        """The child has exited: keep its last error line as the reason, reap it, drop its file."""
        proc = self._proc
        err = b""
        if proc is not None and proc.stderr is not None:
            with contextlib.suppress(OSError, ValueError):
                err = proc.stderr.read()
        text = err.decode(errors="replace").strip()
        status = proc.returncode if proc is not None else None
        self.unavailable = (f"{what}: " + (text.splitlines()[-1] if text else f"status {status}"))[:300]
        self.close()

    @contextmanager
    def sampling(self) -> Iterator[None]:
        """Note the body's time window; the child samples all along."""
        self.start()
        t0 = time.monotonic()
        try:
            yield
        finally:
            self._window = (t0, time.monotonic())

    def summary(self) -> dict[str, Any]:
        """The last window's clock block (see :func:`summarize`); never raises.

        A child that died before the window's end gives no numbers for it (a partial window is
        not the group's clock), and every later group says why.
        """
        if self.unavailable or self._window is None or self._proc is None:
            return summarize([], [], self.unavailable or "the sampler did not run")
        t0, t1 = self._window
        self._window = None
        try:
            complete = self._lines_past(t1)
        except (OSError, UnicodeDecodeError) as exc:
            self.unavailable = f"NVML samples unreadable: {type(exc).__name__}: {exc}"[:300]
            self.close()
            return summarize([], [], self.unavailable)
        if self._proc.poll() is not None:
            self._died("NVML sampler exited during the group")
            return summarize([], [], self.unavailable)
        self._offset += len(complete)
        clocks, power = samples_in_window(complete, t0, t1)
        block = summarize(clocks, power)
        if block["samples"] and self._power_source:
            block["power_source"] = self._power_source
        return block

    def _lines_past(self, t1: float) -> str:
        """The complete lines from the read offset on, once one of them was sampled after ``t1``.

        The child writes its lines in time order, so once a sample taken after ``t1`` is in the
        file, every sample of the window is too: the same samples a fixed wait of
        ``2 * SAMPLE_INTERVAL_S`` read (or, from a late child, the ones it missed), usually half
        an interval after ``t1`` instead of two. Waits at most :data:`SUMMARY_WAIT_S` (then reads
        what is there, as the fixed wait did), and not at all for a child that has exited.
        """
        assert self._proc is not None
        deadline = time.monotonic() + SUMMARY_WAIT_S
        text = ""
        with open(self._path, encoding="ascii") as handle:
            handle.seek(self._offset)
            while True:
                text += handle.read()
                complete = text[:text.rfind("\n") + 1]
                last = _last_sample_time(complete)
                if (last is not None and last > t1) or time.monotonic() >= deadline or self._proc.poll() is not None:
                    return complete
                time.sleep(SUMMARY_POLL_S)

    def close(self) -> None:
        """Stop the child and remove its file (safe to call more than once)."""
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.stdin is not None:
                with contextlib.suppress(OSError):
                    proc.stdin.close()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()
        if self._path:
            with contextlib.suppress(OSError):
                os.unlink(self._path)
            self._path = ""
        self._offset, self._window = 0, None


#: The process's samplers, one per GPU index (:func:`shared_sampler`), keyed by (pid, index): a
#: forked child (Sphinx's parallel read) starts its own rather than reading its parent's.
_SHARED: dict[tuple[int, int | None], ClockSampler] = {}


def shared_sampler(device_index: int | None = None) -> ClockSampler:
    """This process's sampler of GPU ``device_index``, started once and reused by every question.

    A refresh worker measures question after question: a sampler of its own per question spawned a
    child (a Python start, NVML's import and init) and waited for its first line each time. The
    child samples all along either way, and each group keeps only the samples of its own window,
    so a shared one summarizes the same samples. A sampler that became unavailable (its child
    died, or never started) is replaced by a fresh one for the next caller, as a new question's
    own sampler was; the last one is closed when the process exits (its file removed; the child
    also ends by itself when this process's end closes its stdin).
    """
    key = (os.getpid(), device_index)
    sampler = _SHARED.get(key)
    if sampler is None or sampler.unavailable:
        if sampler is not None:
            sampler.close()
        sampler = _SHARED[key] = ClockSampler(device_index)
    return sampler


@atexit.register
def _close_shared() -> None:
    """Close this process's shared samplers (not those a forked parent started)."""
    pid = os.getpid()
    for key in [k for k in _SHARED if k[0] == pid]:
        _SHARED.pop(key).close()


def _last_sample_time(text: str) -> float | None:
    """The time of the last sampler line ``"t clock power"`` in ``text`` (None if there is none)."""
    for line in reversed(text.splitlines()):
        parts = line.split()
        if len(parts) == 3:
            try:
                return float(parts[0])
            except ValueError:
                continue
    return None


def _read_power_source(path: str) -> str:
    """The ``# power: ...`` header the sampler child writes before its first sample, or ""."""
    try:
        with open(path, encoding="ascii") as handle:
            first = handle.readline()
    except (OSError, UnicodeDecodeError):
        return ""
    return first[len("# power: "):].strip() if first.startswith("# power: ") else ""


def samples_in_window(text: str, t0: float, t1: float) -> tuple[list[float], list[float]]:
    """(clocks, powers) of the sampler lines ``"t clock power"`` whose time lies in [t0, t1]."""
    clocks: list[float] = []
    power: list[float] = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) != 3:
            continue
        try:
            t, clock, watts = (float(x) for x in parts)
        except ValueError:
            continue
        if t0 <= t <= t1:
            clocks.append(clock)
            power.append(watts)
    return clocks, power


def gpu_identity(device_index: int | None) -> str:
    """How the sampler finds torch's GPU in NVML (which ignores CUDA_VISIBLE_DEVICES):
    ``uuid:GPU-...``, else ``pci:DOMAIN:BUS:DEVICE.0``, else ``index:N``."""
    import torch

    if device_index is None:
        device_index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device_index)
    uuid = str(getattr(props, "uuid", "") or "")
    if uuid:
        return "uuid:" + (uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        return f"pci:{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
    return f"index:{device_index}"


def _nvml_handle(pynvml: Any, ident: str) -> Any:
    kind, _, value = ident.partition(":")
    if kind == "uuid":
        return pynvml.nvmlDeviceGetHandleByUUID(value)
    if kind == "pci":
        return pynvml.nvmlDeviceGetHandleByPciBusId(value)
    return pynvml.nvmlDeviceGetHandleByIndex(int(value))


def _power_reader(pynvml: Any, handle: Any) -> tuple[Callable[[], float], str]:
    """(read watts, what it reads): the instantaneous power field where the driver has it; else
    ``nvmlDeviceGetPowerUsage``, which on Ampere and newer is an average over the last second."""
    field = getattr(pynvml, "NVML_FI_DEV_POWER_INSTANT", None)
    if field is not None and hasattr(pynvml, "nvmlDeviceGetFieldValues"):
        def instant() -> float:
            (value,) = pynvml.nvmlDeviceGetFieldValues(handle, [field])
            if getattr(value, "nvmlReturn", 0) != 0:
                raise pynvml.NVMLError(value.nvmlReturn)
            return float(value.value.uiVal) / 1000.0

        try:
            instant()
        except (pynvml.NVMLError, AttributeError, TypeError, ValueError):
            pass
        else:
            return instant, "instantaneous"
    return (lambda: pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0), "1 s average"


def sampler_main(argv: Sequence[str]) -> int:
    """The sampler child: ``IDENT FILE``; samples until stdin closes. Exit 2 on a bad start."""
    import select

    if len(argv) != 2:
        print("usage: python -m gemm_bench.measure.telemetry IDENT FILE", file=sys.stderr)
        return 2
    ident, path = argv
    # Ctrl-C reaches the whole process group: the sampler outlives it so that the run it samples
    # decides how it ends; it stops when the runner closes its stdin (or the runner is gone).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import pynvml  # nvidia-ml-py, in the GPU image
    except ImportError as exc:
        print(f"no NVML: {exc}", file=sys.stderr)
        return 2
    try:
        pynvml.nvmlInit()
        handle = _nvml_handle(pynvml, ident)
    except (pynvml.NVMLError, ValueError) as exc:
        print(f"NVML cannot open {ident}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    read_power, source = _power_reader(pynvml, handle)
    with open(path, "a", encoding="ascii") as out:
        out.write(f"# power: {source}\n")
        while True:
            try:
                clock = pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)
                watts = read_power()
            except pynvml.NVMLError as exc:
                print(f"NVML sample failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                return 1
            out.write(f"{time.monotonic():.6f} {clock} {watts:.1f}\n")
            out.flush()
            ready, _, _ = select.select([sys.stdin], [], [], SAMPLE_INTERVAL_S)
            if ready and not os.read(sys.stdin.fileno(), 4096):
                return 0  # the parent closed our stdin (or ended)


def quartiles(values: Sequence[float]) -> tuple[float, float]:
    """First and third quartiles by the "inclusive" method: within the samples (the "exclusive"
    method extrapolates past them, below the smallest and above the largest of a few samples); one
    value is its own quartiles. The model step's times (:func:`~gemm_bench.measure.backends.model_parts.
    quartiles_ms`) and the power samples' spread use this one rule."""
    q = statistics.quantiles(values, n=4, method="inclusive") if len(values) >= 2 else [values[0]] * 3
    return float(q[0]), float(q[2])


def summarize(clocks: Sequence[float], power: Sequence[float], unavailable: str = "") -> dict[str, Any]:
    """A group's clock block: ``{"samples", "sm_clock_mhz_median", "sm_clock_mhz_min",
    "power_w_median", "power_w_q1", "power_w_q3", "power_w_max"}``, or ``{"samples": 0, "reason": ...}``.

    The power quartiles are the spread of the instantaneous samples around their median: what a
    comparison of two recipes' energy (one window of samples each) must exceed to be a difference."""
    if unavailable or not clocks:
        return {"samples": 0, "reason": unavailable or "no sample was taken (the group ran shorter than one)"}
    out: dict[str, Any] = {
        "samples": len(clocks),
        "sm_clock_mhz_median": round(statistics.median(clocks), 1),
        "sm_clock_mhz_min": round(min(clocks), 1),
    }
    if power:
        out["power_w_median"] = round(statistics.median(power), 1)
        low, high = quartiles(power)
        out["power_w_q1"], out["power_w_q3"] = round(low, 1), round(high, 1)
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


def with_stored_ratios(block: dict[str, Any], stored: dict[str, float]) -> dict[str, Any]:
    """Add ``stored_ratios``: per region, the *published* median (all the group's timed rounds) /
    the cross-check's median kernel time (its profiled rounds). Above 1, the published time includes host
    gaps or launch latency (GPU waiting on the CPU), not only kernels."""
    kernels = block.get("kernel_ms", {})
    ratios = {key: round(stored[key] / kern, 5) for key, kern in kernels.items() if key in stored and kern > 0}
    if ratios:
        block["stored_ratios"] = ratios
    return block


def cross_check_block(events: dict[str, dict[str, Any]], kernels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``{"rounds", "ratios": {"competitor/region": events median / kernel median}, "kernel_ms":
    {"competitor/region": kernel median}, "max_deviation"}``.

    ``events`` and ``kernels`` map competitor -> region -> samples (anything with ``median``).
    A region whose kernel time is zero (nothing ran on the GPU) has no ratio.
    """
    ratios: dict[str, float] = {}
    kernel_medians: dict[str, float] = {}
    rounds = 0
    for name, regions in events.items():
        for region, ev in regions.items():
            kern = kernels.get(name, {}).get(region)
            if kern is None or not kern.median > 0:
                continue
            rounds = max(rounds, len(getattr(ev, "ms", ())))
            ratios[f"{name}/{region}"] = round(ev.median / kern.median, 5)
            kernel_medians[f"{name}/{region}"] = round(kern.median, 6)
    out: dict[str, Any] = {"rounds": rounds, "ratios": ratios, "kernel_ms": kernel_medians}
    if ratios:
        out["max_deviation"] = round(max(abs(r - 1) for r in ratios.values()), 5)
    return out


if __name__ == "__main__":
    sys.exit(sampler_main(sys.argv[1:]))
