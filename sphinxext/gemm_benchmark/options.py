"""The ``gemm-benchmark`` directive's options, in one table, and their parsing into a request.

:data:`OPTIONS` is the single source of truth: the directive's ``option_spec`` is built from it,
the parser validates against it, and the ``gemm-benchmark-options`` directive renders the
authoring reference from it, so documentation and behaviour cannot drift apart. Model options
are Megatron-LM's argument names, exactly as the ``gemm-bench`` CLI spells them (``--hidden-size``
there, ``:hidden-size:`` here), and they go through the same :func:`gemm_bench.question.question.build_question`,
so the directive accepts and rejects exactly what the CLI does.

The directive accepts *any* option name at the docutils level (see :class:`PermissiveOptionSpec`)
and validates here instead: docutils' own "unknown option" error is a fatal parse error without a
type/subtype, which ``suppress_warnings`` cannot silence and which does not say which options exist.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from gemm_bench.question import choices
from gemm_bench.question.config import BOOL_FIELDS, FIELD_HELP, INT_FIELDS, PRESET_DESCRIPTIONS, ConfigError
from gemm_bench.question.devices import ALIASES, device_slug, normalize_selector
from gemm_bench.question.layout import LAYOUT_OPTIONS, LayoutOption, parse_layout_value
from gemm_bench.question.precisions import (
    MODE_ALIASES,
    MODE_NAMES,
    MODES,
    PRECISION_IDS,
    PRECISIONS,
    normalize_mode,
    normalize_precision,
)
from gemm_bench.question.question import Question, build_question
from gemm_bench.results.cache import Cache, CacheError

SHOW_PARTS: tuple[str, ...] = ("figure", "table", "totals", "peers", "provenance",
                                "latency", "tflops", "roofline", "accuracy")

#: What ``:show:`` renders when not given: the optional figures (time, TFLOP/s against the
#: device's peaks, roofline against measured, speed against accuracy) are asked for by name, and so
#: are the peers (issue 34: a question's peers are measured only where some page shows them, and
#: their first calls, torchao's compilation above all, were most of an author's wait).
DEFAULT_SHOW: tuple[str, ...] = ("figure", "table", "totals", "provenance")


@dataclasses.dataclass(frozen=True)
class Option:
    """One directive option as authors see it."""

    name: str
    description: str
    default: str
    example: str
    group: str
    #: The config field this option sets (Megatron argument name), or None.
    field: str | None = None
    flag: bool = False
    #: The layout field this option sets (:data:`gemm_bench.question.layout.LAYOUT_OPTIONS`), or None.
    layout_field: str | None = None


def layout_option(option: LayoutOption) -> Option:
    """A layout option as every directive spells it (``:pp:``), from the one layout table."""
    text = option.help[:1].upper() + option.help[1:] + "."
    if option.choices:
        text += " One of " + ", ".join(f"``{c}``" for c in option.choices) + "."
    if option.kind == "bool":
        text += " A flag; ``true``/``false`` also accepted."
    return Option(option.name, text, option.default, option.example, "layout", layout_field=option.field,
                  flag=option.kind == "bool")


#: Every layout option, keyed by its spelling: ``gemm-benchmark``, ``gemm-benchmark-summary`` and
#: ``gemm-layout-memory`` take them all.
LAYOUT_DIRECTIVE_OPTIONS: dict[str, Option] = {o.name: layout_option(o) for o in LAYOUT_OPTIONS}
#: What the directive reference says of them where a directive other than ``gemm-benchmark`` takes
#: them (once, at the first: the table of directive options has each one's meaning).
LAYOUT_REFERENCE: dict[str, str] = {
    LAYOUT_OPTIONS[0].name: "and every other layout option (" + ", ".join(f"``:{o.name}:``" for o in LAYOUT_OPTIONS[1:])
    + "): the run's layout, as ``gemm-benchmark`` takes it, for every model shown (over each preset's published "
    "layout)",
}


def _field_option(field: str) -> Option:
    name = field.replace("_", "-")
    if field in BOOL_FIELDS:
        text = FIELD_HELP[field]
        description = text[:1].upper() + text[1:] + "."
        return Option(name, description + " A flag; ``true``/``false`` also accepted.", "false", "",
                      "model", field=field, flag=True)
    help_text = FIELD_HELP.get(field, field.replace("_", " "))
    examples = {
        "hidden_size": "4096", "ffn_hidden_size": "16384", "num_attention_heads": "32",
        "num_query_groups": "8", "kv_channels": "128", "num_layers": "24", "micro_batch_size": "1",
        "seq_length": "4096", "tensor_model_parallel_size": "2", "num_experts": "8",
        "moe_router_topk": "2", "moe_ffn_hidden_size": "14336", "expert_model_parallel_size": "2",
    }
    defaults = {
        "num_layers": "1 (or the preset's)", "micro_batch_size": "1 (or the preset's)",
        "seq_length": "4096 (or the preset's)", "tensor_model_parallel_size": "1",
        "moe_router_topk": "2", "expert_model_parallel_size": "1",
        "num_microbatches": "8", "make_vocab_size_divisible_by": "128",
    }
    return Option(name, help_text[:1].upper() + help_text[1:] + ".", defaults.get(field, "(preset's / derived)"),
                  examples.get(field, "1"), "model", field=field)


def mode_spellings(modes: Sequence[str]) -> str:
    """Every other spelling the parser accepts for ``modes``, as a sentence for the authoring reference:
    generated from :data:`~gemm_bench.question.precisions.MODE_ALIASES`, the table
    :func:`~gemm_bench.question.precisions.normalize_mode` reads, so an accepted spelling
    (``:modes: prequantized``) is never an undocumented one."""
    parts = []
    for mode in modes:
        aliases = [alias for alias, target in MODE_ALIASES.items() if target == mode]
        if aliases:
            parts.append(", ".join(f"``{a}``" for a in aliases) + f" for ``{mode}``")
    return f"Any case is accepted, and these other spellings: {'; '.join(parts)}." if parts else "Any case is accepted."


def _build_options() -> dict[str, Option]:
    presets = ", ".join(f"``{name}``" for name in PRESET_DESCRIPTIONS)
    precisions = ", ".join(f"``{p}``" for p in PRECISION_IDS)
    items = [
        Option("name", "A label for this result: roles quote it (``:gemm-speedup:`NAME MODE PRECISION```) and "
               "``:ref:`` links to it. Unique across the site.", "(none)", "te-5b-h100", "presentation"),
        Option("caption", "A caption shown above the result (also the title of ``:ref:`` links).", "(none)",
               "TE guide layer on H100", "presentation"),
        Option("model", f"A model preset: {presets}. Model options below override its fields.", "(none)",
               "te-guide-5b", "question"),
        Option("hf-config", "A Hugging Face ``config.json``, relative to the page (or ``/``-rooted at the "
               "source directory); it must lie inside the source tree.", "(none)", "llama-config.json", "question"),
        Option("shapes", "Manual mode: GEMM shapes ``MxKxN``, comma or space separated.", "(none)",
               "8192x4096x4096, 8192x4096x14336", "question"),
        Option("sweep", "Square sizes ``S`` (GEMMs ``SxSxS``), comma or space separated: speedup vs size.",
               "(none)", "1024, 2048, 4096, 8192", "question"),
        *(_field_option(f) for f in (*INT_FIELDS, *sorted(BOOL_FIELDS))),
        *LAYOUT_DIRECTIVE_OPTIONS.values(),
        Option("precisions", f"Precisions to show, comma separated: {precisions}. BF16, the baseline of every "
               "speedup, is always shown. Any case, and ``_`` for ``-``, is accepted (``FP8_Current``).", "all",
               "bf16, fp8-current, fp8-block", "selection"),
        Option("modes", "Modes to show, as tabs: " + ", ".join(f"``{m}`` ({MODE_NAMES[m]})" for m in MODES) + ". "
               + mode_spellings(MODES), "autocast, prequant", "autocast", "selection"),
        Option("devices", "Cached devices to show, in this order (device tabs when more than one): each an exact "
               "device slug (the end of the cache file name, ``h100-80gb-hbm3``) or an alias ("
               + ", ".join(f"``{a}``" for a in ALIASES) + "). A GPU box in ``auto`` mode measures a directive only "
               "when this list names its GPU, or when the directive lists none. A role without ``@DEVICE`` quotes "
               "the only device shown; where several are, it is a warning naming the spellings to use "
               "(``NAME@h100``), and shows the first listed here meanwhile.", "every cached device", "h100, h200",
               "selection"),
        Option("missing", "What a result that no requested device has yet does: ``warn`` (a Sphinx warning, so "
               "``-W`` fails) or ``note`` (the visible note only: for hardware not measured yet on purpose).",
               "warn", "note", "presentation"),
        Option("show", "Parts to render: " + ", ".join(f"``{s}``" for s in SHOW_PARTS) + ". ``latency``, "
               "``tflops`` (with the device's dense peaks), ``roofline`` (roofline-predicted over measured time) and "
               "``accuracy`` (speedup against SQNR, when the result has SQNRs) are extra figures, shown only when "
               "named. ``peers`` (other GEMM implementations timed beside Transformer Engine) is shown only when "
               "named too, and a question's peers are measured only where some page names them: a page that "
               "starts to show them measures the peers alone and adds them to the cached result.",
               ", ".join(DEFAULT_SHOW), "table, totals, peers", "presentation"),
    ]
    return {o.name: o for o in items}


#: Every option of the ``gemm-benchmark`` directive, keyed by its spelling (``hidden-size``).
OPTIONS: dict[str, Option] = _build_options()


#: Where an author finds every option: the generated tables of the authoring reference, which ship
#: with the extension's distribution (its own project's pages need not have them).
REFERENCE = "the authoring reference of gemm-guide (docs/authoring.rst, \"Directive options\")"


def unknown_option_text(unknown: str, known: Collection[str], directive: str) -> str:
    """What an unknown option is told: the closest option (a typo's fix) and where every option is
    listed; never the whole list (36 names on one 900-character line, the fix not among the first)."""
    near = choices.closest(unknown, list(known))
    hint = f"; did you mean {choices.either([f':{n}:' for n in near])}?" if near else ", nor close to one."
    return f"is not an option of {directive}{hint} Every option is in {REFERENCE}"


def option_spelling(field: str) -> str:
    """How a config field is spelled in a directive: ``hidden_size`` -> ``:hidden-size:``."""
    return ":" + field.replace("_", "-") + ":"


class PermissiveOptionSpec(dict):
    """An ``option_spec`` that lets every option through to :func:`parse_options`.

    docutils and MyST both look converters up with ``option_spec[name]``; answering every name
    means unknown options reach our validation, which warns with page, line, option name and the
    closest known option, under ``suppress_warnings``-able type ``gemm_benchmark.option``.
    """

    def __init__(self, known: Mapping[str, Option]) -> None:
        super().__init__({name: _keep_text for name in known})

    def __missing__(self, key: str) -> Callable[[str | None], str]:
        return _keep_text

    def __contains__(self, key: object) -> bool:
        return True


def option_line(block_text: str, lineno: int, option: str) -> int:
    """The line of ``option`` in a directive that starts at ``lineno`` with ``block_text``: where an
    author looks to fix it. rST and MyST both start ``block_text`` at the directive's first line;
    an option is ``:name: value`` in both (or ``name: value`` in MyST's YAML block). The
    directive's own line when the option is not found (one given by a summary for each model).
    """
    pattern = re.compile(rf"\s*:?{re.escape(option)}:(\s|$)")
    for offset, line in enumerate(block_text.splitlines()):
        if offset and pattern.match(line):
            return lineno + offset
    return lineno


def _keep_text(value: str | None) -> str:
    return "" if value is None else str(value)


class OptionError(ValueError):
    """Bad directive input; ``option`` is the option at fault (its spelling without colons).

    :func:`parse_options` raises the first of a directive's bad options; ``errors`` holds every one
    of them (this one first), so that the directive warns about each at its own line.
    """

    def __init__(self, option: str, message: str, subtype: str = "option") -> None:
        self.option = option
        self.message = message
        self.subtype = subtype
        self.errors: tuple[OptionError, ...] = (self,)
        super().__init__(f":{option}: {message}")


_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True)
class Request:
    """What one directive asks for, validated: the question and how to show its answer."""

    question: Question
    precisions: tuple[str, ...]
    modes: tuple[str, ...]
    devices: tuple[str, ...]
    show: tuple[str, ...]
    name: str
    caption: str
    #: The Hugging Face config file read, to note as a page dependency.
    hf_config: Path | None = None
    #: "warn" or "note": how a result missing for a requested device is reported.
    missing: str = "warn"


split_list = choices.split_list


def _parse_bool(option: str, text: str) -> bool:
    value = text.strip().lower()
    if value in ("", "true", "yes", "on", "1"):
        return True
    if value in ("false", "no", "off", "0"):
        return False
    raise OptionError(option, f"is a flag; give no value, or true/false (got {text!r})")


def _parse_int(option: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise OptionError(option, f"{text.strip()!r} is not a whole number") from None


def _parse_choices(option: str, text: str, normalize: Callable[[str], str], known: tuple[str, ...]) -> tuple[str, ...]:
    try:
        return choices.parse_choices(text, normalize, known)
    except choices.ChoiceError as exc:
        subtype = option if option in ("precisions", "modes") and not exc.empty else "option"
        raise OptionError(option, str(exc), subtype=subtype) from None


def _parse_devices(text: str, known: Collection[str] | None = None) -> tuple[str, ...]:
    """Device selectors, each an exact slug or an alias (:mod:`gemm_bench.question.devices`), normalized to slugs.

    With ``known`` (:func:`known_devices`), a selector naming none of them is refused by name, with
    the names there are: ``h10`` is a typo, and reporting it as "no cached result" sent authors to
    measure a GPU that does not exist.
    """
    items = split_list(text)
    if not items:
        raise OptionError("devices", "needs at least one device (a slug like h100-80gb-hbm3, or an alias: "
                          + ", ".join(ALIASES) + ")")
    out = []
    unknown = []
    for item in items:
        if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", item.lower()):
            raise OptionError("devices", f"{item!r} is not a device slug (letters, digits, '.', '-')",
                              subtype="devices")
        slug = normalize_selector(item)
        if known is not None and slug not in known:
            unknown.append(item)
        out.append(slug)
    if unknown and known is not None:
        raise OptionError("devices", unknown_devices_text(unknown, known), subtype="devices")
    return tuple(dict.fromkeys(out))


def unknown_devices_text(unknown: Sequence[str], known: Collection[str]) -> str:
    """"'h10' is no known device; known names: ...": what ``:devices:`` and a role's ``@DEVICE`` both
    say of a name that is neither an alias nor a slug the cache or this GPU has (a typo, not a GPU to
    measure)."""
    listed = ", ".join(repr(item) for item in unknown)
    return (f"{listed} {'is no known device' if len(unknown) == 1 else 'are no known devices'}"
            "; known names: " + ", ".join(sorted(known, key=_device_order)))


def known_devices(cache_dir: Path, *, local: str | None = None) -> frozenset[str]:
    """Every name ``:devices:`` may use: the aliases and the slugs they stand for, the slug of every
    device with a result in ``cache_dir`` (any question: a page may ask for a GPU a new question has
    no result on yet), and ``local``'s slug (this machine's GPU, which an ``auto`` build may measure).

    Only file names are read, so a build pays one directory listing per directive.
    """
    names = {*ALIASES, *ALIASES.values()}
    try:
        names.update(path.name[:-len(".json")].split("--", 1)[1] for path in Cache(cache_dir).files())
    except CacheError:
        pass  # the directive's own lookup reports the unlistable folder, with its path
    if local:
        names.add(device_slug(local))
    return frozenset(names)


def _device_order(name: str) -> tuple[bool, str]:
    """Aliases first (what an author types), then slugs; each group alphabetical."""
    return (name not in ALIASES, name)


def resolve_hf_config(text: str, *, srcdir: Path, docdir: Path) -> Path:
    """The config file a page names, refusing anything outside the source tree.

    A documentation build must not read arbitrary files of the machine it runs on (a page saying
    ``../../etc/passwd`` would otherwise be rendered into a warning, or worse, a table).
    """
    raw = text.strip()
    if not raw:
        raise OptionError("hf-config", "needs a path to a config.json")
    base = srcdir if raw.startswith("/") else docdir
    path = (base / raw.lstrip("/")).resolve()
    root = srcdir.resolve()
    if path != root and root not in path.parents:
        raise OptionError("hf-config", f"{raw!r} lies outside the documentation source directory",
                          subtype="path")
    if not path.is_file():
        raise OptionError("hf-config", f"{raw!r} is not a file", subtype="path")
    return path


def parse_options(options: Mapping[str, Any], *, srcdir: Path, docdir: Path,
                  modes_known: tuple[str, ...] = MODES, known_devices: Collection[str] | None = None) -> Request:
    """Validate a directive's raw options (strings) into a :class:`Request`.

    ``modes_known`` are the modes the directive renders: ``gemm-benchmark`` renders per-GEMM tables
    (autocast, prequant, as :data:`OPTIONS` documents); the summary renders the layer step too.
    ``known_devices`` (:func:`known_devices`), when given, are the device selectors a page may name:
    any other ``:devices:`` entry is a typo, reported as one rather than as "no cached result".

    Raises :class:`OptionError` naming the option at fault; config errors from the bench core are
    re-spelled with directive option names (``:num-query-groups:``). Every bad option is found
    before raising (an author fixing one typo at a time would rebuild once per typo): the error
    raised is the first in the directive's order, and its :attr:`OptionError.errors` holds them all.
    """
    errors: list[OptionError] = []

    def attempt(parse: Callable[[], _T], fallback: _T) -> _T:
        try:
            return parse()
        except OptionError as exc:
            errors.append(exc)
            return fallback

    for unknown in (name for name in options if name not in OPTIONS):
        errors.append(OptionError(unknown, unknown_option_text(unknown, OPTIONS, "gemm-benchmark")))
    text = {k: _keep_text(v) for k, v in options.items() if k in OPTIONS}
    fields: dict[str, Any] = {}
    layout: dict[str, Any] = {}
    question_inputs_ok = True
    for name, value in text.items():
        option = OPTIONS[name]
        if option.field is None and option.layout_field is None:
            continue
        parse = _parse_field if option.field is not None else parse_layout_option
        parsed = attempt(functools.partial(parse, option, value), None)
        if parsed is None:
            question_inputs_ok = False
        elif option.field is not None:
            fields[option.field] = parsed
        else:
            layout[option.layout_field] = parsed  # type: ignore[index]
    hf_config = None
    if "hf-config" in text:
        hf_config = attempt(lambda: resolve_hf_config(text["hf-config"], srcdir=srcdir, docdir=docdir), None)
        question_inputs_ok = question_inputs_ok and hf_config is not None
    for name in ("model", "shapes", "sweep"):
        if name not in text:
            continue
        if not text[name].strip():
            errors.append(OptionError(name, "needs a value"))
            question_inputs_ok = False
        elif name != "model" and not split_list(text[name]):
            # "," alone is no list: it must not fall back silently to another question (a :model:).
            errors.append(OptionError(name, f"{text[name].strip()!r} lists nothing", subtype="config"))
            question_inputs_ok = False
    question = None
    if question_inputs_ok:  # a question from half its inputs would report errors that are not there
        question = attempt(lambda: _question(text, hf_config, fields, layout), None)
    precisions = (attempt(lambda: _parse_choices("precisions", text["precisions"], normalize_precision,
                                                 PRECISION_IDS), PRECISION_IDS)
                  if "precisions" in text else PRECISION_IDS)
    modes = attempt(lambda: _parse_modes(text["modes"], modes_known), MODES) if "modes" in text else MODES
    devices: tuple[str, ...] = ()
    if "devices" in text:
        devices = attempt(lambda: _parse_devices(text["devices"], known_devices), devices)
    show = (attempt(lambda: _parse_choices("show", text["show"], _normalize_show, SHOW_PARTS), DEFAULT_SHOW)
            if "show" in text else DEFAULT_SHOW)
    name = text.get("name", "").strip()
    if name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", name):
        errors.append(OptionError("name", f"{name!r} must be one word of letters, digits, '-', '_', '.' or ':'"))
    elif "@" in name:
        errors.append(OptionError("name", "must not contain '@' (roles use NAME@DEVICE)"))
    missing = text.get("missing", "warn").strip().lower() or "warn"
    if missing not in ("warn", "note"):
        errors.append(OptionError("missing", f"unknown value {missing!r}; choose from warn, note"))
    if errors or question is None:
        order = list(options)
        errors.sort(key=lambda e: order.index(e.option) if e.option in order else len(order))
        first = errors[0]
        first.errors = tuple(errors)
        raise first
    # BF16 first: it is the baseline of every speedup, so it is always shown.
    precisions = tuple(dict.fromkeys(("bf16", *sorted(precisions, key=PRECISION_IDS.index))))
    return Request(question, precisions, modes, devices, show, name, text.get("caption", "").strip(), hf_config,
                   missing)


def _parse_field(option: Option, value: str) -> bool | int:
    return _parse_bool(option.name, value) if option.flag else _parse_int(option.name, value)


def parse_layout_option(option: Option, value: str) -> Any:
    """A layout option's value through the one parser of layout values (the CLI's too)."""
    assert option.layout_field is not None
    try:
        return parse_layout_value(option.layout_field, value)
    except ConfigError as exc:
        raise OptionError(option.name, exc.rule) from None


def _question(text: Mapping[str, str], hf_config: Path | None, fields: dict[str, Any],
              layout: dict[str, Any] | None = None) -> Question:
    """The bench core's question (the CLI's), its config errors spelled as directive options."""
    try:
        return build_question(
            model=text.get("model") or None,
            hf_config=hf_config,
            shapes=split_list(text["shapes"]) if "shapes" in text else None,
            sweep=split_list(text["sweep"]) if "sweep" in text else None,
            fields=fields,
            layout=layout,
        )
    except ConfigError as exc:
        message = exc.describe(lambda f: option_spelling(_FIELD_TO_OPTION.get(f, f)))
        at_fault = _FIELD_TO_OPTION.get(exc.field, exc.field).replace("_", "-")
        raise OptionError(at_fault, message.split(": ", 1)[1] if ": " in message else message,
                          subtype="config") from None


def _parse_modes(text: str, modes_known: tuple[str, ...]) -> tuple[str, ...]:
    modes = _parse_choices("modes", text, normalize_mode, modes_known)
    for mode in modes:
        if mode not in modes_known:
            raise OptionError("modes", f"{mode!r} is the whole-layer step, which gemm-benchmark (per-GEMM tables) "
                              f"does not show; choose from {', '.join(modes_known)}. The step is shown by "
                              "gemm-benchmark-summary (:modes: layer, layer-graphed) and quoted by "
                              ":gemm-step-speedup: and :gemm-share:", subtype="modes")
    return modes


def _normalize_show(text: str) -> str:
    key = text.strip().lower()
    if key in SHOW_PARTS:
        return key
    raise KeyError(text)


#: Config errors name fields the directive spells differently ("shape" is ``:shapes:``).
_FIELD_TO_OPTION = {"shape": "shapes", "hf_config": "hf-config"}


def precision_display(precision: str) -> str:
    return PRECISIONS[precision].display


def page_layout(options: Mapping[str, Any], block_text: str,
                lineno: int) -> tuple[dict[str, Any], tuple[int, str] | None]:
    """The layout fields a layout directive's options set (:data:`LAYOUT_DIRECTIVE_OPTIONS`), parsed by
    the one parser of layout values, and the first bad one as (its line, the message), else None: one
    reading for ``gemm-layout-memory`` and ``gemm-layout-step``, so their tables describe one layout."""
    fields: dict[str, Any] = {}
    for name, option in LAYOUT_DIRECTIVE_OPTIONS.items():
        if name not in options:
            continue
        try:
            fields[str(option.layout_field)] = parse_layout_option(option, options[name] or "")
        except OptionError as exc:
            return fields, (option_line(block_text, lineno, name), str(exc))
    return fields, None
