"""Random generators (RandomUniform, RandomNormal, their ``Like`` forms, Multinomial; Bernoulli expands
to RandomUniformLike): refused, with the reason.

A compiled model is deterministic, and no generator reproduces another's values, a seed included (the
ONNX node cases draw theirs from numpy's global state, onnxruntime uses its own generator), so there is
no reference a build could be checked against; a model that samples at inference is refused by name.
"""

from __future__ import annotations

from .registry import ConvertContext, converter


@converter("RandomUniform", "RandomNormal", "RandomUniformLike", "RandomNormalLike", "Multinomial")
def random_op(ctx: ConvertContext) -> None:
    raise ctx.unsupported("random generators are not supported: a compiled model is deterministic and no "
                          "generator reproduces another's values, even seeded")
