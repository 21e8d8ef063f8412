"""TRC35x, the data path (``data:``): blends, tokenizer, packing, EOD and epochs."""

from trainc.compiler.rules.catalog import Family, Rule, Severity
from trainc.schemas.enums import Engine

DATA_BLEND = Rule(
    id="TRC350",
    name="data-blend",
    summary=(
        'data.paths is a blend of PREFIX or "WEIGHT PREFIX" entries (all weighted or none, weights '
        "> 0), not combined with launch.data_path (Megatron --data-path)"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "megatron/training/arguments.py --data-path; megatron/core/datasets/utils.py "
        "get_blend_from_list (core_v0.16.x)"
    ),
)

TOKENIZER_VOCAB = Rule(
    id="TRC351",
    name="tokenizer-vocab-within-model",
    summary=(
        "data.tokenizer_vocab_size must not exceed model.vocab_size: larger token ids index past "
        "the embedding (CUDA device-side assert / IndexError)"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "Megatron-Bridge PR #455 (vocab size >= tokenizer vocab size); huggingface/tokenizers "
        "#1609 (token id out of range)"
    ),
)

PACKED_CP_PADDING = Rule(
    id="TRC352",
    name="packed-cp-padding",
    summary=(
        "with packed (THD) sequences and cp > 1 every document must be padded to a multiple of "
        "2*cp (cp*lcm(2, tp) with sequence parallelism): data.pad_to_multiple_of"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "Transformer Engine THD context parallelism (TransformerEngine #1368, PR #641); "
        "Megatron-Bridge PR #1867 (pad each packed sample to 2*cp)"
    ),
)

MASK_IGNORED = Rule(
    id="TRC353",
    name="reset-attention-mask-ignored",
    summary=(
        "Transformer Engine attention is causal and ignores the dense mask of "
        "--reset-attention-mask: documents attend across each other silently"
    ),
    engines={Engine.deepspeed: Severity.na, Engine.megatron: Severity.error},
    source="NVIDIA/Megatron-LM #2357 (TE attn_mask_type causal ignores the GPTDataset mask)",
)

DATA_RUNNER = Rule(
    id="TRC356",
    name="data-option-runner",
    summary=(
        "a data option the chosen runner does not read (packed THD data; the cross-document mask "
        "in the trainc worker; any data: key for torchtitan) is an error, never silently dropped"
    ),
    engines={Engine.deepspeed: Severity.error, Engine.megatron: Severity.error},
    source=(
        "trainc worker (trainc/launch/worker/data.py: GPTDatasetConfig; no attention mask, no "
        "PackedSeqParams); pretrain_gpt.py reads no THD data (core_v0.16.x)"
    ),
)

EOD_TOKEN = Rule(
    id="TRC358",
    name="eod-token-id",
    summary=(
        "with real data, data.eod_mask_loss / reset_position_ids / reset_attention_mask find "
        "document ends by the NullTokenizer's end-of-document id (vocab_size - 1), which trainc's "
        "artifacts use: data tokenized with another end-of-document id never matches it"
    ),
    severity=Severity.warning,
    engines={Engine.deepspeed: Severity.warning, Engine.megatron: Severity.warning},
    source=(
        "megatron/core/datasets/gpt_dataset.py _get_ltor_masks_and_position_ids (compares tokens "
        "with tokenizer.eod); megatron/core/tokenizers NullTokenizer (eod = the last id); "
        "trainc/launch/worker/data.py NullTokenizer(V - 1)"
    ),
)

EPOCHS = Rule(
    id="TRC357",
    name="epochs-derived",
    summary=(
        "train_iters x global_batch_size against the samples in the data: the epoch count, derived "
        "once (derived.steps_per_epoch, derived.epochs); more than one epoch repeats data"
    ),
    severity=Severity.info,
    engines={Engine.deepspeed: Severity.info, Engine.megatron: Severity.info},
    source=(
        "megatron/core/datasets/gpt_dataset.py GPTDataset (epochs repeat the documents, 0.16.1); "
        "trainc derive.py steps_per_epoch"
    ),
)

#: the family: its id ranges and, explicitly, its rules
DATA = Family(
    name="data",
    ids=(range(350, 360),),
    about="the data path: blends, tokenizer, packing, EOD and epochs",
    rules=(
        DATA_BLEND,
        TOKENIZER_VOCAB,
        PACKED_CP_PADDING,
        MASK_IGNORED,
        DATA_RUNNER,
        EOD_TOKEN,
        EPOCHS,
    ),
)
