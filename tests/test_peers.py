"""The peer interface: discovery through entry points, unavailability reasons, rows, no torch at discovery."""

from __future__ import annotations

import ast
import dataclasses
import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gemm_bench.measure import peers
from gemm_bench.measure.peers import DENSE_ONLY_REASON, ENTRY_POINT_GROUP, PeerError, discover, peers_from
from gemm_bench.question.shapes import GemmShape

ROOT = Path(__file__).resolve().parent.parent
GEMM = GemmShape("qkv", "dgrad", 256, 512, 128)


@dataclasses.dataclass(frozen=True)
class FakePeer:
    name: str
    precision: str = "BF16"
    kind: str = "gemm"
    ok: bool = True

    def available(self) -> tuple[bool, str]:
        return (True, "") if self.ok else (False, "needs a Foo accelerator")

    def competitor(self, gemm: GemmShape) -> Any:
        return lambda mark: None


def fake_factory() -> list[FakePeer]:
    return [FakePeer("My kernel (BF16)"), FakePeer("My kernel (FP8)", precision="FP8", ok=False)]


SINGLE_PEER = FakePeer("A single peer object")
NOT_A_PEER = object()


def bad_kind() -> list[FakePeer]:
    return [FakePeer("Odd kind", kind="conv")]


def duplicate_of_builtin() -> list[FakePeer]:
    return [FakePeer("torch.matmul (BF16)")]


def ep(name: str, value: str) -> importlib.metadata.EntryPoint:
    return importlib.metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


BUILTIN_NAMES = [
    "torch.matmul (BF16)", "torch._scaled_mm (FP8 tensorwise)", "torch._scaled_mm (FP8 rowwise)",
    "torchao Float8Linear (tensorwise, torch.compile)", "torchao Float8Linear (rowwise, torch.compile)",
    "Triton example (BF16)", "Triton example (FP8 tensorwise)",
]


def test_builtin_peers_without_entry_points() -> None:
    found, problems = discover([])
    assert [p.name for p in found] == BUILTIN_NAMES
    assert problems == []
    assert {peers.kind_of(p) for p in found} == {"gemm", "linear"}
    assert [p.precision for p in found if "torchao" in p.name] == ["FP8 tensorwise", "FP8 rowwise"]


def test_torch_native_names_match_the_backend_rows() -> None:
    # The backend imports torch, so read its PEERS table from the source.
    tree = ast.parse((ROOT / "bench/gemm_bench/measure/backends/torch_native.py").read_text())
    table = next(node.value for node in ast.walk(tree)
                 if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "PEERS")
    assert isinstance(table, ast.Dict)
    keys = [k.value for k in table.keys if isinstance(k, ast.Constant)]
    assert keys == [p.name for p in peers.TORCH_NATIVE]


def test_fake_entry_point_is_discovered() -> None:
    found, problems = discover([ep("mine", "tests.test_peers:fake_factory"),
                                ep("single", "tests.test_peers:SINGLE_PEER")])
    names = [p.name for p in found]
    assert names[: len(BUILTIN_NAMES)] == BUILTIN_NAMES
    assert names[len(BUILTIN_NAMES):] == ["My kernel (BF16)", "My kernel (FP8)", "A single peer object"]
    assert problems == []


def test_builtin_entry_points_load_once() -> None:
    found, problems = discover([ep("torch-native", "gemm_bench.measure.peers:torch_native_peers"),
                                ep("triton-example", "gemm_bench.measure.peers:triton_example_peers")])
    assert [p.name for p in found] == BUILTIN_NAMES and problems == []


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("tests.no_such_module:peers", "ModuleNotFoundError"),
        ("tests.test_peers:no_such_name", "AttributeError"),
        ("tests.test_peers:NOT_A_PEER", "neither a peer nor a callable"),
        ("tests.test_peers:bad_kind", "kind 'conv'"),
        ("tests.test_peers:duplicate_of_builtin", "already registered by gemm_bench.measure.peers:torch_native_peers"),
    ],
)
def test_broken_entry_points_are_reported_and_skipped(value: str, problem: str) -> None:
    found, problems = discover([ep("broken", value), ep("good", "tests.test_peers:fake_factory")])
    assert [p.name for p in found][-2:] == ["My kernel (BF16)", "My kernel (FP8)"]
    [reported] = problems
    assert reported.source == f"entry point 'broken' ({value})"
    assert problem in reported.message


def test_peers_from_rejects_non_peers() -> None:
    with pytest.raises(PeerError, match="not a peer or an iterable"):
        peers_from(lambda: 42, "test")
    with pytest.raises(PeerError, match="name must be a non-empty string"):
        peers_from(lambda: [FakePeer("  ")], "test")


def test_installed_entry_points_discover_without_problems() -> None:
    found, problems = discover()
    assert problems == []
    assert [p.name for p in found][: len(BUILTIN_NAMES)] == BUILTIN_NAMES


def test_discovery_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "from gemm_bench.measure.peers import discover\n"
        "found, problems = discover()\n"
        "assert len(found) >= 7 and not problems, problems\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('torch', 'torchao', 'triton', 'transformer_engine', 'numpy'))\n"
        "assert not bad, bad\n"
        "print('pure')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pure"


def _hide(monkeypatch: pytest.MonkeyPatch, *modules: str) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name.split(".")[0] in modules else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_unavailability_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide(monkeypatch, "torchao", "triton", "torch")
    torchao = peers.TorchaoFloat8Peer("rowwise")
    assert torchao.available() == (
        False, "torchao is not installed (pip install torchao; it is in gemm-guide's gpu extra)")
    ok, reason = peers.TritonExamplePeer(fp8=True).available()
    assert not ok and reason.startswith("Triton is not installed")
    for native in peers.TORCH_NATIVE:
        assert native.available() == (False, "PyTorch is not installed")


def test_torchao_without_gpu_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    # torchao present but no FP8-capable GPU: the GPU reason, not an import error.
    monkeypatch.setattr(peers, "_fp8_capable", lambda: (False, "no CUDA GPU is visible to PyTorch"))
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a, **k: object() if name == "torchao" else real(name, *a, **k))
    assert peers.TorchaoFloat8Peer("tensorwise").available() == (False, "no CUDA GPU is visible to PyTorch")


def fields_of(samples: dict[str, dict[str, float]]) -> Any:
    """The runner's ``Timed.fields`` for fake medians: what a measured row stores."""
    def fields(name: str, region: str) -> dict[str, Any]:
        ms = samples[name][region]
        return {"ms": ms, "stats": {"median_ms": ms, "iqr_ms": 0.0}}

    return fields


def test_builders_and_rows_for_gemm_peers() -> None:
    found = fake_factory()
    available = peers.availability(found)
    assert available == {"My kernel (BF16)": (True, ""), "My kernel (FP8)": (False, "needs a Foo accelerator")}
    built = peers.builders(found, GEMM, "gemm", available)
    assert list(built) == ["My kernel (BF16)"]
    assert callable(built["My kernel (BF16)"]())
    rows = peers.rows(found, GEMM, "gemm", available, fields_of({"My kernel (BF16)": {"dgrad": 0.5}}), {})
    assert rows[0] == {"backend": "My kernel (BF16)", "precision": "BF16", "kind": "gemm", "op": "qkv",
                       "pass": "dgrad", "m": 256, "k": 512, "n": 128, "groups": 1, "status": "measured",
                       "ms": 0.5, "stats": {"median_ms": 0.5, "iqr_ms": 0.0}}
    assert rows[1]["status"] == "unsupported" and rows[1]["reason"] == "needs a Foo accelerator"
    failed = peers.rows(found[:1], GEMM, "gemm", available, fields_of({}), {"My kernel (BF16)": "RuntimeError: boom"})
    assert failed[0]["status"] == "failed" and failed[0]["reason"] == "RuntimeError: boom"


def test_linear_peers_give_fprop_and_backward_rows() -> None:
    linear = [FakePeer("Compiled FP8 Linear", precision="FP8", kind="linear")]
    fprop = GemmShape("mlp_up", "fprop", 256, 512, 1024)
    available = peers.availability(linear)
    assert list(peers.builders(linear, fprop, "linear", available)) == ["Compiled FP8 Linear"]
    assert peers.builders(linear, fprop, "gemm", available) == {}
    samples = {"Compiled FP8 Linear": {"fprop": 1.0, "backward": 2.0}}
    rows = peers.rows(linear, fprop, "linear", available, fields_of(samples), {})
    assert [(r["pass"], r["ms"]) for r in rows] == [("fprop", 1.0), ("backward", 2.0)]


def test_grouped_gemms_are_unsupported_for_peers() -> None:
    grouped = dataclasses.replace(GEMM, groups=8)
    found = fake_factory()
    available = peers.availability(found)
    assert peers.builders(found, grouped, "gemm", available) == {}
    rows = peers.rows(found, grouped, "gemm", available, fields_of({}), {})
    assert {r["reason"] for r in rows} == {DENSE_ONLY_REASON}
