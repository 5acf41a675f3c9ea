"""The gpt lesson's record, as the trusted side accepts it (tinygpt_course.checks.record)."""
from ..record import COUNT, FLAG, NONE, NUMBERS, Schema, error_fields, params_fields, shared_fields, tensor, text


def _forward(prefix):
    """What extract._forward records of one pass: what the layers got and gave, logits, loss."""
    return {**error_fields(prefix),
            **{prefix + k: tensor(*NUMBERS) for k in ("tok_in", "pos_in", "lm_head_in", "block_in", "blocks_out",
                                                     "logits", "loss")},
            prefix + "ln_f_calls": COUNT, prefix + "out_type": text(), prefix + "out_len": COUNT,
            prefix + "loss_type": text()}


def _generate(run):
    """What extract._generate records of one generate run."""
    return {**error_fields(run + "_"), run: tensor(*NUMBERS), run + "_returned": text(), run + "_lengths/#": COUNT,
            run + "_draws/#": tensor(*NUMBERS)}


SCHEMA = Schema({
    **shared_fields(),
    **params_fields("structure/params"),
    "structure/shared/#/#": text(), "structure/types/*": text(),
    "structure/block_types": NONE, "structure/block_types/#": text(), "structure/has_generate": FLAG,
    **_forward(""), **_forward("again_"), **_forward("short_"), **_forward("train_"),
    **{f"ce_calls/#/{k}": tensor(*NUMBERS) for k in ("input", "target", "out")}, "ce_calls/#/reduction": text(),
    **{f"alone/{k}": tensor(*NUMBERS) for k in ("tok", "pos", "ln_f", "lm_head")}, "alone/blocks/#": tensor(*NUMBERS),
    "gen_table": tensor(), "gen_start": tensor("int64"), **_generate("gen1"), **_generate("gen2"),
})
