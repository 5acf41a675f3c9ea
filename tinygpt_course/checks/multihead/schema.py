"""The multihead lesson's record, as the trusted side accepts it (tinygpt_course.checks.record)."""
from ..record import COUNT, FLAG, NONE, NUMBERS, Schema, error_fields, params_fields, shared_fields, tensor, text


def _forward(prefix):
    """What common.forward_record records of one forward pass."""
    return {**error_fields(prefix), prefix + "out": tensor(*NUMBERS)}


def _run(prefix):
    """What extract._run records: the pass, each head's output and what proj received."""
    return {**_forward(prefix), prefix + "head_calls/#": COUNT,
            prefix + "head_outs/#": tensor(*NUMBERS), prefix + "proj_in/#": tensor(*NUMBERS)}


SCHEMA = Schema({
    **shared_fields(),
    **params_fields("structure/params"),
    "structure/heads_type": text(), "structure/head_types": NONE, "structure/head_types/#": text(),
    "structure/head_first_index": NONE, "structure/head_first_index/#": COUNT,
    "structure/head_key_sizes": NONE, "structure/head_key_sizes/#": COUNT,
    "structure/proj_type": text(), "structure/proj_features": NONE, "structure/proj_features/#": COUNT,
    "structure/proj_has_bias": FLAG,
    **_run(""), **_forward("again_"), **_run("changed_"),
    "head_weights/#": tensor(*NUMBERS), "alone_outs/#": tensor(*NUMBERS), "proj_probe": tensor(*NUMBERS),
})
