"""Sphinx extension ``gemm_benchmark``: measured GEMM speedups in documentation pages.

Enable with ``extensions = ["gemm_benchmark"]`` (sphinx-tabs is set up with it).

Directives
    ``gemm-benchmark`` (options: :data:`.options.OPTIONS`), ``gemm-benchmark-summary``,
    ``gemm-benchmark-freshness``, ``gemm-answers-table``, and the reference tables ``gemm-benchmark-directives``,
    ``gemm-benchmark-options``, ``gemm-benchmark-roles``, ``gemm-benchmark-config``,
    ``gemm-benchmark-warnings``, ``gemm-benchmark-presets``. Every directive registered in
    :func:`setup` appears in ``gemm-benchmark-directives`` (:mod:`.reference`): its class needs a
    docstring and a ``reference_example`` string.
Roles
    ``gemm-speedup``, ``gemm-time``, ``gemm-tflops`` (:data:`.roles.ROLES`).
Configuration
    :data:`.config.CONFIG_VALUES`; environment variable ``GEMM_BENCH_EXECUTION_MODE``.
Builder
    ``gemm-questions`` (:mod:`.questions_builder`): the questions the pages ask, as JSON, for
    ``gemm-bench refresh``.
Warnings
    type ``gemm_benchmark``, subtypes :class:`.diagnostics.Subtype`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sphinx.application import Sphinx

from gemm_benchmark.answers_table import setup_answers_table
from gemm_benchmark.buildlog import setup_buildlog
from gemm_benchmark.config import CONFIG_VALUES, init_settings, validate_config
from gemm_benchmark.directive import GemmBenchmarkDirective, check_unique_names
from gemm_benchmark.flag_literals import setup_flag_literals
from gemm_benchmark.freshness import GemmBenchmarkFreshnessDirective, ResolveFreshness, log_summary
from gemm_benchmark.layout_memory import setup_layout_memory
from gemm_benchmark.layout_step import setup_layout_step
from gemm_benchmark.moe_words import setup_moe_words
from gemm_benchmark.nodes import setup_nodes
from gemm_benchmark.questions_builder import setup_questions
from gemm_benchmark.records import GemmBenchmarkCollector
from gemm_benchmark.reference import (
    GemmBenchmarkConfigDirective,
    GemmBenchmarkDirectivesDirective,
    GemmBenchmarkOptionsDirective,
    GemmBenchmarkPresetsDirective,
    GemmBenchmarkRolesDirective,
    GemmBenchmarkWarningsDirective,
    recording_registrations,
)
from gemm_benchmark.render_block import setup_figures
from gemm_benchmark.render_table import setup_tables
from gemm_benchmark.roles import setup_roles
from gemm_benchmark.study_dynamic_range import GemmDynamicRangeDirective
from gemm_benchmark.study_loss_parity import GemmLossParityDirective
from gemm_benchmark.study_tp_comm import setup_tp_comm
from gemm_benchmark.summary import GemmBenchmarkSummaryDirective
from gemm_benchmark.tabs import setup_tabs

__version__ = "0.2.0"

STATIC_DIR = Path(__file__).parent / "static"


def setup(app: Sphinx) -> dict[str, Any]:
    """Register the extension, recording what it registers for the authoring reference."""
    with recording_registrations(app):
        return _register(app)


def _register(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx_tabs.tabs")
    for value in CONFIG_VALUES:
        app.add_config_value(value.name, value.default, value.rebuild, types=value.types)
    setup_nodes(app)
    setup_tabs(app)
    setup_roles(app)
    setup_moe_words(app)  # after setup_roles: its role replaces the generic one registered there
    setup_figures(app)
    setup_tables(app)
    setup_questions(app)
    setup_buildlog(app)
    setup_layout_memory(app)
    setup_layout_step(app)
    setup_tp_comm(app)
    setup_answers_table(app)
    setup_flag_literals(app)
    app.add_directive("gemm-benchmark", GemmBenchmarkDirective)
    app.add_directive("gemm-benchmark-freshness", GemmBenchmarkFreshnessDirective)
    app.add_directive("gemm-benchmark-summary", GemmBenchmarkSummaryDirective)
    app.add_directive("gemm-loss-parity", GemmLossParityDirective)
    app.add_directive("gemm-benchmark-directives", GemmBenchmarkDirectivesDirective)
    app.add_directive("gemm-benchmark-options", GemmBenchmarkOptionsDirective)
    app.add_directive("gemm-benchmark-roles", GemmBenchmarkRolesDirective)
    app.add_directive("gemm-benchmark-config", GemmBenchmarkConfigDirective)
    app.add_directive("gemm-benchmark-warnings", GemmBenchmarkWarningsDirective)
    app.add_directive("gemm-benchmark-presets", GemmBenchmarkPresetsDirective)
    app.add_directive("gemm-dynamic-range", GemmDynamicRangeDirective)
    app.add_post_transform(ResolveFreshness)
    app.add_env_collector(GemmBenchmarkCollector)
    app.connect("builder-inited", init_settings)
    app.connect("config-inited", validate_config, priority=400)
    app.connect("config-inited", _add_static)
    app.connect("build-finished", log_summary)
    app.connect("env-check-consistency", check_unique_names)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 8}


def _add_static(app: Sphinx, config: Any) -> None:
    """At config-inited, so that the pickled and the fresh configuration agree on the static path."""
    if str(STATIC_DIR) not in config.html_static_path:
        config.html_static_path.append(str(STATIC_DIR))
    app.add_css_file("gemm_benchmark.css")
    app.add_js_file("gemm_benchmark.js", loading_method="defer")
