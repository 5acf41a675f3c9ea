"""Fixed starting weights for checks: one generator seeded with the check's seed draws every
tensor of a lesson's spec, [(parameter name, shape, fan_in), ...], in the spec's order.

The value checks load them into the learner's layers by parameter name, so a check's verdict
never depends on the order in which the learner's code creates its layers or draws random
numbers (the spec's order is the lesson's, not the learner's).
"""
import torch


def linear_init(shape, gen, fan_in):
    """Like nn.Linear's default: uniform in +-1/sqrt(fan_in)."""
    bound = fan_in ** -0.5
    return (torch.rand(shape, generator=gen) * 2 - 1) * bound


def canonical_state(seed, spec):
    """{name: tensor} for spec = [(name, shape, fan_in), ...], the same for the same seed."""
    gen = torch.Generator().manual_seed(int(seed))
    return {name: linear_init(shape, gen, fan_in) for name, shape, fan_in in spec}
