"""The option table is the single source: option_spec, validation and the generated reference agree."""

from __future__ import annotations

from pathlib import Path

import pytest
from bs4 import BeautifulSoup

from gemm_bench.question.config import BOOL_FIELDS, INT_FIELDS
from gemm_benchmark.config import CONFIG_VALUES
from gemm_benchmark.directive import GemmBenchmarkDirective
from gemm_benchmark.options import OPTIONS, OptionError, parse_options
from gemm_benchmark.roles import ROLES


def test_every_megatron_field_is_an_option():
    fields = {o.field for o in OPTIONS.values() if o.field}
    assert fields == set(INT_FIELDS) | set(BOOL_FIELDS)
    for name in ("model", "hf-config", "shapes", "sweep", "precisions", "modes", "devices", "show", "caption", "name"):
        assert name in OPTIONS
    assert all(o.description and o.default for o in OPTIONS.values())


def test_option_spec_accepts_anything_so_validation_is_ours():
    spec = GemmBenchmarkDirective.option_spec
    assert "colour" in spec and spec["colour"]("blue") == "blue"
    with pytest.raises(OptionError) as info:
        parse_options({"colour": "blue"}, srcdir=Path("."), docdir=Path("."))
    assert info.value.option == "colour" and info.value.subtype == "option"


def _parse(tmp_path: Path, **options: str):
    return parse_options({k.replace("_", "-"): v for k, v in options.items()}, srcdir=tmp_path, docdir=tmp_path)


def test_parse_matches_the_cli_question(tmp_path):
    from gemm_bench.question.question import build_question

    request = _parse(tmp_path, model="te-guide-5b", num_layers="4", swiglu="", precisions="fp8_current, BF16",
                     modes="pre-quantized", devices="H100 h200", show="table")
    expected = build_question(model="te-guide-5b", fields={"num_layers": 4, "swiglu": True})
    assert request.question.hash == expected.hash and request.question.num_layers == 4
    assert request.precisions == ("bf16", "fp8-current") and request.modes == ("prequant",)
    # Aliases are resolved to exact slugs.
    assert request.devices == ("h100-80gb-hbm3", "h200") and request.show == ("table",)


@pytest.mark.parametrize(("options", "option", "message"), [
    ({"model": "gpt-17"}, "model", "unknown preset 'gpt-17'"),
    ({"model": "te-guide-5b", "swiglu": "maybe"}, "swiglu", "is a flag"),
    ({"model": "te-guide-5b", "hidden-size": "big"}, "hidden-size", "'big' is not a whole number"),
    ({"model": "te-guide-5b", "shapes": "1x2x3"}, "shapes", "cannot be combined with :model:"),
    ({"shapes": "12x34"}, "shapes", "is not of the form MxKxN"),
    ({"model": "te-guide-5b", "modes": "fast"}, "modes", "unknown value 'fast'"),
    ({"model": "te-guide-5b", "show": "chart"}, "show", "unknown value 'chart'"),
    ({"model": "te-guide-5b", "name": "a b"}, "name", "must be one word"),
    ({"num-attention-heads": "8"}, "hidden-size", "is required"),
])
def test_bad_options_name_the_option(tmp_path, options, option, message):
    with pytest.raises(OptionError) as info:
        parse_options(options, srcdir=tmp_path, docdir=tmp_path)
    assert info.value.option == option and message in info.value.message, str(info.value)


def test_hf_config_must_stay_inside_the_source_tree(tmp_path):
    src = tmp_path / "docs"
    (src / "sub").mkdir(parents=True)
    (tmp_path / "secret.json").write_text("{}")
    (src / "model.json").write_text('{"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,'
                                    ' "intermediate_size": 256}')
    # A leading "/" means "from the source directory" (as in Sphinx), so "/../x" still escapes.
    for escape in ("../../secret.json", "/../secret.json", "../../../etc/passwd", "../sub/../../secret.json"):
        with pytest.raises(OptionError, match="outside the documentation source directory"):
            parse_options({"hf-config": escape}, srcdir=src, docdir=src / "sub")
    ok = parse_options({"hf-config": "../model.json"}, srcdir=src, docdir=src / "sub")
    assert ok.hf_config == (src / "model.json").resolve() and ok.question.config.hidden_size == 64
    assert parse_options({"hf-config": "/model.json"}, srcdir=src, docdir=src / "sub").hf_config == ok.hf_config


@pytest.mark.sphinx("html", testroot="reference", srcdir="reference-tables")
def test_reference_directives_render_the_tables(app, warning):
    app.build()
    assert "WARNING" not in warning.getvalue()
    soup = BeautifulSoup((Path(app.outdir) / "index.html").read_text(encoding="utf-8"), "html.parser")
    options = soup.select_one("table.gemm-options-reference")
    names = [tr.td.get_text() for tr in options.select("tbody tr")]
    assert names == [f":{name}:" for name in OPTIONS]
    roles = [tr.td.get_text() for tr in soup.select_one("table.gemm-roles-reference").select("tbody tr")]
    assert roles == [f":{name}:" for name in ROLES]
    config = [tr.td.get_text() for tr in soup.select_one("table.gemm-config-reference").select("tbody tr")]
    assert config == [c.name for c in CONFIG_VALUES]
    assert "GEMM_BENCH_EXECUTION_MODE" in soup.select_one("table.gemm-config-reference").get_text()
