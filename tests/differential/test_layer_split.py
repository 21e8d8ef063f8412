"""trainc's layer split against Megatron-Core's ``get_num_layers_to_build`` (CPU, no process
group): for every (num_layers, pp, vpp, account_for_embedding, account_for_loss) that trainc's
rules accept, the transformer layers per (pipeline rank, virtual stage) that the estimates use
(``stage_chunk_sizes``) are the ones Megatron builds; where trainc finds no split, Megatron's
``TransformerConfig`` or ``get_num_layers_to_build`` refuses it too."""

from __future__ import annotations

import itertools

import pytest

pytestmark = [
    pytest.mark.differential,
    pytest.mark.filterwarnings("ignore:full scope is deprecated:UserWarning"),
]

pytest.importorskip("megatron.core")

from tests.support import differential as H  # noqa: E402
from trainc.compiler.derive import layers_per_stage, stage_chunk_sizes  # noqa: E402

GRID = [
    g
    for g in itertools.product(
        range(1, 19), (1, 2, 3, 4, 6), (1, 2, 3), (False, True), (False, True)
    )
    if g[2] == 1 or g[1] > 1
]  # vpp needs pp>1


def _megatron(L: int, pp: int, vpp: int, emb: bool, loss: bool) -> list[int] | None:
    """Layers Megatron builds per virtual stage (q = j*pp + r), or None if it refuses."""
    import torch

    kw = {
        "num_layers": L,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "pipeline_model_parallel_size": pp,
        "virtual_pipeline_model_parallel_size": vpp if vpp > 1 else None,
        "account_for_embedding_in_pipeline_split": emb,
        "account_for_loss_in_pipeline_split": loss,
        "pipeline_dtype": torch.float32,
    }
    try:
        cfg = H.transformer_config(kw, {})
    except (ValueError, AssertionError):
        return None
    built, err = H._layers_built(cfg, pp, vpp)
    if err or built is None or sum(built) != L:
        return None
    return [built[r * vpp + j] for j in range(vpp) for r in range(pp)]


@pytest.mark.parametrize(("L", "pp", "vpp", "emb", "loss"), GRID)
def test_layer_split_matches_megatron(L, pp, vpp, emb, loss):
    stages = layers_per_stage(L, pp, None, None, emb, loss)
    ok = stages is not None and all(
        (n + (emb and r == 0) + (loss and r == pp - 1)) % vpp == 0 for r, n in enumerate(stages)
    )
    theirs = _megatron(L, pp, vpp, emb, loss)
    if not ok:
        assert theirs is None or ((emb or loss) and pp == 1), (L, pp, vpp, emb, loss, theirs)
        return
    chunks = stage_chunk_sizes(list(stages), vpp, emb, loss)
    ours = [chunks[r][j] if vpp > 1 else chunks[r][0] for j in range(vpp) for r in range(pp)]
    assert theirs == ours, (stages, chunks)
