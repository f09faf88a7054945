"""jsonschema with `format` asserted: each draft's own FORMAT_CHECKER, as a strict client checks.

date-time, uri, hostname, duration, ... need the checkers of jsonschema[format-nongpl].
"""

from __future__ import annotations

from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for


def format_validator(schema: dict) -> Validator:
    """A validator for schema's draft (2020-12 when it names none) that checks formats."""
    return checking_formats(validator_for(schema, default=Draft202012Validator), schema)


def checking_formats(cls: type[Validator], schema: dict) -> Validator:
    """cls (a draft's validator, or one extended from it) with that draft's format checker."""
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def validate_with_formats(instance, schema: dict) -> None:
    """jsonschema.validate, formats included: raises ValidationError naming the failure."""
    format_validator(schema).validate(instance)
