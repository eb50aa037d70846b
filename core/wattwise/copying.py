"""One record made from another by field name, so that no copy spells the fields out one by one.

A record's JSON object (a TypedDict) holds the record's own figures (a dataclass's), and a record is often
made from another that holds them under the same names (a database row, a part of a run's summary). The
copy follows the declaration of what it makes: `typed_dict_of` reads each key the TypedDict declares, in
its order (the order `json.dumps` writes them in), `dataclass_of` each field the dataclass takes; a value
given by name replaces the one read, for a field converted on the way or named otherwise on the source.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any, TypeVar, cast

D = TypeVar("D")
T = TypeVar("T")


def _copied(names: Collection[str], source: object, given: dict[str, Any], what: str) -> dict[str, Any]:
    """`names` in order, each `given`'s value else `source`'s attribute of that name."""
    unknown = sorted(set(given) - set(names))
    if unknown:
        raise TypeError(f"{what} takes no field {unknown[0]!r}")
    return {name: given[name] if name in given else getattr(source, name) for name in names}


def typed_dict_of(kind: type[D], source: object, /, **given: Any) -> D:
    """The TypedDict `kind`: each key it declares, in its order, from `source`'s attribute of that name.

    `given` replaces the value read for its keys (a `TypeError` for a key `kind` does not declare).
    """
    return cast(D, _copied(kind.__annotations__, source, given, kind.__name__))


def dataclass_of(cls: type[T], source: object, /, **given: Any) -> T:
    """The dataclass `cls`, each field it takes (in its `__init__`) from `source`'s attribute of that name.

    `given` replaces the value read for its fields (a `TypeError` for a field `cls` does not take).
    """
    names = [f.name for f in dataclasses.fields(cast(Any, cls)) if f.init]
    make = cast(Callable[..., T], cls)
    return make(**_copied(names, source, given, cls.__name__))


def attributes(source: object, *names: str) -> dict[str, Any]:
    """`source`'s attributes `names`, by name: the part of a record that another holds under the same names."""
    return {name: getattr(source, name) for name in names}
