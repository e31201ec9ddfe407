"""Sphinx extension ``gemm_benchmark``: measured GEMM speedups in documentation pages.

Enable with ``extensions = ["gemm_benchmark"]`` (sphinx-tabs is set up with it).

Directives
    ``gemm-benchmark`` (options: :data:`.options.OPTIONS`), ``gemm-benchmark-freshness``, and the
    reference tables ``gemm-benchmark-options``, ``gemm-benchmark-roles``, ``gemm-benchmark-config``.
Roles
    ``gemm-speedup``, ``gemm-time``, ``gemm-tflops`` (:data:`.roles.ROLES`).
Configuration
    :data:`.config.CONFIG_VALUES`; environment variable ``GEMM_BENCH_EXECUTION_MODE``.
Warnings
    type ``gemm_benchmark``, subtypes listed in :mod:`.directive`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment

from gemm_bench.cache import Cache
from gemm_benchmark import envdata
from gemm_benchmark.config import CONFIG_VALUES, init_settings, settings
from gemm_benchmark.directive import GemmBenchmarkDirective
from gemm_benchmark.freshness import GemmBenchmarkFreshnessDirective, ResolveFreshness, log_summary
from gemm_benchmark.nodes import setup_nodes
from gemm_benchmark.reference import (
    GemmBenchmarkConfigDirective,
    GemmBenchmarkOptionsDirective,
    GemmBenchmarkRolesDirective,
)
from gemm_benchmark.render_block import figure_format
from gemm_benchmark.roles import ROLES, GemmValueRole, ResolveGemmValues

__version__ = "0.1.0"

STATIC_DIR = Path(__file__).parent / "static"


def outdated_pages(app: Sphinx, env: BuildEnvironment, added: set[str], changed: set[str],
                   removed: set[str]) -> list[str]:
    """``env-get-outdated``: pages to re-read because of a change Sphinx cannot see by itself.

    * a directive whose set of cache files changed (a new device measured, a file deleted): Sphinx
      tracks files a page used, not files that appeared since;
    * a directive that may need measuring now (execution mode changed, or ``force``);
    * every directive when the figure format changed (doctrees of an HTML build reused by LaTeX);
    * pages whose roles quote a name defined on a re-read page, and freshness-table pages, when
      any page with a directive is re-read (their values were computed from those records).
    """
    store = envdata.data(env)
    mode = settings(app).mode
    previous_mode, store["execution_mode"] = store["execution_mode"], mode
    fmt = figure_format_of(app)
    previous_format, store["figure_format"] = store.get("figure_format", fmt), fmt
    extra: set[str] = set()
    for docname, records in store["records"].items():
        if docname in removed:
            continue
        if mode == "force" or (previous_mode is not None and previous_mode != mode) or previous_format != fmt:
            extra.add(docname)
            continue
        for record in records:
            files = [p.name for p in Cache(record["cache_dir"]).files(record["question_hash"])]
            if files != record["cache_files"]:
                extra.add(docname)
    rereading = added | changed | removed | extra
    touched_names = {r["name"].lower() for r in envdata.records_of(env, rereading) if r["name"]}
    if rereading & set(store["records"]) or added or removed:
        extra |= store["freshness"]
        for docname, names in store["role_uses"].items():
            if names & touched_names or added or removed:
                extra.add(docname)
    return sorted(extra - removed - changed - added)


def figure_format_of(app: Sphinx) -> str | None:
    return figure_format(app.env)


def setup(app: Sphinx) -> dict[str, Any]:
    app.setup_extension("sphinx_tabs.tabs")
    for value in CONFIG_VALUES:
        app.add_config_value(value.name, value.default, value.rebuild, types=value.types)
    setup_nodes(app)
    app.add_directive("gemm-benchmark", GemmBenchmarkDirective)
    app.add_directive("gemm-benchmark-freshness", GemmBenchmarkFreshnessDirective)
    app.add_directive("gemm-benchmark-options", GemmBenchmarkOptionsDirective)
    app.add_directive("gemm-benchmark-roles", GemmBenchmarkRolesDirective)
    app.add_directive("gemm-benchmark-config", GemmBenchmarkConfigDirective)
    for name in ROLES:
        app.add_role(name, GemmValueRole())
    app.add_post_transform(ResolveGemmValues)
    app.add_post_transform(ResolveFreshness)
    app.connect("builder-inited", init_settings)
    app.connect("config-inited", _add_static)
    app.connect("env-get-outdated", outdated_pages)
    app.connect("env-purge-doc", envdata.purge_doc)
    app.connect("env-merge-info", envdata.merge_info)
    app.connect("build-finished", log_summary)
    return {"version": __version__, "parallel_read_safe": True, "parallel_write_safe": True, "env_version": 1}


def _add_static(app: Sphinx, config: Any) -> None:
    """At config-inited, so that the pickled and the fresh configuration agree on the static path."""
    if str(STATIC_DIR) not in config.html_static_path:
        config.html_static_path.append(str(STATIC_DIR))
    app.add_css_file("gemm_benchmark.css")
