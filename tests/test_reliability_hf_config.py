"""Hostile Hugging Face config files: every one is a ConfigError naming the file (and the key), nothing else.

Issue 10 found tracebacks from ``shapes --hf-config`` on wrongly typed values. The cases below are
the classes it named (a string where a number belongs, null ``text_config``, a boolean as a number,
non-UTF-8 bytes, 5000-digit integers, deep nesting, lists), each with the message it must give;
the hypothesis fuzz then mutates the real model configs in tests/data/hf and throws raw bytes at
the reader, through the same :func:`build_question` the CLI and the directive call.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gemm_bench.question.config import ConfigError, cli_flag
from gemm_bench.question.question import build_question
from tests.conftest import fuzz_examples

HF = Path(__file__).parent / "data" / "hf"
REAL = {p.name: json.loads(p.read_text()) for p in sorted(HF.glob("*.json"))}
LLAMA = REAL["llama3-8b.json"]


def _message(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        build_question(hf_config=path)
    assert info.value.field == "hf_config"
    message = info.value.describe(cli_flag)
    message.encode("utf-8")  # printable: no lone surrogates from the file
    assert message.startswith("--hf-config: ") and ascii(str(path)) in message
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (json.dumps({**LLAMA, "hidden_size": "4096"}), "hidden_size: must be a whole number, got '4096'"),
        (json.dumps({**LLAMA, "num_attention_heads": True}), "num_attention_heads: must be a whole number, got true"),
        (json.dumps({**LLAMA, "num_key_value_heads": [8]}),
         "num_key_value_heads: must be a whole number, got a JSON array"),
        (json.dumps({**LLAMA, "intermediate_size": {"value": 14336}}),
         "intermediate_size: must be a whole number, got a JSON object"),
        (json.dumps({**LLAMA, "head_dim": 128.0}), "head_dim: must be a whole number, got 128.0"),
        (json.dumps({**LLAMA, "head_dim": float("nan")}), "head_dim: must be a whole number, got nan"),
        (json.dumps({**LLAMA, "num_hidden_layers": -3}), "num_hidden_layers: must be at least 1, got -3"),
        (json.dumps({**LLAMA, "hidden_size": 2**40}), "hidden_size: 1099511627776 is larger than the supported"),
        (json.dumps({**LLAMA, "hidden_act": 7}), "hidden_act: must be a string, got 7"),
        # Nulls are absent values: valid, and with neither activation nor family nothing says "gated".
        (json.dumps({**LLAMA, "model_type": None, "hidden_act": None}), None),
        (json.dumps({"text_config": None}), "text_config must be a JSON object, got null"),
        (json.dumps({"text_config": [LLAMA]}), "text_config must be a JSON object, got a JSON array"),
        (json.dumps({"text_config": {**LLAMA, "hidden_size": "x"}}), "text_config.hidden_size: must be a whole number"),
        ('{"hidden_size": ' + "9" * 5000 + "}", "hidden_size: a 5000-digit number is larger than the supported"),
        ('{"hidden_size": -' + "9" * 5000 + "}", "hidden_size: a 5000-digit number is larger than the supported"),
        ('{"hidden_size": 4096, "rope_scaling": ' + "[" * 100_000 + "]" * 100_000 + "}",
         "'rope_scaling' is nested too deeply"),
        ("[" * 100_000 + "]" * 100_000, "is nested too deeply"),
        (json.dumps([LLAMA]), "does not hold a JSON object"),
        ("", "is not valid JSON"),
        ('{"hidden_size": 4096,}', "is not valid JSON (line 1"),
        (json.dumps({k: v for k, v in LLAMA.items() if k != "num_attention_heads"}),
         "num_attention_heads: is required"),
        (json.dumps({**LLAMA, "\ud800_experts": 4}), r"'\ud800_experts' may change the layer's GEMMs"),
    ],
)
def test_each_class_of_hostile_value_names_file_and_key(tmp_path, text, words) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    if words is None:
        q = build_question(hf_config=path)
        assert q.config is not None and not q.config.swiglu
        return
    assert words in _message(path)


def test_unreadable_files_are_config_errors_naming_them(tmp_path) -> None:
    (tmp_path / "latin1.json").write_bytes(b'{"hidden_size": 4096, "_name_or_path": "caf\xe9"}')
    assert "is not UTF-8 text (byte 43)" in _message(tmp_path / "latin1.json")
    assert "cannot read" in _message(tmp_path / "missing.json")
    assert "cannot read" in _message(tmp_path)  # a directory
    with pytest.raises(ConfigError, match="cannot read"):
        build_question(hf_config=str(tmp_path / "nul\0.json"))


json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, 1, 2, 3, 7, 64, 4096, 2**20 + 1]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=6), inner, max_size=3)),
    max_leaves=6,
)
#: Keys the reader looks at, keys that sound like GEMM dimensions, and anything else.
KEYS = st.one_of(
    st.sampled_from([
        "hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
        "num_hidden_layers", "hidden_act", "hidden_activation", "model_type", "num_local_experts", "num_experts",
        "n_routed_experts", "num_experts_per_tok", "experts_per_token", "moe_intermediate_size", "n_shared_experts",
        "shared_expert_intermediate_size", "first_k_dense_replace", "moe_layer_freq", "decoder_sparse_step",
        "mlp_only_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
        "text_config", "layer_types", "rope_scaling", "vocab_size", "some_expert_count",
    ]),
    st.text(max_size=12),
)


@st.composite
def hostile_configs(draw: Any) -> bytes:
    kind = draw(st.sampled_from(["mutated", "mutated", "mutated", "nested", "bytes", "text"]))
    if kind == "bytes":
        return draw(st.binary(max_size=64))
    if kind == "text":
        return draw(st.text(max_size=64)).encode("utf-8", "surrogatepass")
    raw = dict(REAL[draw(st.sampled_from(sorted(REAL)))])
    for _ in range(draw(st.integers(1, 3))):
        key = draw(KEYS)
        if key in raw and draw(st.booleans()):
            del raw[key]
        else:
            raw[key] = draw(json_values)
    if kind == "nested":
        raw = {"model_type": draw(json_scalars), "text_config": raw if draw(st.booleans()) else draw(json_values)}
    return json.dumps(raw).encode("utf-8", "surrogatepass")


@settings(max_examples=fuzz_examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_configs(), st.sampled_from([{}, {"seq_length": 128}, {"tensor_model_parallel_size": 2}]))
def test_fuzzed_hostile_configs_give_a_question_or_a_config_error_and_nothing_else(data: bytes, fields) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "config.json"
        path.write_bytes(data)
        try:
            q = build_question(hf_config=path, fields=fields)
        except ConfigError as exc:
            message = exc.describe(cli_flag)
            message.encode("utf-8")
            if exc.field == "hf_config":
                assert ascii(str(path)) in message
            else:  # only the caller's own flag may be named instead of the file
                assert exc.field in fields, message
            return
    assert q.gemms and all(min(g.m, g.k, g.n, g.groups) >= 1 for g in q.gemms)
    assert q.num_layers >= 1
