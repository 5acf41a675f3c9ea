"""The block lesson's record, as the trusted side accepts it (tinygpt_course.checks.record)."""
from ..record import ANY_VALUE, COUNT, FLAG, NONE, NUMBERS, Schema, error_fields, params_fields, shared_fields, \
    tensor, text


def _forward(prefix):
    """What common.forward_record records of one forward pass."""
    return {**error_fields(prefix), prefix + "out": tensor(*NUMBERS)}


def _run(prefix):
    """What extract._run records: the pass, and what the attention and feed-forward got and gave."""
    return {**_forward(prefix), prefix + "x": tensor(), prefix + "x_changed": FLAG,
            **{prefix + k: tensor(*NUMBERS) for k in ("sa_in", "sa_out", "ffwd_in", "ffwd_out", "sa_alone")}}


SCHEMA = Schema({
    **shared_fields(),
    **params_fields("structure/params"),
    **{f"structure/{name}_type": text() for name in ("sa", "ffwd", "ln1", "ln2")},
    "structure/ffwd_inner": text(), "structure/ffwd_children": NONE, "structure/ffwd_children/#": text(),
    "structure/ffwd_layers": NONE, "structure/ffwd_layers/#/#": ANY_VALUE,
    "structure/ln1_shape": NONE, "structure/ln1_shape/#": COUNT,
    "structure/ln2_shape": NONE, "structure/ln2_shape/#": COUNT, "structure/norms_shared": FLAG,
    "norms/*": tensor(), "alone/*": tensor(*NUMBERS),
    **_run(""), **_forward("again_"), **_run("changed_"),
})
