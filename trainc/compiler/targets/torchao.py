"""torchao float8 / MX recipes as torchtitan applies them per version (engine=fsdp), and the
model converters a plan names. The recipe table's sources are in
:mod:`trainc.compiler.validate.fsdp_float8` (torchtitan 0.3.0 wheel
``components/quantization/float8.py`` / ``mx.py``; pytorch/torchtitan ``docs/float8.md``)."""

from __future__ import annotations

from trainc.schemas import Fp8Format, Fp8Recipe, TrainSpec

#: The torchtitan release torchtitan_args.txt is written for when launch.versions has none.
DEFAULT_TORCHTITAN = "0.3.0"
#: torchtitan version (major, minor) from which a float8 recipe exists, and the last minor
#: version that still has it (None: still there); see the module docstring for the sources.
RECIPES_BY_VERSION: dict[Fp8Recipe, tuple[tuple[int, int], tuple[int, int] | None]] = {
    Fp8Recipe.tensorwise: ((0, 0), (0, 2)),
    Fp8Recipe.rowwise: ((0, 0), None),
    Fp8Recipe.rowwise_with_gw_hp: ((0, 0), None),
    Fp8Recipe.mxfp8: ((0, 0), None),
}
#: Compute capability each torchao recipe needs (FP8 tensor cores; MX block scales: SM100).
NEEDS_CC = {Fp8Recipe.mxfp8: (10, 0)}
TORCHAO_RECIPES = tuple(RECIPES_BY_VERSION)


def torchtitan_version(spec: TrainSpec) -> tuple[str, bool]:
    """(torchtitan version string, whether the spec stated it in launch.versions)."""
    v = spec.launch.versions.get("torchtitan")
    return (v, True) if v else (DEFAULT_TORCHTITAN, False)


def _minor(version: str) -> tuple[int, int] | None:
    parts = version.lstrip("v").split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def recipes_in(version: str) -> tuple[Fp8Recipe, ...]:
    """The float8 recipes torchtitan ``version`` builds (all of them for an unparsable one)."""
    v = _minor(version)
    if v is None:
        return TORCHAO_RECIPES
    return tuple(
        r for r, (lo, hi) in RECIPES_BY_VERSION.items() if lo <= v and (hi is None or v <= hi)
    )


def converters(spec: TrainSpec) -> list[dict[str, str]]:
    """The torchtitan model converters the spec's FP8 setting needs, as the registry function
    (0.3.0) or ``--model.converters`` (older) takes them: ``[]`` without FP8, else one entry
    ``{"converter": "float8" | "mx", "recipe_name": ...}`` (``recipe_name`` absent for
    tensorwise, torchtitan's default before 0.3.0)."""
    t = spec.training
    if t.fp8_format is Fp8Format.none:
        return []
    if t.fp8_recipe is Fp8Recipe.mxfp8:
        return [{"converter": "mx", "recipe_name": "mxfp8"}]
    if t.fp8_recipe is Fp8Recipe.tensorwise:
        return [{"converter": "float8"}]
    return [{"converter": "float8", "recipe_name": t.fp8_recipe.value}]
