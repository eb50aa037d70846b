"""One record made from another by field name: the declaration's keys and order, values given by name."""

from __future__ import annotations

import dataclasses
import json
from typing import TypedDict

import pytest

from wattwise.copying import attributes, dataclass_of, typed_dict_of


class PointDict(TypedDict):
    y: float
    x: float
    label: str


@dataclasses.dataclass(frozen=True)
class Point:
    x: float
    y: float
    label: str
    kept: list[int] = dataclasses.field(default_factory=list)
    derived: float = dataclasses.field(init=False, default=0.0)


def test_a_typed_dict_has_its_own_keys_in_its_own_order_with_the_values_given_replacing() -> None:
    copied = typed_dict_of(PointDict, Point(1.0, 2.0, "a"), label="b")
    assert json.dumps(copied) == '{"y": 2.0, "x": 1.0, "label": "b"}'


def test_a_dataclass_takes_every_field_of_its_init_from_the_source_as_it_is() -> None:
    source = Point(1.0, 2.0, "a", kept=[1])
    copied = dataclass_of(Point, source, y=3.0)
    assert copied == Point(1.0, 3.0, "a", kept=[1]) and copied.kept is source.kept


def test_a_value_given_for_a_field_the_record_lacks_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="PointDict takes no field 'z'"):
        typed_dict_of(PointDict, Point(1.0, 2.0, "a"), z=1.0)
    with pytest.raises(TypeError, match="Point takes no field 'derived'"):
        dataclass_of(Point, Point(1.0, 2.0, "a"), derived=1.0)


def test_attributes_are_the_names_asked_for_in_their_order() -> None:
    assert attributes(Point(1.0, 2.0, "a"), "label", "x") == {"label": "a", "x": 1.0}
