"""The `gemm-bench` command-line contract, checked as the issues write it."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import subprocess
import sys
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemm_bench.cli import commands as cli
from gemm_bench.cli import main
from gemm_bench.measure import phases
from gemm_bench.measure.timing import TimerSettings
from gemm_bench.results.cache import Cache, read_document
from tests.conftest import fuzz_examples, make_document

ROOT = Path(__file__).resolve().parent.parent
TE_GUIDE = ["--hidden-size", "4096", "--ffn-hidden-size", "16384", "--num-attention-heads", "32", "--num-layers",
            "24", "--micro-batch-size", "31", "--seq-length", "512"]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gemm_bench.cli", *args], capture_output=True, text=True, cwd=ROOT)


def test_shapes_json_as_written_in_the_issue() -> None:
    out = run_cli("shapes", *TE_GUIDE, "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert len(rows) == 12
    assert all(set(r) == {"op", "pass", "m", "k", "n", "groups", "flops"} for r in rows)
    fprop = {r["op"]: f"{r['m']}x{r['k']}x{r['n']}" for r in rows if r["pass"] == "fprop"}
    assert fprop == {"qkv": "15872x4096x12288", "attn_out": "15872x4096x4096",
                     "mlp_up": "15872x4096x16384", "mlp_down": "15872x16384x4096"}
    assert all(r["flops"] == 2 * r["m"] * r["k"] * r["n"] * r["groups"] for r in rows)


def test_shapes_table_and_manual_mode(capsys) -> None:
    assert main(["shapes", "--model", "mixtral-8x7b"]) == 0
    text = capsys.readouterr().out
    assert "balanced routing" in text and "1024x4096x28672" in text
    assert main(["shapes", "--shape", "1x2x3", "--shape", "4x5x6", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["m"], r["k"], r["n"]) for r in rows] == [(1, 2, 3), (4, 5, 6)]


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--hidden-size", "x"], "--hidden-size"),
        (["--hidden-size", "4096", "--ffn-hidden-size", "1", "--num-attention-heads", "30"], "--hidden-size"),
        (["--model", "te-guide-5b", "--num-query-groups", "5"], "--num-attention-heads"),
        (["--model", "nope"], "--model"),
        (["--shape", "1x2"], "--shape"),
        (["--model", "llama3-8b", "--shape", "1x2x3"], "--shape"),
        (["--hf-config", "/does/not/exist.json"], "--hf-config"),
        (["--model", "te-guide-5b", "--tensor-model-parallel-size", "0"], "--tensor-model-parallel-size"),
        (["--sweep", ","], "--sweep"),
    ],
)
def test_bad_input_exits_2_with_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    out = run_cli("shapes", *args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert flag in one_error(out.stderr)


def test_run_rejects_bad_precisions_before_touching_a_gpu() -> None:
    out = run_cli("run", "--model", "te-guide-5b", "--precisions", "fp8,bf16")
    assert out.returncode == 2 and "--precisions" in one_error(out.stderr)
    out = run_cli("run", "--model", "te-guide-5b", "--modes", "training")
    assert out.returncode == 2 and "--modes" in out.stderr


def test_report_prints_text_and_json_from_the_real_cache() -> None:
    path = next(p for p in Cache(ROOT / "docs" / "_gemm_cache").files() if "h100" in p.name)
    text = run_cli("report", str(path))
    assert text.returncode == 0, text.stderr
    assert "== Autocast ==" in text.stdout and "vs BF16" in text.stdout
    out = run_cli("report", str(path), "--json")
    data = json.loads(out.stdout)
    assert set(data["device"]) == {"name", "compute_capability"}
    assert data["device"]["compute_capability"] == "9.0"
    assert {c["status"] for c in data["cells"]} <= {"measured", "unsupported", "failed"}
    assert {"mode", "precision", "per_layer_ms", "model_ms", "speedup_vs_bf16"} <= set(data["totals"][0])
    bad = run_cli("report", str(ROOT / "README.md"))
    assert bad.returncode == 2 and "README.md" in bad.stderr


# ------------------------------------------------------------------------------------ helpers
def call(argv: Sequence[str]) -> tuple[int, str, str]:
    """Run ``main`` in this process: (exit status, stdout, stderr); argparse's exits included."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def one_error(err: str) -> str:
    """The one error ``err`` holds, as one line: its first line says ``error:``, the lines after it are
    its continuation (indented, issue 44: errors wrap at 100 columns instead of running to 214), and
    none is wider than 100 columns. Returns the lines joined back into one."""
    lines = err.strip("\n").splitlines()
    assert lines and "error:" in lines[0] and "Traceback" not in err, err
    assert all(line.startswith("    ") and line.strip() for line in lines[1:]), err
    assert max(map(len, lines)) <= 100, err
    return " ".join(line.strip() for line in lines)


def messages(err: str) -> list[str]:
    """The messages (warnings, errors) ``err`` holds, each wrapped message joined back into one line:
    a line indented by four spaces continues the message above it."""
    out: list[str] = []
    for line in err.strip("\n").splitlines():
        if line.startswith("    ") and out:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def assert_one_line_error(code: int, err: str, expected_code: int, *needles: str) -> str:
    """One error (:func:`one_error`: wrapped lines are one error) naming each of ``needles``."""
    assert code == expected_code, err
    line = one_error(err)
    for needle in needles:
        assert needle in line, line
    return line


def no_gpu_stack_expected() -> Callable[[], Any]:
    def fail() -> Any:
        raise AssertionError("bad input must be reported before the GPU stack is imported")

    return fail


class FakeRunner:
    """Stands in for gemm_bench.measure.runner.Runner: records how the CLI built it, returns a valid result."""

    instances: ClassVar[list[FakeRunner]] = []

    def __init__(self, settings: TimerSettings, *, progress: Callable[[int, int, str], None], **options: Any) -> None:
        self.settings = settings
        self.progress = progress
        self.options = options
        FakeRunner.instances.append(self)

    def measure(self, question: Any, precisions: list[str], modes: list[str]) -> dict[str, Any]:
        phases = self.options.get("phases")
        for done, label in enumerate(("autocast qkv", "prequant qkv/fprop")):
            self.progress(done, 2, label)
        if phases is not None:
            with phases.phase("timed rounds"):
                pass
        self.progress(2, 2, "done")
        return make_document(question, precisions=sorted({"bf16", *precisions}), modes=modes)


class FakeNoGpu(RuntimeError):
    pass


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> type[FakeRunner]:
    FakeRunner.instances = []
    monkeypatch.setattr(cli, "load_runner", lambda: (FakeRunner, FakeNoGpu))
    return FakeRunner


RUN = ["run", "--shape", "4096x4096x4096", "--no-peers"]


# ------------------------------------------------------------------------------------ exit 3
@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="needs a machine without PyTorch")
def test_run_without_pytorch_is_one_line_and_exit_3() -> None:
    out = run_cli("run", "--model", "te-guide-5b")
    line = assert_one_line_error(out.returncode, out.stderr, 3, "PyTorch", "gpu")
    assert line.startswith("gemm-bench run: error:") and out.stdout == ""


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs PyTorch (the tests session's CPU build)")
def test_run_with_a_cpu_only_pytorch_is_one_line_and_exit_3() -> None:
    """The test above's other side, where PyTorch is installed (``nox -s tests`` installs its CPU build)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible: gemm-bench run would measure")
    out = run_cli("run", "--model", "te-guide-5b")
    line = assert_one_line_error(out.returncode, out.stderr, 3, "no CUDA GPU is visible to PyTorch")
    assert line.startswith("gemm-bench run: error:") and out.stdout == ""


def test_missing_torch_transformer_engine_or_cuda_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    argv = [*RUN, "--cache-dir", str(tmp_path)]
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError, as where it is absent
    assert_one_line_error(*call(argv)[::2], 3, "PyTorch is not importable")

    no_cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: False))
    monkeypatch.setitem(sys.modules, "torch", no_cuda)
    assert_one_line_error(*call(argv)[::2], 3, "no CUDA GPU")

    cuda = types.SimpleNamespace(cuda=types.SimpleNamespace(is_available=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", cuda)
    monkeypatch.setitem(sys.modules, "transformer_engine", None)
    assert_one_line_error(*call(argv)[::2], 3, "Transformer Engine is not importable")
    assert list(tmp_path.iterdir()) == []


def test_runner_finding_no_gpu_is_exit_3(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_gpu(settings: TimerSettings, **options: Any) -> None:
        raise FakeNoGpu("no CUDA GPU is visible to PyTorch")

    monkeypatch.setattr(cli, "load_runner", lambda: (no_gpu, FakeNoGpu))
    assert_one_line_error(*call([*RUN, "--cache-dir", str(tmp_path)])[::2], 3, "no CUDA GPU")


# ------------------------------------------------------------------------------------ exit 2
@pytest.mark.parametrize(
    ("extra", "flag"),
    [
        (["--warmup", "nan"], "--warmup"),
        (["--warmup", "inf"], "--warmup"),
        (["--warmup", "-inf"], "--warmup"),
        (["--warmup", "-0.5"], "--warmup"),
        (["--warmup", "601"], "--warmup"),
        (["--warmup", "1e400"], "--warmup"),
        (["--warmup", "soon"], "--warmup"),
        (["--repetitions", "0"], "--repetitions"),
        (["--repetitions", "-3"], "--repetitions"),
        (["--repetitions", "2.5"], "--repetitions"),
        (["--repetitions", "100001"], "--repetitions"),
        (["--repetitions", "9" * 5000], "--repetitions"),
        (["--precisions", ""], "--precisions"),
        (["--precisions", " , "], "--precisions"),
        (["--precisions", "fp8"], "--precisions"),
        (["--modes", "training"], "--modes"),
        (["--timer", "stopwatch"], "--timer"),
        (["--out", "x.json", "--cache-dir", "c"], "--out"),
        (["--bogus"], "--bogus"),
    ],
)
def test_run_bad_input_is_exit_2_naming_the_flag_before_any_gpu_import(
    monkeypatch: pytest.MonkeyPatch, extra: list[str], flag: str
) -> None:
    monkeypatch.setattr(cli, "load_runner", no_gpu_stack_expected())
    code, out, err = call([*RUN, *extra])
    assert_one_line_error(code, err, 2, flag)
    assert out == ""


def test_unwritable_destinations_are_refused_before_measuring(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli, "load_runner", no_gpu_stack_expected())
    a_file = tmp_path / "file"
    a_file.write_text("x")
    assert_one_line_error(*call([*RUN, "--out", str(tmp_path)])[::2], 2, "--out", "is a directory")
    assert_one_line_error(*call([*RUN, "--out", str(a_file / "x.json")])[::2], 2, "--out", "not a directory")
    assert_one_line_error(*call([*RUN, "--cache-dir", str(a_file)])[::2], 2, "--cache-dir", "not a directory")


def test_a_nul_character_in_an_argument_is_exit_2() -> None:
    assert_one_line_error(*call(["report", "a\x00b"])[::2], 2, "NUL")


# ------------------------------------------------------------------------------------ what ran
def test_run_passes_exactly_the_requested_timing_and_stores_the_result(fake_gpu: type[FakeRunner],
                                                                       tmp_path: Path) -> None:
    out_file = tmp_path / "new" / "result.json"
    code, out, err = call([*RUN, "--precisions", "bf16 FP8_Current", "--modes", "prequant", "--repetitions", "3",
                           "--warmup", "0", "--out", str(out_file)])
    assert code == 0, err
    (runner,) = fake_gpu.instances
    assert runner.settings == TimerSettings(timer="events", repetitions=3, warmup_s=0.0)
    assert runner.options == {"peers": False, "nvtx": False}  # no phases unless asked
    assert f"wrote {out_file}" in out and "Pre-quantized" in out
    doc = json.loads(out_file.read_text())
    assert {c["precision"] for c in doc["cells"]} == {"bf16", "fp8-current"}
    assert {c["mode"] for c in doc["cells"]} == {"prequant"}


def test_run_stores_into_the_cache_dir(fake_gpu: type[FakeRunner], tmp_path: Path) -> None:
    code, out, err = call([*RUN, "--precisions", "bf16", "--cache-dir", str(tmp_path / "cache")])
    assert code == 0, err
    (path,) = Cache(tmp_path / "cache").files()
    assert f"wrote {path}" in out
    read_document(path)


def test_repetitions_3_times_3_rounds_and_the_method_says_so() -> None:
    three = TimerSettings(repetitions=3)
    for per_round in (1e-9, 1e-3, 1.0, 100.0, float("nan")):
        assert three.rounds(per_round) == 3
    method = three.method()
    assert method["repetitions"] == 3 and method["min_repetitions"] == 3 and method["max_group_s"] == 10.0
    assert "exactly 3 rounds" in method["rounds_rule"] and "stats.n" in method["rounds_rule"]
    default = TimerSettings()
    assert default.rounds(0.001) == 40 and default.rounds(0.5) == 20 and default.rounds(100.0) == 10
    assert default.method()["min_repetitions"] == 10
    assert ("until every region's median was known to 1.0% (half-width of its 95% confidence interval), at least "
            "10 and at most 40 rounds or 10 s") in default.method()["rounds_rule"]


@settings(max_examples=fuzz_examples(200), deadline=None)
@given(st.integers(1, 100_000), st.integers(1, 100_000), st.floats(1e-3, 3600),
       st.floats(allow_nan=True, allow_infinity=True))
def test_rounds_never_exceed_the_request_nor_fall_below_the_floor(reps: int, floor: int, cap: float,
                                                                  per_round: float) -> None:
    s = TimerSettings(repetitions=reps, min_repetitions=floor, max_group_s=cap)
    rounds = s.rounds(per_round)
    assert min(floor, reps) <= rounds <= reps
    assert s.method()["min_repetitions"] == min(floor, reps) <= reps


@pytest.mark.parametrize(
    ("fields", "field"),
    [({"warmup_s": float("nan")}, "warmup_s"), ({"warmup_s": float("inf")}, "warmup_s"),
     ({"warmup_s": -1.0}, "warmup_s"), ({"warmup_s": 601.0}, "warmup_s"), ({"spinup_s": float("nan")}, "spinup_s"),
     ({"repetitions": 0}, "repetitions"), ({"repetitions": True}, "repetitions"),
     ({"repetitions": 2.0}, "repetitions"), ({"min_repetitions": 0}, "min_repetitions"),
     ({"max_group_s": 0.0}, "max_group_s"), ({"max_group_s": float("nan")}, "max_group_s"),
     ({"timer": "stopwatch"}, "timer")],
)
def test_timer_settings_refuse_what_would_hang_or_lie(fields: dict[str, Any], field: str) -> None:
    from gemm_bench.measure.timing import TimerSettingsError

    with pytest.raises(TimerSettingsError) as info:
        TimerSettings(**fields)
    assert info.value.field == field


def test_few_samples_get_honest_quantiles() -> None:
    from gemm_bench.measure.timing import Samples

    stats = Samples([1.0, 2.0, 4.0]).to_stats()
    assert stats["n"] == 3 and stats["median_ms"] == 2.0 and stats["min_ms"] == 1.0
    assert 1.0 <= stats["p10_ms"] < stats["p90_ms"] <= 4.0  # not "every quantile is the minimum"
    assert stats["iqr_ms"] > 0  # three different times do not have zero spread
    one = Samples([1.5]).to_stats()
    assert one["p10_ms"] == one["p90_ms"] == one["median_ms"] == 1.5 and one["iqr_ms"] == 0.0
    many = [float(v) for v in range(1, 41)]
    import statistics

    q10, q4 = statistics.quantiles(many, n=10), statistics.quantiles(many, n=4)
    stats = Samples(many).to_stats()  # 10+ samples: the same numbers as results always had
    assert (stats["p10_ms"], stats["p90_ms"], stats["iqr_ms"]) == (round(q10[0], 6), round(q10[-1], 6),
                                                                   round(q4[2] - q4[0], 6))


# ------------------------------------------------------------------------------------ progress
class TtyStream(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_plain_lines_when_stderr_is_not_a_terminal() -> None:
    stream = io.StringIO()
    with cli.progress_display(stream) as progress:
        progress(0, 2, "autocast qkv")
        progress(1, 2, "prequant qkv/fprop")
        progress(2, 2, "done")
    lines = stream.getvalue().splitlines()
    assert len(lines) == 3 and "\x1b" not in stream.getvalue() and "\r" not in stream.getvalue()
    assert lines[0].startswith("[0/2 groups") and "autocast qkv" in lines[0]
    assert "s left] prequant" in lines[1] and lines[2].endswith("] done")


def test_progress_on_a_terminal_is_drawn_by_rich() -> None:
    pytest.importorskip("rich")
    stream = TtyStream()
    with cli.progress_display(stream) as progress:
        assert not isinstance(progress, cli.PlainProgress)
        progress(1, 4, "autocast mlp_up")
    text = stream.getvalue()
    assert "autocast mlp_up" in text and "1/4" in text


def test_progress_without_rich_falls_back_to_plain_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("rich", "rich.console", "rich.progress"):
        monkeypatch.setitem(sys.modules, name, None)
    stream = TtyStream()
    with cli.progress_display(stream) as progress:
        assert isinstance(progress, cli.PlainProgress)
        progress(1, 4, "autocast mlp_up")
    assert stream.getvalue().startswith("[1/4 groups")


def test_run_reports_progress_on_stderr(fake_gpu: type[FakeRunner], tmp_path: Path) -> None:
    code, _out, err = call([*RUN, "--precisions", "bf16", "--out", str(tmp_path / "r.json")])
    assert code == 0
    assert [line.split("] ")[1] for line in err.splitlines()] == ["autocast qkv", "prequant qkv/fprop", "done"]


def test_shapes_and_report_import_neither_rich_nor_torch() -> None:
    path = next(p for p in Cache(ROOT / "docs" / "_gemm_cache").files() if "h100" in p.name)
    code = (
        "import sys\n"
        "from gemm_bench.cli import main\n"
        "main(['shapes', '--model', 'llama3-8b'])\n"
        f"main(['report', {str(path)!r}])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformer_engine', 'rich', "
        "'matplotlib'))\n"
        "assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr


# ------------------------------------------------------------------------------------ --profile-phases
def test_profile_phases_prints_where_the_time_went(fake_gpu: type[FakeRunner], tmp_path: Path) -> None:
    out_file = tmp_path / "r.json"
    code, out, err = call([*RUN, "--precisions", "bf16", "--profile-phases", "--out", str(out_file)])
    assert code == 0, err
    (runner,) = fake_gpu.instances
    profiler = runner.options["phases"]
    assert type(profiler).__name__ == "PhaseProfiler"
    table = out[out.index("wrote "):]
    for name in (phases.PROCESS_START, phases.IMPORTS, phases.CUDA_START, phases.TIMED, phases.WRITING, "total"):
        assert name in table, table
    assert profiler.to_text() in out
    assert "process start" not in out_file.read_text()  # printed, stored nowhere


# ------------------------------------------------------------------------------------ readme-figure
@pytest.fixture
def figures_available() -> None:
    pytest.importorskip("gemm_bench.report.figures")


@pytest.mark.usefixtures("figures_available")
def test_readme_figure_writes_the_variants_then_is_up_to_date(tmp_path: Path) -> None:
    out = tmp_path / "static" / "readme.svg"
    code, stdout, err = call(["readme-figure", "--cache-dir", str(ROOT / "docs" / "_gemm_cache"), "--out", str(out)])
    assert code == 0, err
    written = [Path(line.removeprefix("wrote ")) for line in stdout.splitlines()]
    assert out in written and all(p.read_bytes().startswith(b"<?xml") for p in written)
    code, stdout, err = call(["readme-figure", "--cache-dir", str(ROOT / "docs" / "_gemm_cache"), "--out", str(out)])
    assert code == 0 and "up to date" in stdout


@pytest.mark.usefixtures("figures_available")
def test_readme_figure_without_a_usable_result_is_exit_2(tmp_path: Path) -> None:
    from gemm_bench.question.question import build_question
    from gemm_bench.results.cache import file_name

    junk = tmp_path / file_name(build_question(model="te-guide-5b").hash, "NVIDIA H100 80GB HBM3")
    junk.write_text("{")  # the README's question, unreadable
    code, _out, err = call(["readme-figure", "--cache-dir", str(tmp_path), "--out", str(tmp_path / "x.svg")])
    assert code == 2, err
    lines = messages(err)  # each wrapped at 100 columns (issue 44), one message each
    # the unreadable file is named (a path longer than a line is broken at the edge: compare without spaces)
    assert "warning: ignoring" in lines[0] and junk.name in lines[0].replace(" ", "")
    assert "--cache-dir" in lines[-1] and "no result" in lines[-1] and "Traceback" not in err
    assert not (tmp_path / "x.svg").exists()
    assert_one_line_error(*call(["readme-figure", "--cache-dir", str(tmp_path / "nope")])[::2], 2, "--cache-dir")
    assert_one_line_error(*call(["readme-figure", "--cache-dir", str(tmp_path), "--out", str(tmp_path)])[::2],
                          2, "--out")


@pytest.mark.usefixtures("figures_available")
def test_readme_figure_needs_no_matplotlib(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The README's SVGs are written as text: with matplotlib (and numpy) unimportable, the
    command still writes both files, the same bytes as the committed ones."""
    for name in [m for m in sys.modules if m.split(".")[0] in ("matplotlib", "numpy")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "numpy", None)
    out = tmp_path / "readme-speedups.svg"
    code, stdout, err = call(["readme-figure", "--cache-dir", str(ROOT / "docs" / "_gemm_cache"), "--out", str(out)])
    # The only thing said on stderr: a stale result (another method version) left out of the figure.
    assert code == 0 and all("skipping the result on" in line and "stale" not in line.split(":")[0]
                             for line in err.splitlines()), err
    assert stdout.count("wrote ") == 2
    for name in ("readme-speedups.svg", "readme-speedups-dark.svg"):
        assert (tmp_path / name).read_bytes() == (ROOT / "docs" / "_static" / name).read_bytes()


# ------------------------------------------------------------------------------------ fuzz
class FakeFigures:
    """gemm_bench.report.figures for the fuzz: drawing is not what it tests, and must write nothing."""

    class FigureError(Exception):
        pass

    @staticmethod
    def write_readme_figure(cache_dir: Path, out: Path, on_error: Any = None) -> list[Path]:
        raise FakeFigures.FigureError(f"no result in {cache_dir}")


#: ``refresh`` and ``merge`` (gemm_bench.cli.fleet) are left out: given a real directory they scan
#: or write whole trees; their own tests (test_refresh, test_compare_merge) cover their errors.
SUBCOMMANDS = ["shapes", "run", "report", "presets", "readme-figure", "compare"]
MODEL_FLAGS = ["--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--num-query-groups", "--kv-channels",
               "--num-layers", "--micro-batch-size", "--seq-length", "--tensor-model-parallel-size", "--num-experts",
               "--moe-router-topk", "--moe-ffn-hidden-size", "--expert-model-parallel-size", "--model", "--shape",
               "--sweep", "--hf-config", "--swiglu", "--sequence-parallel"]
#: Each subcommand's own flags (drawn most of the time, so that many argv get past argparse).
OWN_FLAGS = {
    "shapes": [*MODEL_FLAGS, "--json"],
    "run": [*MODEL_FLAGS, "--precisions", "--modes", "--out", "--cache-dir", "--timer", "--repetitions", "--warmup",
            "--no-peers", "--profile-phases"],
    "report": ["--json", "--num-layers"],
    "presets": [],
    "readme-figure": ["--cache-dir", "--out"],
    "compare": ["--json", "--markdown"],
}
FLAGS = sorted({f for flags in OWN_FLAGS.values() for f in flags} | {"--nsys", "--bogus", "-h", "--", "-"})
SWITCHES = {"--swiglu", "--sequence-parallel", "--json", "--markdown", "--no-peers", "--profile-phases", "-h", "--",
            "-"}
#: A valid start for the commands that need a question, so the fuzz reaches the later checks.
BASES = {"shapes": ["--model", "te-guide-5b"], "run": ["--model", "te-guide-5b", "--precisions", "bf16"]}
#: Plausible values per flag, drawn half of the time (the other half: hostile ones).
GOOD = {"--model": ["te-guide-5b", "llama3-8b", "mixtral-8x7b"], "--shape": ["8x8x8", "1x2x3"], "--sweep": ["8,16"],
        "--precisions": ["bf16", "fp8-current mxfp8"], "--modes": ["autocast", "prequant"], "--timer": ["profiler"],
        "--repetitions": ["3", "40"], "--warmup": ["0", "0.5"], "--num-layers": ["2"], "--json": [""]}


def fuzz_values(tmp: Path) -> st.SearchStrategy[str]:
    real = sorted(str(p) for p in Cache(ROOT / "docs" / "_gemm_cache").files())[:4]
    return st.one_of(
        st.sampled_from(real),
        st.integers(-5, 1 << 22).map(str),
        st.sampled_from(["", " ", "x", "1e3", "4096", "nan", "inf", "-inf", "1e400", "0", "-1", "601", "3", "9" * 5000,
                         "te-guide-5b", "8x8x8", "0x1x1", "bf16,fp8-current", "fp8", "autocast prequant", "events",
                         "profiler", "../../etc/passwd", "\n", "a\nb", "\udcff", "\u2028", "--json", "-x",
                         str(ROOT / "README.md"), str(ROOT), str(tmp), str(tmp / "new" / "r.json"),
                         str(tmp / "cache"), "/proc/self/mem", "/dev/null"]),
        st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=8),
    )


@pytest.fixture(scope="module")
def fuzz_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.filterwarnings("ignore")
@settings(max_examples=fuzz_examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_argv_of_every_subcommand_exits_0_2_or_3_with_one_line(data: st.DataObject, fuzz_tmp: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(fuzz_tmp)  # a default --cache-dir/--out lands here, never in the repository

    def no_stack() -> Any:
        raise cli.MissingSoftwareError("fuzz: no GPU stack")

    monkeypatch.setattr(cli, "load_runner", no_stack)
    monkeypatch.setattr(cli, "load_figures", lambda: FakeFigures)
    command = data.draw(st.sampled_from([*SUBCOMMANDS, "", "bogus", "-h"]))
    argv = [command] if command else []
    if command == "report" and data.draw(st.booleans()):
        argv.append(data.draw(fuzz_values(fuzz_tmp)))
    if command == "compare":
        argv += data.draw(st.lists(fuzz_values(fuzz_tmp), max_size=3))
    if command in BASES and data.draw(st.booleans()):
        argv += BASES[command]
    own = OWN_FLAGS.get(command) or FLAGS
    for _ in range(data.draw(st.integers(0, 5))):
        flag = data.draw(st.one_of(st.sampled_from(own), st.sampled_from(own), st.sampled_from(FLAGS)))
        if flag in SWITCHES:
            argv.append(flag)
        else:
            good = st.sampled_from(GOOD.get(flag, ["64", str(fuzz_tmp / "out" / "r.json")]))
            argv += [flag, data.draw(st.one_of(good, fuzz_values(fuzz_tmp)))]
    code, _out, err = call(argv)
    assert code in (0, 2, 3), (argv, code, err)
    assert "Traceback" not in err
    if code:
        one_error(err)
    before = {p for p in fuzz_tmp.rglob("*")}
    assert not before, before  # nothing measured, nothing written


def test_python_dash_m_reports_errors_of_other_modules_as_usage_errors(tmp_path: Path) -> None:
    """`python -m gemm_bench.cli` (how the GPU machine runs it) catches the UsageError that
    cli_fleet raises, as the console script does; and Python 3.11's argparse, which can hand
    `compare - -- --` a list for B, gets a usage error, not a TypeError."""
    env = {"PYTHONPATH": str(ROOT / "bench"), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "gemm_bench.cli", "compare", "-", "--", "--"], cwd=tmp_path,
                          capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("gemm-bench compare: error: A, B:") and "Traceback" not in proc.stderr
