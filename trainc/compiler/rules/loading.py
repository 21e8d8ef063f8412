"""TRC0xx, loading: the file, its YAML, the schema and the overrides
(:mod:`trainc.compiler.load`)."""

from trainc.compiler.rules.catalog import Family, Rule, Severity

SPEC_UNREADABLE = Rule(
    id="TRC000",
    name="spec-unreadable",
    summary="the spec file cannot be read or parsed as YAML",
    source="trainc loader",
)

TYPE_MISMATCH = Rule(
    id="TRC001",
    name="type-mismatch",
    summary="a value has the wrong type for its key",
    source="trainc schema",
)

UNKNOWN_KEY = Rule(
    id="TRC002",
    name="unknown-key",
    summary="a key is not part of the spec schema",
    source="trainc schema",
)

MISSING_VALUE = Rule(
    id="TRC003",
    name="missing-value",
    summary="a required key has no value",
    source="trainc schema",
)

UNKNOWN_CHOICE = Rule(
    id="TRC004",
    name="unknown-choice",
    summary="a preset or option name is not one of the choices",
    source="trainc schema / Hydra defaults list",
)

BAD_OVERRIDE = Rule(
    id="TRC005",
    name="bad-override",
    summary="a KEY=VALUE override cannot be parsed or applied",
    source="Hydra override grammar",
)

VALUE_RANGE = Rule(
    id="TRC006",
    name="value-out-of-range",
    summary="a value is outside its allowed range",
    source="trainc schema",
)

UNQUOTED_STRING = Rule(
    id="TRC007",
    name="string-read-as-other-type",
    summary=(
        "a string key's unquoted value was read by YAML 1.1 (or the override grammar) as a number, "
        "base-60 time, boolean or null (time_limit: 4:00:00 is 14400, account: 0123 is 83); quote "
        "it"
    ),
    source=(
        "YAML 1.1 implicit types (yaml.org/type: int, float, bool, null); Hydra override grammar"
    ),
)

NON_FINITE = Rule(
    id="TRC008",
    name="non-finite-number",
    summary="NaN and infinities are refused in every number key",
    source="RFC 8259 JSON has no NaN or Infinity (plan.json, ds_config.json)",
)

CHECKS_SKIPPED = Rule(
    id="TRC009",
    name="checks-skipped",
    summary=(
        "the checks that read an invalid key were skipped (their findings would be computed from a "
        "stand-in value); every other check ran"
    ),
    severity=Severity.info,
    source="trainc validate (every error whose inputs are known, in one run)",
)

#: the family: its id ranges and, explicitly, its rules
LOADING = Family(
    name="loading",
    ids=(range(0, 100),),
    about="the file, its YAML, the schema and the overrides",
    rules=(
        SPEC_UNREADABLE,
        TYPE_MISMATCH,
        UNKNOWN_KEY,
        MISSING_VALUE,
        UNKNOWN_CHOICE,
        BAD_OVERRIDE,
        VALUE_RANGE,
        UNQUOTED_STRING,
        NON_FINITE,
        CHECKS_SKIPPED,
    ),
)
