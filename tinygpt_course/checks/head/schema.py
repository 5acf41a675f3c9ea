"""The head lesson's record, as the trusted side accepts it (tinygpt_course.checks.record)."""
from ..record import COUNT, FLAG, NONE, NUMBERS, Schema, error_fields, params_fields, shared_fields, tensor, text


def _run(prefix):
    """What extract._run records of one forward pass."""
    return {**error_fields(prefix), prefix + "out": tensor(*NUMBERS), prefix + "weights": tensor(*NUMBERS),
            **{prefix + k: tensor(*NUMBERS) for k in ("k", "q", "v")},
            prefix + "T_dims/#": COUNT, prefix + "masked_fill_calls": COUNT}


SCHEMA = Schema({
    **shared_fields(),
    **params_fields("structure/params"), **params_fields("structure/buffers"),
    **params_fields("structure/plain_tensors"),
    "structure/layers/*/type": text(), "structure/layers/*/features": NONE,
    "structure/layers/*/features/#": COUNT, "structure/layers/*/has_bias": FLAG,
    **_run(""), **_run("again_"), **_run("short_"), **_run("changed_"),
    **{"alone/" + k: tensor(*NUMBERS) for k in ("k", "q", "v")},
})
