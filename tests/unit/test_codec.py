"""The JSON codec: a wire's body, a TypedDict, is read key by key once defined, and every error ends with the
reader's fix (a run record's by default).

The records of the run (`summary.json`'s fields, read and written by the codec) are tested in
tests/unit/record/test_summary_fields.py.
"""

from __future__ import annotations

import dataclasses
from typing import TypedDict

import pytest

from wattwise.codec import FIX, FieldSpec, JsonObject, Record, Text, Whole, as_json, define_foreign, from_json
from wattwise.errors import UsageError


@dataclasses.dataclass(frozen=True)
class _Inner:
    k: str | None = dataclasses.field(default=None, metadata=as_json(Text()))


class _Body(TypedDict):
    """A wire's body, as a TypedDict: read by the codec once `define_foreign` defines its keys."""

    name: str
    count: int
    inner: _Inner | None


define_foreign(
    _Body,
    name=FieldSpec(Text(), if_missing=""),
    count=FieldSpec(Whole(minimum=1), required=True),
    inner=FieldSpec(Record(_Inner)),
)


def test_a_typed_dict_is_read_key_by_key_and_its_errors_end_with_the_wires_fix() -> None:
    def read(raw: dict[str, object]) -> _Body:
        return from_json(_Body, JsonObject(raw, "request body", fix="send {count: N}"))

    assert read({"count": 3, "other": 1}) == {"name": "", "count": 3, "inner": None}  # an unknown key ignored
    assert read({"name": "a", "count": 1, "inner": {"k": "v"}}) == {"name": "a", "count": 1, "inner": _Inner("v")}
    with pytest.raises(
        UsageError, match=r"^request body: count must be a whole number >= 1 \(got 0\); send \{count: N\}$"
    ):
        read({"count": 0})
    with pytest.raises(UsageError, match=r"^request body: key 'count' is missing; send \{count: N\}$"):
        read({"count": None})
    with pytest.raises(UsageError, match=r"^request body: inner\.k must be a string \(got 1\); send \{count: N\}$"):
        read({"count": 1, "inner": {"k": 1}})  # a nested object keeps the fix


def test_a_typed_dict_must_define_every_key_and_no_other() -> None:
    with pytest.raises(TypeError, match="define every key of the TypedDict"):
        define_foreign(_Body, name=FieldSpec(Text()), count=FieldSpec(Whole()))
    extra = {"inner": FieldSpec(Record(_Inner)), "x": FieldSpec(Text())}
    with pytest.raises(TypeError, match="define every key of the TypedDict"):
        define_foreign(_Body, name=FieldSpec(Text()), count=FieldSpec(Whole()), **extra)
    assert JsonObject({}, "f.json").fix == FIX  # a file's reader keeps the run record's fix
