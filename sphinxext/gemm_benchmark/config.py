"""The extension's ``conf.py`` values, declared once (setup registers them, docs render them).

Also the per-build settings derived from them: the execution mode in effect (the environment
variable overrides ``conf.py``), the cache directory as a path, and when this build started (a
``force`` build measures each question once, not once per directive).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from sphinx.application import Sphinx
from sphinx.config import Config
from sphinx.environment import BuildEnvironment
from sphinx.errors import ConfigError

from gemm_bench.question.comm import INTER_NODE_DEFAULT, Link
from gemm_bench.question.layout_step import GPUS_PER_NODE_DEFAULT, Network
from gemm_bench.results.stack import DEFAULT_STALE_WHEN, STACK_FIELDS, StackError, validate_fields
from gemm_benchmark import execution
from gemm_benchmark.diagnostics import Subtype, warn
from gemm_benchmark.questions_builder import BUILDER_NAME as QUESTIONS_BUILDER


def _check_mode(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"must be a string, one of {', '.join(execution.EXECUTION_MODES)}"
    return None  # an unknown word is a warning at builder-inited (the build stays cache-only)


def _check_cache_dir(value: Any) -> str | None:
    if not isinstance(value, (str, os.PathLike)) or not str(os.fspath(value)).strip():
        return "must be a directory path (a non-empty string, relative to the directory of conf.py)"
    return None


def _check_stale_when(value: Any) -> str | None:
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        return "must be a list of field names (strings): " + ", ".join(STACK_FIELDS)
    try:
        validate_fields(list(value), source="gemm_benchmark_stale_when")
    except StackError as exc:
        return str(exc)
    return None


def _check_max_age(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or math.isinf(value):
        hint = " (a number, not a string)" if isinstance(value, str) else ""
        return f"must be a positive number of days{hint}, or None"
    return None


def _check_positive(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        return "must be a positive number" + (" (a number, not a string)" if isinstance(value, str) else "")
    return None


def _check_non_negative(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return "must be a number >= 0" + (" (a number, not a string)" if isinstance(value, str) else "")
    return None


def _check_whole(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return "must be a whole number >= 1"
    return None


@dataclasses.dataclass(frozen=True)
class ConfigValue:
    name: str
    default: Any
    description: str
    #: Sphinx's rebuild scope: "env" re-reads every page when the value changes.
    rebuild: Literal["", "env", "html"] = "env"
    types: tuple[type, ...] = ()
    #: What is wrong with a value (None: nothing), checked at ``config-inited`` (:func:`validate_config`).
    check: Callable[[Any], str | None] = lambda value: None


CONFIG_VALUES: tuple[ConfigValue, ...] = (
    ConfigValue(
        "gemm_benchmark_execution_mode", "auto",
        "When to measure: ``cache`` never measures; ``auto`` measures this machine's GPU result when the "
        "cache lacks it or holds a stale one (needs a CUDA GPU and Transformer Engine); ``force`` re-measures "
        f"every question once per build. The environment variable ``{execution.ENV_VAR}`` overrides it.",
        types=(str,), check=_check_mode,
    ),
    ConfigValue(
        "gemm_benchmark_cache_dir", "_gemm_cache",
        "The result cache: a directory of JSON result files, relative to the directory of ``conf.py``. "
        "Commit it: a build without a GPU renders from it.",
        types=(str,), check=_check_cache_dir,
    ),
    ConfigValue(
        "gemm_benchmark_stale_when", list(DEFAULT_STALE_WHEN),
        "In ``auto`` mode on a GPU box, a result of this GPU is stale when any of these differ between the box "
        "and the result's provenance: " + ", ".join(f"``{f}``" for f in STACK_FIELDS) + ". Upgrading "
        "Transformer Engine on a GPU runner then refreshes the guide.",
        types=(list, tuple), check=_check_stale_when,
    ),
    ConfigValue(
        "gemm_benchmark_max_age_days", None,
        "Results older than this many days are stale (re-measured where a GPU is present, flagged in the "
        "freshness table otherwise). ``None``: results never age.",
        types=(int, float, type(None)), check=_check_max_age,
    ),
    ConfigValue(
        "gemm_benchmark_inter_node_gb_s", INTER_NODE_DEFAULT.bandwidth_gb_s,
        "The link between nodes, **assumed** (no box measures a network): the bus bandwidth a ring reaches "
        "per GPU, each way, in GB/s. The default is one 400 Gb/s InfiniBand NDR adapter per GPU, as in DGX "
        "H100/H200. Every collective of a layout that leaves a node is costed over it and labelled assumed; "
        "``gemm-bench layout-step --inter-node-gb-s`` is the same value on the command line.",
        types=(int, float), check=_check_positive,
    ),
    ConfigValue(
        "gemm_benchmark_inter_node_latency_us", INTER_NODE_DEFAULT.latency_us,
        "The assumed time of one ring step between nodes on top of its bytes, in microseconds "
        "(``gemm-bench layout-step --inter-node-latency-us``).",
        types=(int, float), check=_check_non_negative,
    ),
    ConfigValue(
        "gemm_benchmark_gpus_per_node", GPUS_PER_NODE_DEFAULT,
        "GPUs of one node, **assumed** (DGX H100/H200: 8): a collective group within a node is costed from the "
        "box's measurements, one across nodes over the inter-node link (``gemm-bench layout-step "
        "--gpus-per-node``).",
        types=(int,), check=_check_whole,
    ),
)


def network_from(config: Config) -> Network:
    """The assumed network of the conf values above (validated at ``config-inited``)."""
    link = Link("conf.py gemm_benchmark_inter_node_gb_s", float(config.gemm_benchmark_inter_node_gb_s),
                float(config.gemm_benchmark_inter_node_latency_us))
    return Network(int(config.gemm_benchmark_gpus_per_node), link)


def validate_config(app: Sphinx, config: Config) -> None:
    """``config-inited``: every ``gemm_benchmark_*`` value checked, a :class:`ConfigError` naming
    ``conf.py``, the value and what it must be (not a TypeError later in ``builder-inited``)."""
    conf_py = Path(app.confdir, "conf.py")
    for value in CONFIG_VALUES:
        given = config[value.name]
        problem = value.check(given)
        if problem:
            raise ConfigError(f"{conf_py}: {value.name} = {given!r}: {problem}")
    resolve_cache_dir(app, config)



@dataclasses.dataclass(frozen=True)
class Settings:
    """This build's validated settings (one per environment, made at ``builder-inited``)."""

    mode: str
    cache_dir: Path
    max_age_days: float | None
    build_started: float
    stale_when: tuple[str, ...] = DEFAULT_STALE_WHEN
    #: The ``gemm-questions`` builder reads: directives record what they ask and render nothing.
    questions_only: bool = False
    #: Where collectives run beyond the measuring box (assumed: conf values above).
    network: Network = dataclasses.field(default_factory=Network)


_ATTR = "gemm_benchmark_settings"


#: The environment attribute holding the content keys of result files validated in earlier builds.
_TRUSTED_ATTR = "gemm_benchmark_trusted_results"


def init_settings(app: Sphinx) -> None:
    """Resolve the settings at ``builder-inited`` (a bad mode is a warning; the build stays cache-only)."""
    try:
        mode = execution.execution_mode(app.config.gemm_benchmark_execution_mode)
    except execution.ExecutionModeError as exc:
        warn(Subtype.CONFIG, f"{exc}; measuring nothing (cache mode)", location=None)
        mode = "cache"
    validate_config(app, app.config)  # already done at config-inited; a builder may be made without it
    max_age = app.config.gemm_benchmark_max_age_days
    stale_when = validate_fields(list(app.config.gemm_benchmark_stale_when), source="gemm_benchmark_stale_when")
    setattr(app.env, _ATTR, Settings(mode, resolve_cache_dir(app), max_age, time.time(), stale_when,
                                     questions_only=app.builder.name == QUESTIONS_BUILDER,
                                     network=network_from(app.config)))
    execution.reset_detection()
    # Validations remembered across builds travel with the environment (pickled with it).
    trusted = getattr(app.env, _TRUSTED_ATTR, None)
    if not isinstance(trusted, set):
        trusted = set()
        setattr(app.env, _TRUSTED_ATTR, trusted)
    execution.READS.trusted = trusted


def resolve_cache_dir(app: Sphinx, config: Config | None = None) -> Path:
    """The cache directory, refused (a configuration error) when it lies outside the project.

    A build reads every file there and, on a GPU machine, writes into it: ``"../../etc"`` must not
    make a documentation build read or write outside the documentation's own tree (the source
    directory, or the directory of ``conf.py`` where that is elsewhere).
    """
    value = (config or app.config).gemm_benchmark_cache_dir
    cache_dir = Path(app.confdir, value).resolve()
    roots = {Path(app.srcdir).resolve(), Path(app.confdir).resolve()}
    if not any(cache_dir == root or root in cache_dir.parents for root in roots):
        raise ConfigError(f"{Path(app.confdir, 'conf.py')}: gemm_benchmark_cache_dir = {value!r} resolves to "
                          f"{cache_dir}, outside the "
                          f"documentation source directory {Path(app.srcdir).resolve()}; the result cache "
                          "must lie inside it (e.g. '_gemm_cache')")
    return cache_dir


def settings(env: BuildEnvironment) -> Settings:
    """The settings of the build that owns ``env``."""
    found = getattr(env, _ATTR, None)
    if not isinstance(found, Settings):
        raise RuntimeError("gemm_benchmark settings are made at builder-inited; the extension is not set up")
    return found
