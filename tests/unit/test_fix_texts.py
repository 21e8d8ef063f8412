"""Fix texts found wrong by trying them (a red-team pass): every value a fix proposes must pass
the rule it fixes."""

from __future__ import annotations

import re

from specs.kit import find, lint_cfg


def test_hidden_heads_fix_offers_the_likely_typo_and_heads_that_respect_gqa():
    base = {"model.hidden_size": 4100, "model.num_attention_heads": 32,
            "model.num_query_groups": 8}
    [d] = find(lint_cfg(**base), "TRC208")
    assert "model.hidden_size=4096" in d.fix
    listed = re.search(r"num_attention_heads to one of ([\d, ]+)", d.fix)
    for heads in ([int(x) for x in listed.group(1).split(",")] if listed else []):
        diags = lint_cfg(**base, **{"model.num_attention_heads": heads})
        assert not find(diags, "TRC208") and not find(diags, "TRC207"), heads
    assert not find(lint_cfg(**{**base, "model.hidden_size": 4096}), "TRC208")


def test_zero_stage_layers_say_they_must_be_positive():
    [d] = find(lint_cfg(**{"model.num_layers": 32, "parallel.pp": 4,
                           "parallel.pipeline_first_stage_layers": 0,
                           "parallel.pipeline_last_stage_layers": 0}), "TRC212")
    assert "must be at least 1" in d.message and "divides evenly" not in d.message
