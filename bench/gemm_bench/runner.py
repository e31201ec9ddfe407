"""Measure a question on the current GPU and return a result document.

Order of work: TE's support checks decide which cells are ``unsupported`` (with TE's reason);
then, GEMM by GEMM, every requested precision is built, probed once (a precision that raises,
out of memory say, becomes a ``failed`` cell with the message, and the others go on), and the
survivors are timed interleaved, round by round. Imports torch and Transformer Engine.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import gc
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch

from gemm_bench import provenance
from gemm_bench.backends import te as te_backend
from gemm_bench.backends import torch_native
from gemm_bench.phases import BUILD, PROBE, RELEASE, SUPPORT, PhaseProfiler, optional_phase
from gemm_bench.plan import PlannedCell, make_plan
from gemm_bench.question import Question
from gemm_bench.results import new_document
from gemm_bench.shapes import GemmShape
from gemm_bench.timing import Competitor, Interleaver, Samples, TimerSettings

Progress = Callable[[int, int, str], None]


class NoGpuError(RuntimeError):
    pass


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).replace(microsecond=0).isoformat()


def _cell(cell: PlannedCell, status: str, *, samples: Samples | None = None, reason: str = "") -> dict[str, Any]:
    g = cell.gemm
    out: dict[str, Any] = {
        "mode": cell.mode, "precision": cell.precision, "op": g.op, "pass": g.pass_,
        "m": g.m, "k": g.k, "n": g.n, "groups": g.groups, "status": status,
    }
    if samples is not None:
        out["ms"] = round(samples.median, 6)
        out["stats"] = samples.to_stats()
        out["measured_at"] = _now()
    else:
        out["reason"] = reason
    return out


def _short(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:400]


def _release() -> None:
    gc.collect()
    torch.cuda.empty_cache()


@contextlib.contextmanager
def _nvtx(name: str, enabled: bool) -> Iterator[None]:
    if enabled:
        torch.cuda.nvtx.range_push(name)
    try:
        yield
    finally:
        if enabled:
            torch.cuda.nvtx.range_pop()


class Runner:
    def __init__(self, settings: TimerSettings, *, peers: bool = True, progress: Progress | None = None,
                 nvtx: bool = False, phases: PhaseProfiler | None = None) -> None:
        """``phases``: charge this run's wall time to its phases (``gemm-bench run --profile-phases``).

        The runner records support checks, building, probing and releasing memory; the timer
        records spin-up, warm-up and timed rounds; the caller records imports and writing.
        """
        if not torch.cuda.is_available():
            raise NoGpuError("no CUDA GPU is visible to PyTorch")
        self.settings = settings
        self.peers = peers
        self.progress = progress or (lambda done, total, label: None)
        self.nvtx = nvtx
        self.phases = phases
        self.timer = Interleaver(settings, phases=phases)

    def _time_group(
        self, builders: dict[str, Callable[[], Competitor]]
    ) -> tuple[dict[str, dict[str, Samples]], dict[str, str]]:
        """Build and probe each competitor; time the ones that work, interleaved."""
        competitors: dict[str, Competitor] = {}
        failures: dict[str, str] = {}
        for name, build in builders.items():
            try:
                with optional_phase(self.phases, BUILD):
                    fn = build()
                with optional_phase(self.phases, PROBE):
                    fn(lambda region, edge: None)
                    torch.cuda.synchronize()
                competitors[name] = fn
            except Exception as exc:
                failures[name] = _short(exc)
                competitors.pop(name, None)
                with optional_phase(self.phases, RELEASE):
                    _release()
        if not competitors:
            return {}, failures
        try:
            samples = self.timer.run(competitors)
        except Exception as exc:
            message = _short(exc)
            samples = {}
            failures.update({name: message for name in competitors})
        del competitors
        with optional_phase(self.phases, RELEASE):
            _release()
        return samples, failures

    def measure(self, question: Question, precisions: Sequence[str], modes: Sequence[str]) -> dict[str, Any]:
        with optional_phase(self.phases, SUPPORT):
            support = te_backend.support()
            plan = make_plan(question.gemms, precisions, modes, support)
            device, prov = provenance.collect(self.settings.method(), te_backend.VERSION)
        doc = new_document(
            kind=question.kind, gemms=list(question.gemms), num_layers=question.num_layers,
            config=question.config.to_dict() if question.config else None,
            device=device, provenance=prov, notes=question.notes,
        )
        doc["support"] = {pid: {"available": s.available, "reason": s.reason} for pid, s in support.items()}
        cells = [_cell(c, "unsupported", reason=reason) for c, reason in plan.unsupported]
        autocast = [c for c in plan.to_measure if c.mode == "autocast"]
        prequant = [c for c in plan.to_measure if c.mode == "prequant"]
        ops = list(dict.fromkeys(c.gemm.op for c in autocast))
        prequant_gemms = list(dict.fromkeys(c.gemm for c in prequant))
        peer_gemms = prequant_gemms if self.peers else []
        total = len(ops) + len(prequant_gemms)
        done = 0
        fprop_of = {g.op: g for g in question.gemms if g.pass_ == "fprop"}

        for op in ops:
            self.progress(done, total, f"autocast {op}")
            wanted = [c for c in autocast if c.gemm.op == op]
            chosen = list(dict.fromkeys(c.precision for c in wanted))
            fprop = fprop_of[op]
            backward = any(c.gemm.pass_ != "fprop" for c in wanted)
            builders: dict[str, Callable[[], Competitor]] = {
                p: functools.partial(te_backend.autocast_competitor, p, fprop, backward) for p in chosen
            }
            with _nvtx(f"autocast {op}", self.nvtx):
                samples, failures = self._time_group(builders)
            cells += _timed_cells(wanted, samples, failures)
            done += 1

        peers_out: list[dict[str, Any]] = []
        for gemm in prequant_gemms:
            self.progress(done, total, f"prequant {gemm.op}/{gemm.pass_}")
            wanted = [c for c in prequant if c.gemm == gemm]
            builders = {c.precision: functools.partial(te_backend.prequant_competitor, c.precision, gemm)
                        for c in wanted}
            if gemm in peer_gemms and gemm.groups == 1:
                for peer in torch_native.PEERS:
                    builders[peer] = functools.partial(torch_native.peer_competitor, peer, gemm)
            with _nvtx(f"prequant {gemm.op}/{gemm.pass_}", self.nvtx):
                samples, failures = self._time_group(builders)
            cells += _timed_cells(wanted, samples, failures)
            if gemm in peer_gemms:
                for peer in torch_native.PEERS:
                    peers_out.append(_peer(peer, gemm, samples, failures))
            done += 1
        self.progress(done, total, "done")
        doc["cells"] = cells
        doc["peers"] = peers_out
        return doc


def _timed_cells(
    wanted: list[PlannedCell], samples: dict[str, dict[str, Samples]], failures: dict[str, str]
) -> list[dict[str, Any]]:
    """Cells of one timed group: each precision's samples of its pass, or its failure."""
    return [
        _cell(c, "failed", reason=failures[c.precision]) if c.precision in failures
        else _cell(c, "measured", samples=samples[c.precision][c.gemm.pass_])
        for c in wanted
    ]


def _peer(
    peer: str, gemm: GemmShape, samples: dict[str, dict[str, Samples]], failures: dict[str, str]
) -> dict[str, Any]:
    out: dict[str, Any] = {"backend": peer, "op": gemm.op, "pass": gemm.pass_,
                           "m": gemm.m, "k": gemm.k, "n": gemm.n, "groups": gemm.groups}
    if gemm.groups != 1:
        out.update(status="unsupported", reason="PyTorch-native peers are measured for dense GEMMs only")
    elif peer in failures:
        out.update(status="failed", reason=failures[peer])
    else:
        s = samples[peer][gemm.pass_]
        out.update(status="measured", ms=round(s.median, 6), stats=s.to_stats())
    return out
