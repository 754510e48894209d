"""How many of LiteRT's builtin operators the TFLite import converts, and why each other one is left out:
the count docs/SUPPORTED.md states is this module's output (``python -m cuvil_edge.frontend.tflite.coverage``
prints it; a test keeps the two the same).

LiteRT's kernel list is the schema's ``BuiltinOperator`` enum (the installed ``tflite`` package) less its
markers and the builtins LiteRT registers no kernel for (a model using one does not run there either)."""

from __future__ import annotations

from dataclasses import dataclass

from .registry import BUILTINS

#: enum entries that are not operators
MARKERS = frozenset({"CUSTOM", "DELEGATE", "PLACEHOLDER_FOR_GREATER_OP_CODES"})
#: the StableHLO builtins LiteRT has kernels for (the other STABLEHLO_* are in the schema only)
LITERT_STABLEHLO = frozenset({f"STABLEHLO_{k}" for k in (
    "ADD", "AND", "COMPOSITE", "GATHER", "MAXIMUM", "MINIMUM", "MULTIPLY", "PAD", "REDUCE_WINDOW",
    "RNG_BIT_GENERATOR", "SCATTER", "SHIFT_LEFT")})
#: other builtins without a LiteRT kernel
NO_KERNEL = frozenset({"CALL", "CONCAT_EMBEDDINGS"})

#: why each builtin of LiteRT's list that has no converter is left out
LEFT_OUT: dict[str, tuple[str, ...]] = {
    "complex64 tensors, which the IR has no type for": ("COMPLEX_ABS", "IMAG", "REAL", "RFFT2D"),
    "string tensors and hash tables (text preprocessing inside the model)": (
        "HASHTABLE", "HASHTABLE_FIND", "HASHTABLE_IMPORT", "HASHTABLE_LOOKUP", "HASHTABLE_SIZE",
        "LSH_PROJECTION", "SKIP_GRAM"),
    "sparse ids and weights of a run-time count": ("EMBEDDING_LOOKUP_SPARSE",),
    "random numbers: LiteRT's Philox streams cannot be matched": (
        "MULTINOMIAL", "RANDOM_STANDARD_NORMAL", "RANDOM_UNIFORM", "STABLEHLO_RNG_BIT_GENERATOR"),
}


@dataclass(frozen=True)
class Coverage:
    """``supported``: LiteRT builtins with a converter; ``total``: LiteRT's builtins; ``left_out``: reason
    -> the others; ``no_kernel``: schema builtins LiteRT cannot run (not counted)."""

    supported: tuple[str, ...]
    total: int
    left_out: dict[str, tuple[str, ...]]
    no_kernel: tuple[str, ...]


def schema_builtins() -> frozenset[str]:
    """Every operator of the installed schema's ``BuiltinOperator`` enum."""
    from tflite.utils import BUILTIN_OPCODE2NAME

    return frozenset(BUILTIN_OPCODE2NAME.values()) - MARKERS


def litert_builtins() -> frozenset[str]:
    """The builtins LiteRT has a kernel for."""
    return frozenset(n for n in schema_builtins()
                     if n not in NO_KERNEL and (not n.startswith("STABLEHLO_") or n in LITERT_STABLEHLO))


def builtin_coverage() -> Coverage:
    litert = litert_builtins()
    return Coverage(tuple(sorted(litert & set(BUILTINS))), len(litert), LEFT_OUT,
                    tuple(sorted(schema_builtins() - litert)))


def coverage_markdown() -> str:
    """The docs' paragraph: the count, then what is left out and why."""
    c = builtin_coverage()
    lines = [f"{len(c.supported)} of {c.total} LiteRT builtins supported (`python -m "
             "cuvil_edge.frontend.tflite.coverage`: LiteRT's builtins are the schema's `BuiltinOperator` "
             f"enum less the {len(c.no_kernel)} LiteRT has no kernel for, `CALL`, `CONCAT_EMBEDDINGS` and "
             "most `STABLEHLO_*`). Left out:"]
    lines += [f"- {reason}: {', '.join(ops)}" for reason, ops in c.left_out.items()]
    return "\n".join(lines)


if __name__ == "__main__":
    print(coverage_markdown())
