"""The ``gemm-benchmark`` directive: a question in, its answer (computed once) rendered and recorded.

The same class serves reStructuredText and MyST (``{gemm-benchmark}``). Every problem is a
warning at the directive's page and line (:mod:`.diagnostics`); a bad directive renders nothing
and the build goes on. Only the project's own errors are caught (options, configs, cache files,
measuring): anything else is a bug and fails the build loudly, so that tests see it.
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import make_id

from gemm_bench.question.devices import device_label
from gemm_benchmark import execution, questions_builder, records
from gemm_benchmark.config import settings
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.nodes import block_title, gemm_benchmark_block
from gemm_benchmark.options import (
    OPTIONS,
    OptionError,
    PermissiveOptionSpec,
    Request,
    known_devices,
    option_line,
    parse_options,
)
from gemm_benchmark.render_block import block_nodes, not_measured_admonition
from gemm_benchmark.values import device_values, gemm_names

logger = logging.getLogger(__name__)


def build_known_devices(env: BuildEnvironment) -> frozenset[str] | None:
    """The device names ``:devices:`` may use in this build (:func:`.options.known_devices`), for
    ``gemm-benchmark`` and ``gemm-benchmark-summary`` alike; None (no check) when only collecting
    questions for ``gemm-bench refresh``, which runs on GPUs this machine's cache may not know yet."""
    config = settings(env)
    if config.questions_only:
        return None
    local = execution.local_gpu()[0] if config.mode != "cache" else None
    return known_devices(config.cache_dir, local=local.name if local is not None else None)


class GemmBenchmarkDirective(SphinxDirective):
    """Render measured GEMM speedups for a model config, shapes or a size sweep."""

    reference_example = """\
.. gemm-benchmark::
   :name: layer
   :model: te-guide-5b
   :precisions: bf16, fp8-current, fp8-block
   :devices: h100

FP8 current scaling runs its autocast GEMMs at
:gemm-speedup:`layer autocast fp8-current`
the speed of BF16.
"""
    has_content = False
    required_arguments = 0
    optional_arguments = 0
    option_spec = PermissiveOptionSpec(OPTIONS)

    def warn(self, subtype: Subtype, message: str) -> None:
        warn(subtype, f"gemm-benchmark: {message}", location=(self.env.docname, self.lineno))

    def report_missing(self, request: Request, message: str, cache_dir: Path, gpu: str = "such a GPU") -> None:
        """A missing result: a warning saying what to do in the author's own project (measure it, or
        say the page expects it missing), or with ``:missing: note`` an info line (still located)."""
        if request.missing == "note":
            logger.info("gemm-benchmark: %s (:missing: note)", message, location=(self.env.docname, self.lineno))
        else:
            self.warn(Subtype.MISSING, f"{message}. To add it, {execution.how_to_measure(gpu, cache_dir)}; "
                      f"{execution.MISSING_NOTE_REMEDY}")

    def run(self) -> list[nodes.Node]:
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        config = settings(self.env)
        try:
            request = parse_options(self.options, srcdir=Path(self.env.srcdir), docdir=docdir,
                                    known_devices=build_known_devices(self.env))
        except OptionError as exc:
            if config.questions_only:
                questions_builder.note_problem(self, str(exc))
            for bad in exc.errors:  # every bad option, each at its own line
                warn(Subtype(bad.subtype), f"gemm-benchmark: {bad}",
                     location=(self.env.docname, option_line(self.block_text, self.lineno, bad.option)))
            name = self.options.get("name", "").strip()
            if name and not any(bad.option == "name" for bad in exc.errors):
                records.note_rejected_name(self.env, name, self.lineno)  # its clash is reported now
            return []
        if request.hf_config is not None:
            self.env.note_dependency(str(request.hf_config))
        if config.questions_only:
            questions_builder.note_asks(self, [request])
            return []
        answer = execution.answer(
            request.question, precisions=request.precisions, modes=request.modes, devices=request.devices,
            cache_dir=config.cache_dir, mode=config.mode, max_age_days=config.max_age_days,
            build_started=config.build_started, stale_when=config.stale_when, peers="peers" in request.show,
        )
        for path in answer.files:  # a fixed or replaced file re-reads the page
            self.env.note_dependency(str(path))
        records.watch(self.env, config.cache_dir, request.question.hash, answer)
        for error in answer.errors:
            self.warn(Subtype.CACHE, f"ignoring unusable cache file {error}")
        for problem in answer.problems:
            self.warn(Subtype.MEASURE, problem)
        for device in answer.devices:
            if device.status in (execution.Status.STALE, execution.Status.MISSING):
                self.warn(Subtype(device.status.value), f"result on {device.device} is {device.status.value}: "
                          f"{device.reason}")
        block = gemm_benchmark_block(classes=["gemm-benchmark"])
        block["gemm_name"] = request.name
        block["gemm_caption"] = request.caption
        if request.name:
            # An id, not a docutils name: which block of a name given twice owns it (its first in the
            # site's order) is known only once every page is read, so check_unique_names gives the
            # label to that block then. A name noted here would make Sphinx warn "duplicate label"
            # (untyped, at whichever page it read second) beside the extension's own error.
            block["ids"].append(make_id(self.env, self.state.document, "", request.name))
            self.state.document.set_id(block)
        self.set_source_info(block)
        if answer.unmatched:
            self.report_missing(request, f"no cached result for device(s) {', '.join(answer.unmatched)} "
                                f"(question {request.question.hash} in {config.cache_dir})", config.cache_dir,
                                f"a {' or '.join(answer.unmatched)} GPU")
        if answer.devices:
            block.extend(block_nodes(self.env, request, answer))
        else:
            if not answer.unmatched:  # one warning per directive
                self.report_missing(request, f"no result for question {request.question.hash} "
                                    f"({request.question.describe()}) on any device in {config.cache_dir}, "
                                    f"and it was not measured: {self._why_not_measured(config.mode)}",
                                    config.cache_dir)
            if request.caption:
                block += nodes.paragraph(request.caption, request.caption, classes=["gemm-caption"])
            block += not_measured_admonition(request, "", config.cache_dir, note=request.missing == "note")
        self._record(request, answer, config.cache_dir, block)
        return [block]

    def _why_not_measured(self, mode: str) -> str:
        if mode == "cache":
            return "execution mode is cache"
        gpu, reason = execution.local_gpu()
        if gpu is None:
            return reason
        return f"this machine's GPU ({gpu.name}) is not among the requested devices"

    def _record(self, request: Request, answer: execution.Answer, cache_dir: Path,
                block: gemm_benchmark_block) -> None:
        devices = tuple(
            records.DeviceRecord(
                name=d.device, slug=d.slug, path=str(d.path), date=d.result.provenance.date,
                method_version=d.result.method_version, status=d.status.value,
                reason=execution.lacking_reason(d.result, request.question, d.status.value, d.reason),
                values=device_values(d.reports, device_label(d.device), request.name,
                                     records.loss_parity_study(self.env, cache_dir, d.device,
                                                               location=(self.env.docname, self.lineno),
                                                               directive="gemm-benchmark")),
            )
            for d in answer.devices
        )
        names = gemm_names(answer.devices[0].reports[request.modes[0]]) if answer.devices else {}
        records.add_record(self.env, records.DirectiveRecord(
            docname=self.env.docname, lineno=self.lineno, name=request.name, kind=request.question.kind,
            question_hash=request.question.hash, describe=request.question.describe(),
            modes=tuple(request.modes), precisions=tuple(request.precisions), cache_dir=str(cache_dir),
            cache_files=records.cache_file_names(cache_dir, request.question.hash), status=answer.status.value,
            devices=devices, unmatched=tuple(answer.unmatched), devices_listed=bool(request.devices),
            gemm_names=names, node_id=block["ids"][0] if block["ids"] else "", title=block_title(block),
        ))


def check_unique_names(app: Sphinx, env: BuildEnvironment) -> None:
    """``env-check-consistency``: a ``:name:`` belongs to its first definition in the site's order
    (:func:`.records.document_order`: the toctree, then pages by name; lines within a page), and
    every later definition is an error at that definition, naming the first.

    The later one is rejected: its block is still shown, unnamed, roles naming it quote the first
    (as they did while only the first existed: adding a page never re-targets another page's
    roles) and ``:ref:`` links to the first. The first gets no warning, and nothing else warns
    about the clash (no "duplicate label" from Sphinx; no role warning on the later page that only
    repeats it: :func:`.records.rejected_duplicate`). A directive rejected for bad options that
    reuses a name is told so too, at its own line, now rather than on the build after its fix.
    """
    order = records.document_order(env)
    shown: dict[str, list[records.DirectiveRecord]] = {}
    for record in records.quotable_records(env):
        shown.setdefault(record.name.lower(), []).append(record)
    std = env.get_domain("std")
    for name, definitions in shown.items():
        first, *later = definitions
        for record in later:
            warn(Subtype.OPTION, f"gemm-benchmark: :name: {record.name!r} is already the name of the directive at "
                 f"{_place(env, first.docname, first.lineno)}, which comes first in the site's order (the "
                 "toctree): this one's name is rejected (it is shown unnamed, and roles naming it quote the "
                 "first); give it another name", location=(record.docname, record.lineno))
        if not first.node_id:
            continue  # a named summary: roles quote it, :ref: has no block to link to
        held = std.anonlabels.get(name)  # type: ignore[attr-defined]
        ours = {(r.docname, r.node_id) for r in definitions}
        if held is not None and tuple(held) not in ours:
            warn(Subtype.OPTION, f"gemm-benchmark: :name: {first.name!r} is also a label at "
                 f"{env.doc2path(held[0], False)} (a section or target): :ref:`{name}` links there; give one "
                 "of them another name", location=(first.docname, first.lineno))
            continue
        std.anonlabels[name] = (first.docname, first.node_id)  # type: ignore[attr-defined]
        std.labels[name] = (first.docname, first.node_id, first.title)  # type: ignore[attr-defined]
    rejected = sorted(((order.get(docname, len(order)), docname, lineno, name)
                       for docname, names in records.data(env).rejected_names.items() for name, lineno in names))
    for _, docname, lineno, name in rejected:
        others = [_place(env, r.docname, r.lineno) for r in shown.get(name.lower(), [])]
        others += [_place(env, d, n) for _, d, n, other in rejected
                   if other.lower() == name.lower() and (d, n) != (docname, lineno)]
        if others:
            warn(Subtype.OPTION, f"gemm-benchmark: :name: {name!r} is also the name of the directive at "
                 f"{', '.join(others)}; a name must be unique across the site (this directive's options are bad: "
                 "it is not shown)", location=(docname, lineno))


def _place(env: BuildEnvironment, docname: str, lineno: int) -> str:
    return f"{env.doc2path(docname, False)}:{lineno}"
