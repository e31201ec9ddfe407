"""The ``gemm-benchmark`` directive: a question in, measured (or cached) answers rendered.

The same class serves reStructuredText and MyST (``{gemm-benchmark}``): MyST calls directives
through the docutils interface. Every problem is a Sphinx warning at the directive's page and
line, with type ``gemm_benchmark`` and a subtype (``option``, ``config``, ``path``, ``precisions``,
``modes``, ``cache``, ``missing``, ``stale``, ``measure``, ``error``) so a project can silence one
kind with ``suppress_warnings``; ``-W`` turns them into a failed build. A bad directive renders
nothing and the build goes on.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from gemm_benchmark import envdata, execution
from gemm_benchmark.config import settings
from gemm_benchmark.nodes import gemm_benchmark_block
from gemm_benchmark.options import OPTIONS, OptionError, PermissiveOptionSpec, Request, parse_options
from gemm_benchmark.render_block import app_of, block_nodes, not_measured_admonition

logger = logging.getLogger(__name__)

WARNING_TYPE = "gemm_benchmark"


class GemmBenchmarkDirective(SphinxDirective):
    """Render measured GEMM speedups for a model config, shapes or a size sweep."""

    has_content = False
    required_arguments = 0
    optional_arguments = 0
    option_spec = PermissiveOptionSpec(OPTIONS)

    def warn(self, subtype: str, message: str) -> None:
        logger.warning("gemm-benchmark: %s", message, location=(self.env.docname, self.lineno),
                       type=WARNING_TYPE, subtype=subtype)

    def report_missing(self, request: Request, message: str) -> None:
        """A missing result: a warning, or with ``:missing: note`` an info line (still located)."""
        if request.missing == "note":
            logger.info("gemm-benchmark: %s (:missing: note)", message, location=(self.env.docname, self.lineno))
        else:
            self.warn("missing", message)

    def run(self) -> list[nodes.Node]:
        try:
            return self._run()
        except Exception as exc:  # never let one directive take the build down
            last = traceback.extract_tb(exc.__traceback__)[-1]
            self.warn("error", f"internal error {type(exc).__name__}: {exc} "
                      f"(at {Path(last.filename).name}:{last.lineno}); the result is not shown")
            return []

    def _run(self) -> list[nodes.Node]:
        docdir = Path(self.env.doc2path(self.env.docname)).parent
        try:
            request = parse_options(self.options, srcdir=Path(self.env.srcdir), docdir=docdir)
        except OptionError as exc:
            self.warn(exc.subtype, str(exc))
            return []
        if request.hf_config is not None:
            self.env.note_dependency(str(request.hf_config))
        config = settings(app_of(self.env))
        answer = execution.answer(
            request.question, precisions=request.precisions, modes=request.modes, devices=request.devices,
            cache_dir=config.cache_dir, mode=config.mode, max_age_days=config.max_age_days,
            build_started=config.build_started,
        )
        for error in answer.errors:
            self.warn("cache", f"ignoring unusable cache file {error}")
            self.env.note_dependency(str(error.path))
        for subtype, message in answer.problems:
            self.warn(subtype, message)
        for device in answer.devices:
            self.env.note_dependency(str(device.path))
            if device.status in ("stale", "missing"):
                self.warn(device.status, f"result on {device.device} is {device.status}: {device.reason}")
        block = gemm_benchmark_block(classes=["gemm-benchmark"])
        block["gemm_name"] = request.name
        block["gemm_caption"] = request.caption
        if request.name:
            block["names"].append(nodes.fully_normalize_name(request.name))
            self.state.document.note_explicit_target(block, block)
        self.set_source_info(block)
        if answer.unmatched:
            self.report_missing(request, f"no cached result for device(s) {', '.join(answer.unmatched)} "
                      f"(question {request.question.hash} in {config.cache_dir})")
        if answer.devices:
            block.extend(block_nodes(self.env, request, answer))
        else:
            why = self._why_not_measured(config.mode)
            self.report_missing(request, f"no result for question {request.question.hash} "
                                f"({request.question.describe()}) on any device in {config.cache_dir}, "
                                f"and it was not measured: {why}")
            block += not_measured_admonition(request, why, config.cache_dir, note=request.missing == "note")
        self._record(request, answer, config.cache_dir)
        return [block]

    def _why_not_measured(self, mode: str) -> str:
        if mode == "cache":
            return "execution mode is cache"
        gpu, reason = execution.local_gpu()
        if gpu is None:
            return reason
        return f"this machine's GPU ({gpu.name}) is not among the requested devices"

    def _record(self, request: Request, answer: execution.Answer, cache_dir: Path) -> None:
        from gemm_bench.cache import Cache

        envdata.add_record(self.env, {
            "docname": self.env.docname,
            "lineno": self.lineno,
            "name": request.name,
            "kind": request.question.kind,
            "question_hash": request.question.hash,
            "describe": request.question.describe(),
            "modes": list(request.modes),
            "precisions": list(request.precisions),
            "cache_dir": str(cache_dir),
            "cache_files": [p.name for p in Cache(cache_dir).files(request.question.hash)],
            "status": answer.status,
            "devices": [
                {
                    "name": d.device,
                    "slug": d.slug,
                    "path": str(d.path),
                    "date": d.doc["provenance"]["date"],
                    "method_version": d.doc["method_version"],
                    "status": d.status,
                    "reason": d.reason,
                }
                for d in answer.devices
            ],
            "unmatched": list(answer.unmatched),
        })
