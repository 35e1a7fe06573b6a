"""The proposer table (``engines/methods.py``) against the installed vLLM's method list: a
method vLLM adds shows up here, not as a wrong answer in some other file."""

from __future__ import annotations

from pytest_specdecode.engines.methods import (
    METHODS,
    NO_MODEL,
    has_model,
    is_head,
    is_mtp,
    method_facts,
    model_placeholder,
)
from pytest_specdecode.engines.vllm_schema import installed_schema

from ..e2e_support import needs_vllm

#: vLLM methods the table leaves to its defaults on purpose: extract_hidden_states drafts
#: nothing to measure (it saves the target's hidden states).
UNTABLED = {"extract_hidden_states"}


def test_the_table_answers_every_method_question() -> None:
    assert NO_MODEL == {"ngram", "ngram_gpu", "suffix"}
    assert not has_model("ngram_gpu") and has_model("draft_model") and has_model("eagle3")
    assert [m for m in ("eagle", "eagle3", "mtp", "deepseek_mtp", "draft_model") if is_head(m)] == [
        "eagle", "eagle3", "mtp", "deepseek_mtp"
    ]  # fmt: skip
    assert [name for name, row in METHODS.items() if row.standalone] == ["draft_model"]
    assert "EAGLE-3 head" in model_placeholder("eagle3")
    assert (
        model_placeholder("new_method") == "<path or hub id of the new_method proposer's weights>"
    )
    assert method_facts("custom_class").ignores_schedule
    assert method_facts("qwen3_next_mtp").head and method_facts("qwen3_next_mtp").model
    assert [name for name, row in METHODS.items() if row.eagle] == ["eagle", "eagle3"]
    assert [name for name, row in METHODS.items() if row.aux_layers] == ["eagle3"]
    assert not method_facts("deepseek_mtp").eagle
    assert [name for name, row in METHODS.items() if row.in_target] == ["mtp", "dspark"]
    assert [m for m in ("mtp", "deepseek_mtp", "mimo_mtp", "dspark", "eagle3") if is_mtp(m)] == [
        "mtp", "deepseek_mtp", "mimo_mtp"
    ]  # fmt: skip


@needs_vllm
def test_the_table_matches_the_installed_vllm() -> None:
    schema = installed_schema()
    assert schema is not None and schema.model_free is not None
    assert set(METHODS) <= schema.methods, set(METHODS) - schema.methods
    untabled = {m for m in schema.methods - set(METHODS) if not m.endswith("_mtp")}
    assert untabled <= UNTABLED, f"vLLM methods missing from engines/methods.py: {untabled}"
    assert NO_MODEL <= schema.model_free
    for name, row in METHODS.items():  # a placeholder is given where vLLM needs a model
        assert (row.placeholder is not None) == schema.needs_model(name), name
        if row.in_target:  # vLLM fills model in with the target's
            assert name in schema.model_free, name
