"""GPU checks of the refresh's overhead cuts that touch what a result records.

    python3 -m pytest -m gpu -s tests/test_gpu_overheads.py

* The refresh parent reads the software stack from the installed sources (no torch or TE import):
  on the GPU box it must equal what importing gives (``local_stack``) and what a measurement
  records in its provenance, field by field, or a fresh result would look stale.
* ``measure_question`` samples with the process's shared NVML sampler: two questions in one
  process (a refresh worker's life) use one sampler child, and each group still has its samples.
"""

from __future__ import annotations

from gemm_bench.question.question import build_question
from tests.gpu_skip import gpu_module

torch, _, pytestmark = gpu_module()

from gemm_bench.cli.installed_stack import installed_stack  # noqa: E402
from gemm_bench.measure import telemetry  # noqa: E402
from gemm_bench.measure.timing import TimerSettings  # noqa: E402
from gemm_bench.results.stack import STACK_FIELDS, document_stack, local_stack  # noqa: E402

FAST = TimerSettings(repetitions=20, warmup_s=0.2, spinup_s=1.0)


def test_the_stack_read_from_sources_is_what_a_result_records() -> None:
    from gemm_bench.measure import provenance
    from gemm_bench.measure.backends import te as te_backend
    from gemm_bench.results.schema import METHOD_VERSION

    read = installed_stack(list(STACK_FIELDS))
    imported = local_stack()
    _, recorded = provenance.collect({}, te_backend.VERSION)
    doc = {"provenance": recorded, "method_version": METHOD_VERSION}
    print("stack read from sources:", read)
    print("stack a result records: ", document_stack(doc))
    assert read == imported
    assert read == document_stack(doc)


def test_two_questions_in_one_process_share_one_sampler_child() -> None:
    from gemm_bench.measure.runner import measure_question

    children = []
    for shape in ("8192x8192x8192", "4096x4096x4096"):
        doc = measure_question(build_question(shapes=[shape]), ["bf16"], ["prequant"], settings=FAST)
        sampler = telemetry.shared_sampler()
        assert sampler._proc is not None and sampler._proc.poll() is None  # still sampling
        children.append(sampler._proc.pid)
        clocks = [g["clock"] for g in doc["groups"]]
        print(shape, "groups' clock blocks:", clocks, "phases:", doc["provenance"]["phases_s"])
        # Samples, or a window shorter than one sample interval: never a sampler that did not run.
        assert clocks and all(c["samples"] > 0 or c["reason"].startswith("no sample was taken") for c in clocks)
    assert children[0] == children[1]
