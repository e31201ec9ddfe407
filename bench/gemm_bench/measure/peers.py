"""Peers beside Transformer Engine: GEMM implementations measured by the same harness, on the same shapes.

Why an interface: a kernel author should be able to benchmark their kernel against cuBLAS and TE
in their own docs without forking this project. A peer is any object with

* ``name``: unique, shown as the row's label (``"torch._scaled_mm (FP8 rowwise)"``);
* ``precision``: the label of what it computes in (``"BF16"``, ``"FP8 rowwise"``);
* ``kind`` (optional, default ``"gemm"``): ``"gemm"`` peers time one GEMM per call, the pass's
  own ``m x k x n`` (``B @ A.T`` with ``A`` ``n x k`` and ``B`` ``m x k``, as TE's TN GEMM), in a
  region named by the pass; ``"linear"`` peers receive an op's Fprop shape and time a Linear's
  training iteration in two regions, ``"fprop"`` and ``"backward"`` (Dgrad + Wgrad together);
* ``available() -> (bool, reason)``: whether it can run here, and if not, why, in words shown
  instead of a number;
* ``competitor(gemm) -> Competitor``: a :data:`gemm_bench.measure.timing.Competitor`, ``fn(mark)``
  calling ``mark(region, "start")`` / ``mark(region, "end")`` around what is timed.

Peers are registered under the entry point group ``gemm_bench.peers``: the entry point names a
callable returning an iterable of peers (or a peer itself). Discovery imports no torch: peers
import their GPU code inside ``available`` and ``competitor``. Peers are reported on their own,
never mixed into TE's totals.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gemm_bench.question.shapes import GemmShape

if TYPE_CHECKING:  # timing imports torch; discovery must not
    from gemm_bench.measure.timing import Competitor

ENTRY_POINT_GROUP = "gemm_bench.peers"
KINDS: tuple[str, ...] = ("gemm", "linear")
LINEAR_REGIONS: tuple[str, ...] = ("fprop", "backward")
DENSE_ONLY_REASON = "Peers are measured for dense GEMMs only (no grouped MoE expert GEMMs)."


class PeerError(ValueError):
    """A registered object that is not a usable peer (names its source and what is wrong)."""


@runtime_checkable
class Peer(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def precision(self) -> str: ...

    def available(self) -> tuple[bool, str]: ...

    def competitor(self, gemm: GemmShape) -> Competitor: ...


@dataclasses.dataclass(frozen=True)
class DiscoveryProblem:
    """An entry point that could not be loaded or gave no usable peer; reported, never fatal."""

    source: str
    message: str


def kind_of(peer: Peer) -> str:
    return getattr(peer, "kind", "gemm")


def _check(obj: Any, source: str) -> Peer:
    if not isinstance(obj, Peer):
        raise PeerError(f"{source}: {obj!r} is not a peer (needs name, precision, available(), competitor())")
    for attr in ("name", "precision"):
        value = getattr(obj, attr)
        if not isinstance(value, str) or not value.strip():
            raise PeerError(f"{source}: peer {attr} must be a non-empty string, got {value!r}")
    if kind_of(obj) not in KINDS:
        raise PeerError(f"{source}: peer {obj.name!r} has kind {kind_of(obj)!r}, not one of {', '.join(KINDS)}")
    return obj


def peers_from(obj: Any, source: str) -> list[Peer]:
    """Peers from what an entry point loads: a peer, or a callable returning one or an iterable."""
    if isinstance(obj, Peer):
        return [_check(obj, source)]
    if not callable(obj):
        raise PeerError(f"{source}: loads {obj!r}, neither a peer nor a callable returning peers")
    made = obj()
    items = [made] if isinstance(made, Peer) else made
    if not isinstance(items, Iterable):
        raise PeerError(f"{source}: returned {made!r}, not a peer or an iterable of peers")
    return [_check(item, source) for item in items]


# ----------------------------------------------------------------------------- built-in peers
def _cuda_capability() -> tuple[tuple[int, int] | None, str]:
    """(compute capability, reason) of the current GPU; imports torch (only when asked)."""
    if importlib.util.find_spec("torch") is None:
        return None, "PyTorch is not installed"
    import torch

    if not torch.cuda.is_available():
        return None, "no CUDA GPU is visible to PyTorch"
    major, minor = torch.cuda.get_device_capability()
    return (major, minor), ""


def _fp8_capable() -> tuple[bool, str]:
    capability, reason = _cuda_capability()
    if capability is None:
        return False, reason
    if capability < (8, 9):
        major, minor = capability
        return False, f"FP8 tensor cores need compute capability 8.9 or newer; this GPU is {major}.{minor}"
    return True, ""


@dataclasses.dataclass(frozen=True)
class TorchNativePeer:
    """``torch.matmul`` (BF16) and ``torch._scaled_mm`` (FP8 E4M3, tensorwise or rowwise scales)."""

    name: str
    precision: str
    fp8: bool
    kind: str = "gemm"

    def available(self) -> tuple[bool, str]:
        if self.fp8:
            return _fp8_capable()
        capability, reason = _cuda_capability()
        return capability is not None, reason

    def competitor(self, gemm: GemmShape) -> Competitor:
        from gemm_bench.measure.backends import torch_native

        return torch_native.peer_competitor(self.name, gemm)


#: The same names as :data:`gemm_bench.measure.backends.torch_native.PEERS`, the rows results already hold.
TORCH_NATIVE = (
    TorchNativePeer("torch.matmul (BF16)", "BF16", fp8=False),
    TorchNativePeer("torch._scaled_mm (FP8 tensorwise)", "FP8 tensorwise", fp8=True),
    TorchNativePeer("torch._scaled_mm (FP8 rowwise)", "FP8 rowwise", fp8=True),
)


def torch_native_peers() -> tuple[TorchNativePeer, ...]:
    return TORCH_NATIVE


@dataclasses.dataclass(frozen=True)
class TorchaoFloat8Peer:
    """torchao's float8 training: ``Float8Linear`` (``convert_to_float8_training``) under torch.compile.

    What a PyTorch-native user would pick instead of TE: an autocast-like peer, timed as a
    Linear's forward and backward on the op's shapes.
    """

    recipe: str  # torchao's Float8LinearRecipeName value: "tensorwise" | "rowwise"
    kind: str = "linear"

    @property
    def name(self) -> str:
        return f"torchao Float8Linear ({self.recipe}, torch.compile)"

    @property
    def precision(self) -> str:
        return f"FP8 {self.recipe}"

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("torchao") is None:
            return False, "torchao is not installed (pip install torchao; it is in gemm-guide's gpu extra)"
        ok, reason = _fp8_capable()
        if not ok:
            return False, reason
        try:
            from torchao.float8 import Float8LinearConfig

            Float8LinearConfig.from_recipe_name(self.recipe)
        except (ImportError, AttributeError, ValueError) as exc:
            return False, f"torchao cannot build its {self.recipe} float8 recipe: {type(exc).__name__}: {exc}"
        return True, ""

    def competitor(self, gemm: GemmShape) -> Competitor:
        from gemm_bench.measure.backends.torchao_float8 import linear_competitor

        return linear_competitor(self.recipe, gemm)


def torchao_peers() -> tuple[TorchaoFloat8Peer, ...]:
    return (TorchaoFloat8Peer("tensorwise"), TorchaoFloat8Peer("rowwise"))


@dataclasses.dataclass(frozen=True)
class TritonExamplePeer:
    """The example peer: this project's own plain Triton matmul kernels (BF16, FP8 tensorwise)."""

    fp8: bool
    kind: str = "gemm"

    @property
    def name(self) -> str:
        return f"Triton example ({'FP8 tensorwise' if self.fp8 else 'BF16'})"

    @property
    def precision(self) -> str:
        return "FP8 tensorwise" if self.fp8 else "BF16"

    def available(self) -> tuple[bool, str]:
        if importlib.util.find_spec("triton") is None:
            return False, "Triton is not installed (it ships with PyTorch's CUDA wheels on Linux)"
        if self.fp8:
            return _fp8_capable()
        capability, reason = _cuda_capability()
        return capability is not None, reason

    def competitor(self, gemm: GemmShape) -> Competitor:
        from gemm_bench.measure.backends.triton_peer import matmul_competitor

        return matmul_competitor(gemm, fp8=self.fp8)


def triton_example_peers() -> tuple[TritonExamplePeer, ...]:
    return (TritonExamplePeer(fp8=False), TritonExamplePeer(fp8=True))


#: Built in, so they exist even where the package's entry points were not (re)installed; the same
#: factories are registered in ``pyproject.toml`` and load once (entry points naming them are
#: recognised and skipped).
BUILTIN: dict[str, Callable[[], Iterable[Peer]]] = {
    "gemm_bench.measure.peers:torch_native_peers": torch_native_peers,
    "gemm_bench.measure.peers:torchao_peers": torchao_peers,
    "gemm_bench.measure.peers:triton_example_peers": triton_example_peers,
}


# ----------------------------------------------------------------------------- discovery
def discover(entry_points: Iterable[importlib.metadata.EntryPoint] | None = None,
             ) -> tuple[list[Peer], list[DiscoveryProblem]]:
    """Built-in peers, then every ``gemm_bench.peers`` entry point's; problems are collected.

    A broken entry point (import error, not a peer, a name already taken) is reported with its
    source and skipped: one bad plugin never hides the others.
    """
    if entry_points is None:
        entry_points = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    peers: list[Peer] = []
    problems: list[DiscoveryProblem] = []
    owner: dict[str, str] = {}

    def add(found: Iterable[Peer], source: str) -> None:
        for peer in found:
            if peer.name in owner:
                problems.append(DiscoveryProblem(
                    source, f"peer name {peer.name!r} is already registered by {owner[peer.name]}; skipped"))
                continue
            owner[peer.name] = source
            peers.append(peer)

    for source, factory in BUILTIN.items():
        add(peers_from(factory, source), source)
    for ep in entry_points:
        source = f"entry point {ep.name!r} ({ep.value})"
        if ep.value.replace(" ", "") in BUILTIN:
            continue
        try:
            add(peers_from(ep.load(), source), source)
        except (ImportError, AttributeError, PeerError, TypeError) as exc:
            message = str(exc) if isinstance(exc, PeerError) else f"{type(exc).__name__}: {exc}"
            problems.append(DiscoveryProblem(source, message))
    return peers, problems


def registered_peers() -> list[Peer]:
    """Every usable peer (broken registrations are left out; :func:`discover` says why)."""
    return discover()[0]


# ----------------------------------------------------------------------------- runner helpers
def availability(peers: Sequence[Peer]) -> dict[str, tuple[bool, str]]:
    """Each peer's ``available()``, asked once per run."""
    return {p.name: p.available() for p in peers}


def builders(peers: Sequence[Peer], gemm: GemmShape, kind: str,
             available: Mapping[str, tuple[bool, str]]) -> dict[str, Callable[[], Competitor]]:
    """Competitor builders of the available peers of ``kind`` for one GEMM (dense GEMMs only)."""
    if gemm.groups != 1:
        return {}

    def build(peer: Peer) -> Callable[[], Competitor]:
        return lambda: peer.competitor(gemm)

    return {p.name: build(p) for p in peers if kind_of(p) == kind and available[p.name][0]}


def rows(peers: Sequence[Peer], gemm: GemmShape, kind: str, available: Mapping[str, tuple[bool, str]],
         fields: Callable[[str, str], dict[str, Any]], failures: Mapping[str, str]) -> list[dict[str, Any]]:
    """``doc["peers"]`` rows of one GEMM: measured, failed or unsupported with the reason.

    A ``gemm`` peer gives one row (its pass); a ``linear`` peer two (``fprop`` and ``backward``).
    ``fields(peer name, region)`` gives a measured row's timing fields (``ms``, ``stats``, ``eager``,
    ``kernel_ms``: the runner's ``Timed.fields``).
    """
    out = []
    for p in peers:
        if kind_of(p) != kind:
            continue
        regions = LINEAR_REGIONS if kind == "linear" else (gemm.pass_,)
        for region in regions:
            row: dict[str, Any] = {"backend": p.name, "precision": p.precision, "kind": kind, "op": gemm.op,
                                   "pass": region, "m": gemm.m, "k": gemm.k, "n": gemm.n, "groups": gemm.groups}
            ok, reason = available[p.name]
            if gemm.groups != 1:
                row.update(status="unsupported", reason=DENSE_ONLY_REASON)
            elif not ok:
                row.update(status="unsupported", reason=reason)
            elif p.name in failures:
                row.update(status="failed", reason=failures[p.name])
            else:
                row.update(status="measured", **fields(p.name, region))
            out.append(row)
    return out
