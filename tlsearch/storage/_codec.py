"""Optuna objects <-> MongoDB documents: the schema of the `studies` and `trials` collections.

Documents stay readable: states and directions by name, params keyed by name, datetimes as BSON dates.
What BSON cannot say directly is escaped so every value Optuna accepts round-trips:
- field names: `%` `.` `$` and NUL become `%25` `%2E` `%24` `%00`, and the empty name becomes `%`
  (MongoDB reads `.` as a path and `$` as an operator);
- integers beyond 64 bits become `{"%int": "<digits>"}` (no escaped name starts with a bare `%`);
- BSON dates hold milliseconds, so the sub-millisecond part of a trial's datetimes (0-999 us) is kept in
  `usec`. NaN and +-inf are BSON doubles and need nothing.
Attribute values follow JSON's rules, like Optuna's RDB storage: tuples come back as lists, non-string
dict keys as strings, and anything JSON cannot encode raises TypeError.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

from optuna.distributions import BaseDistribution, distribution_to_json, json_to_distribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

from tlsearch._compat.optuna import FrozenStudy

# Every write to a trial adds 1 to its `version` (0 when inserted): a writer whose update finds the version
# it last wrote knows the whole document after its update without reading it back.
VERSION = "version"

# A trial's id says where it lives: study_id * TRIAL_ID_SPAN + number. Study ids are never reused and
# numbers are dense per study, so ids are unique for ever and new trials of a study can be looked up by id.
TRIAL_ID_SPAN = 10**9

_ESCAPES = {"%": "%25", ".": "%2E", "$": "%24", "\x00": "%00"}
_UNESCAPES = {code: char for char, code in _ESCAPES.items()}
_ESCAPED = re.compile("%(?:25|2E|24|00)")
_EMPTY_NAME = "%"
_BIG_INT = "%int"
_INT64 = range(-(2**63), 2**63)


def trial_id_of(study_id: int, number: int) -> int:
    if not 0 <= number < TRIAL_ID_SPAN:
        raise ValueError(f"trial number {number} is out of range (a study holds at most {TRIAL_ID_SPAN:,} trials)")
    return study_id * TRIAL_ID_SPAN + number


def study_id_and_number(trial_id: int) -> tuple[int, int]:
    study_id, number = divmod(int(trial_id), TRIAL_ID_SPAN)
    return study_id, number


# Field names and JSON values


def encode_name(name: str) -> str:
    """A field name for `name` that MongoDB stores as given (see the module docstring)."""
    if not name:
        return _EMPTY_NAME
    if "%" in name or "." in name or "$" in name or "\x00" in name:
        return "".join(_ESCAPES.get(char, char) for char in name)
    return name


def decode_name(field: str) -> str:
    if field == _EMPTY_NAME:
        return ""
    if "%" not in field:
        return field
    return _ESCAPED.sub(lambda match: _UNESCAPES[match.group()], field)


def encode_value(value: Any) -> Any:
    """A JSON-serializable value as BSON, escaping what BSON cannot hold (see the module docstring)."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value) if value in _INT64 else {_BIG_INT: str(int(value))}
    if isinstance(value, float):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [encode_value(item) for item in value]
    if isinstance(value, Mapping):
        return {encode_name(_json_key(key)): encode_value(item) for key, item in value.items()}
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and _BIG_INT in value:
            return int(value[_BIG_INT])
        return {decode_name(key): decode_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [decode_value(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return int(value)  # bson.Int64 -> int
    return value


def encode_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    return {encode_name(key): encode_value(value) for key, value in attrs.items()}


def decode_attrs(fields: Mapping[str, Any]) -> dict[str, Any]:
    return {decode_name(key): decode_value(value) for key, value in fields.items()}


def _json_key(key: Any) -> str:
    # The same conversions json.dumps applies to dict keys.
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return str(int(key))
    if isinstance(key, float):
        return json.dumps(float(key))
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


# Distributions and params


def encode_distribution(distribution: BaseDistribution) -> dict[str, Any]:
    """Optuna's own JSON form of a distribution, as a document: {"name": ..., "attributes": {...}}."""
    return json.loads(_distribution_json(distribution))


def decode_distribution(document: Mapping[str, Any]) -> BaseDistribution:
    try:
        key = _frozen(document)
    except TypeError:  # not hashable as frozen: decode without the memo
        return json_to_distribution(json.dumps(document))
    distribution = _DECODED.get(key)
    if distribution is None:
        if len(_DECODED) >= _MEMO_SIZE:
            _DECODED.clear()
        distribution = _DECODED[key] = json_to_distribution(json.dumps(document))
    return distribution


# Studies reuse a handful of distributions, and converting one costs more than a round of JSON: memoize.
# Distributions are immutable, so sharing one decoded object between trials is safe.
_MEMO_SIZE = 4096
_DECODED: dict[Any, BaseDistribution] = {}


@functools.lru_cache(maxsize=_MEMO_SIZE)
def _distribution_json(distribution: BaseDistribution) -> str:
    return distribution_to_json(distribution)


def _frozen(value: Any) -> Any:
    """A hashable, type-preserving stand-in for a JSON-like value (1, 1.0 and True stay apart)."""
    if isinstance(value, Mapping):
        return tuple((key, _frozen(item)) for key, item in value.items())
    if isinstance(value, list):
        return ("[", *(_frozen(item) for item in value))
    if isinstance(value, float) and value != value:
        return (float, "nan")
    return (type(value), value)


def encode_param(value_internal: float, distribution: BaseDistribution) -> dict[str, Any]:
    return {
        "value": distribution.to_external_repr(value_internal),
        "internal": float(value_internal),
        "distribution": encode_distribution(distribution),
    }


# Datetimes: stored as UTC BSON dates, returned as naive local time like Optuna's RDB and journal storages.


def encode_datetime(moment: datetime) -> tuple[datetime, int]:
    """The BSON date (UTC, milliseconds) and the microseconds below the millisecond.

    A naive datetime is local time, as in Optuna."""
    utc = moment.astimezone(timezone.utc)
    return utc.replace(microsecond=utc.microsecond // 1000 * 1000), utc.microsecond % 1000


def decode_datetime(date: datetime | None, usec: int = 0) -> datetime | None:
    if date is None:
        return None
    if date.tzinfo is None:  # a client without tz_aware decoding: BSON dates are UTC
        date = date.replace(tzinfo=timezone.utc)
    return (date + timedelta(microseconds=usec)).astimezone().replace(tzinfo=None)


def datetime_fields(name: str, moment: datetime | None) -> dict[str, Any]:
    """`$set`-style fields storing `moment` under `name` (and its microseconds under `usec.<name>`)."""
    if moment is None:
        return {name: None, f"usec.{name}": 0}
    date, usec = encode_datetime(moment)
    return {name: date, f"usec.{name}": usec}


def apply_set(document: dict[str, Any], fields: Mapping[str, Any]) -> dict[str, Any]:
    """`document` after a `$set` of `fields` (top-level names or one-level paths), as the server applies it."""
    result = dict(document)
    for path, value in fields.items():
        head, dot, tail = path.partition(".")
        if dot:
            result[head] = {**result.get(head, {}), tail: value}
        else:
            result[head] = value
    return result


# Studies


def study_document(study_id: int, name: str, directions: list[StudyDirection], created_by: str) -> dict[str, Any]:
    return {
        "_id": study_id,
        "name": name,
        "directions": [direction.name for direction in directions],
        "user_attrs": {},
        "system_attrs": {},
        "param_distributions": {},
        "created_by": created_by,
    }


def decode_directions(document: Mapping[str, Any]) -> list[StudyDirection]:
    return [StudyDirection[name] for name in document["directions"]]


def decode_study(document: Mapping[str, Any]) -> FrozenStudy:
    return FrozenStudy(
        study_name=document["name"],
        direction=None,
        directions=decode_directions(document),
        user_attrs=decode_attrs(document.get("user_attrs", {})),
        system_attrs=decode_attrs(document.get("system_attrs", {})),
        study_id=int(document["_id"]),
    )


# Trials


def trial_document(
    study_id: int, number: int, template: FrozenTrial | None, now: datetime, created_by: str
) -> dict[str, Any]:
    """The document of a new trial: RUNNING and started `now`, or a copy of `template` (its number aside)."""
    document: dict[str, Any] = {"_id": trial_id_of(study_id, number), "study_id": study_id, "number": number}
    if template is None:
        start, start_usec = encode_datetime(now)
        document.update(
            state=TrialState.RUNNING.name,
            values=None,
            datetime_start=start,
            datetime_complete=None,
            params={},
            intermediate_values={},
            user_attrs={},
            system_attrs={},
            usec={"datetime_start": start_usec, "datetime_complete": 0},
        )
    else:
        start_fields = datetime_fields("datetime_start", template.datetime_start)
        complete_fields = datetime_fields("datetime_complete", template.datetime_complete)
        values = template.values
        document.update(
            state=template.state.name,
            values=None if values is None else [float(value) for value in values],
            datetime_start=start_fields["datetime_start"],
            datetime_complete=complete_fields["datetime_complete"],
            params={
                encode_name(name): encode_param(
                    template.distributions[name].to_internal_repr(value), template.distributions[name]
                )
                for name, value in template.params.items()
            },
            intermediate_values={str(int(step)): float(value) for step, value in template.intermediate_values.items()},
            user_attrs=encode_attrs(template.user_attrs),
            system_attrs=encode_attrs(template.system_attrs),
            usec={
                "datetime_start": start_fields["usec.datetime_start"],
                "datetime_complete": complete_fields["usec.datetime_complete"],
            },
        )
    document[VERSION] = 0
    document["created_by"] = created_by
    return document


def decode_trial(document: Mapping[str, Any]) -> FrozenTrial:
    params: dict[str, Any] = {}
    distributions: dict[str, BaseDistribution] = {}
    for field, param in document.get("params", {}).items():
        name = decode_name(field)
        distribution = decode_distribution(param["distribution"])
        distributions[name] = distribution
        params[name] = distribution.to_external_repr(param["internal"])
    usec = document.get("usec") or {}
    values = document.get("values")
    return FrozenTrial(
        number=int(document["number"]),
        state=TrialState[document["state"]],
        value=None,
        values=None if values is None else [float(value) for value in values],
        datetime_start=decode_datetime(document.get("datetime_start"), usec.get("datetime_start", 0)),
        datetime_complete=decode_datetime(document.get("datetime_complete"), usec.get("datetime_complete", 0)),
        params=params,
        distributions=distributions,
        user_attrs=decode_attrs(document.get("user_attrs", {})),
        system_attrs=decode_attrs(document.get("system_attrs", {})),
        intermediate_values={
            int(step): float(value) for step, value in document.get("intermediate_values", {}).items()
        },
        trial_id=int(document["_id"]),
    )
