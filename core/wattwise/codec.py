"""The one JSON codec: each field of a record or a wire's body defined once, written, validated, read back.

It is the one reader wattwise's JSON goes through: the run's record, the per-process end records of the
measurement path (`wattwise.run.agreement`), the frontier and plan files (`wattwise.pipeline.files`), the
node agent's wire and its records. The run history's rows (`wattwise.store.history`, whose messages give
`wattwise.bounds`' ranges) and the settings journal (lenient on purpose) keep their own checks, built on its
number tests. It is a leaf (it imports only `wattwise.errors` and the pure `wattwise.carbon.series`),
so any layer may use it, the measurement path and the store included, which may not import the record. A
format whose messages are its own keeps them through `JsonObject.refuse` and `refuse_as`, with the file and
the fix left to the caller where it names them; `is_number` and `is_whole` are the one check that JSON's
true is not a number.

A record is a frozen dataclass whose fields carry their JSON definition, `field(metadata=as_json(codec))`.
The codec says how the value is written to JSON and how the JSON is validated and read back; the
definition also says whether the key is required and what a missing key reads as. `to_json_dict` and
`from_json` follow from these definitions alone, in the fields' order, so adding a field to a record is
one line.

    @dataclass(frozen=True)
    class EpochEnergy:
        epoch: int = field(metadata=as_json(Whole(), if_missing=AT_INDEX))
        time_s: float = field(metadata=as_json(Number(), required=True))

Reading validates what the writer guarantees (types, finite numbers, bounds) and turns anything else into
a one-line `UsageError` naming the file, the field (`power_limit.profile[0].time_s`) and the fix. Keys it
does not know are ignored, so a record may grow.

A wire's body, a TypedDict (the node agent's requests, `wattwise.agent.http`), is read the same way once
`define_foreign` defines its keys: `from_json` returns the dict, and its `JsonObject` ends each error with
what the client should send instead (`fix`) rather than a damaged file's remedy.

Why not pydantic, msgspec or cattrs (measured 2026-12-02 on the 2-core development machine): none is a
dependency of wattwise, and pydantic 2.14, the one at hand, adds 9.6 MB of compiled code and 0.21-0.31 CPU s
of import to every run's start (this module costs 0.09 s, its imports included). Each would still need the
code that is most of these lines: a validator per codec to keep every message word for word, a record's
position as a default, keys written only for some records or nested under a dotted key, and a definition for
dataclasses of other modules; so a library would add a dependency without making this shorter.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import MISSING
from datetime import datetime, timezone
from enum import StrEnum
from typing import Any, NoReturn, TypeGuard, TypeVar, cast

from wattwise.carbon.series import parse_timestamp_s
from wattwise.errors import UsageError

T = TypeVar("T")
#: A value a JSON document holds.
JsonValue = None | bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"]

#: The largest magnitude any figure of a run may have (1e15 J is 278 GWh, 1e15 s 30 million years): more
#: is a damaged file, and would overflow the sums a report makes.
MAX_FIGURE = 1e15
#: What every error of a damaged run record tells the user to do.
FIX = "the run directory is damaged: re-run the job, or restore the file"
#: `if_missing=AT_INDEX`: a missing key reads as the record's position in its list.
AT_INDEX = object()
#: `if_missing` left unset: a missing key reads as the field's default.
_FIELD_DEFAULT = object()
_META = "wattwise.json"


def iso_utc(t_s: float) -> str:
    """A unix time as a run record holds it: ISO 8601 in UTC."""
    return datetime.fromtimestamp(t_s, tz=timezone.utc).isoformat()


def show(value: Any) -> str:
    """`value` as an error message quotes it: its repr, cut to 40 characters."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether a JSON value is a finite number: an int or a finite float, never a bool (JSON's true is not 1)."""
    # An int is finite, however large (math.isfinite would overflow on 10**400).
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and (isinstance(value, int) or math.isfinite(value))
    )


def is_whole(value: object) -> TypeGuard[int]:
    """Whether a JSON value is a whole number: an int, never a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


# -- codecs: how one value is written and read ----------------------------------------------------------
class Codec:
    """How one field's value is written to JSON (`dump`) and validated and read back (`load`).

    `dump` is given a value that is not None (None is written as null); `load` returns None when the key
    is absent or null.
    """

    def dump(self, value: Any) -> Any:
        """The JSON form of `value`."""
        return value

    def load(self, f: JsonObject, key: str) -> Any:
        """The value of `key` in `f`, validated; None when absent or null."""
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Text(Codec):
    """A string."""

    def load(self, f: JsonObject, key: str) -> str | None:
        """The string at `key` (`JsonObject.opt_text`)."""
        return f.opt_text(key)


@dataclasses.dataclass(frozen=True)
class Word(Codec):
    """One word of a closed set (a `wattwise.vocabulary` StrEnum), read back as its member."""

    kind: type[StrEnum]

    def load(self, f: JsonObject, key: str) -> StrEnum | None:
        """The member named by the string at `key`; a word outside the set is refused, naming the set."""
        text = f.opt_text(key)
        if text is None:
            return None
        try:
            return self.kind(text)
        except ValueError:
            f.refuse(key, f"one of {', '.join(self.kind)}", text)


@dataclasses.dataclass(frozen=True)
class Number(Codec):
    """A finite number of at most `MAX_FIGURE` in size, at least `minimum` (None: no lower bound)."""

    minimum: float | None = 0.0

    def load(self, f: JsonObject, key: str) -> float | None:
        """The number at `key`, finite, within `MAX_FIGURE` and at least `minimum` (`JsonObject.opt_number`)."""
        return f.opt_number(key, minimum=self.minimum)


@dataclasses.dataclass(frozen=True)
class Whole(Codec):
    """A whole number, at least `minimum`."""

    minimum: int = 0

    def load(self, f: JsonObject, key: str) -> int | None:
        """The whole number at `key`, at least `minimum` (`JsonObject.opt_int`)."""
        return f.opt_int(key, minimum=self.minimum)


@dataclasses.dataclass(frozen=True)
class Flag(Codec):
    """true or false."""

    def load(self, f: JsonObject, key: str) -> bool | None:
        """The boolean at `key`: a 0 or a "true" is refused, not read as false or true."""
        return f.opt_bool(key)


@dataclasses.dataclass(frozen=True)
class Timestamp(Codec):
    """An ISO 8601 time with a timezone, kept as the text it is."""

    def load(self, f: JsonObject, key: str) -> str | None:
        """The time at `key` as written, once it parses as ISO 8601 with a timezone."""
        return None if f.raw.get(key) is None else f.timestamp(key)[0]


@dataclasses.dataclass(frozen=True)
class UnixTime(Codec):
    """Unix seconds, written as an ISO 8601 time in UTC."""

    def dump(self, value: Any) -> Any:
        """The unix time `value` (s) as ISO 8601 in UTC (`iso_utc`)."""
        return iso_utc(value)

    def load(self, f: JsonObject, key: str) -> float | None:
        """The unix time (s) of the ISO 8601 time at `key`, whatever its timezone."""
        return None if f.raw.get(key) is None else f.timestamp(key)[1]


@dataclasses.dataclass(frozen=True)
class Scalar(Codec):
    """A JSON scalar: a finite number, a string, true, false or null."""

    def load(self, f: JsonObject, key: str) -> bool | int | float | str | None:
        """The scalar at `key` (`JsonObject.scalar`); a list, an object or a non-finite number is refused."""
        return f.scalar(key)


@dataclasses.dataclass(frozen=True)
class Texts(Codec):
    """A list of strings, kept as a tuple."""

    def dump(self, value: Any) -> Any:
        """The strings of `value` as a JSON list."""
        return list(value)

    def load(self, f: JsonObject, key: str) -> tuple[str, ...] | None:
        """The strings of the list at `key`, as a tuple; an item that is not a string is refused, naming its index."""
        return f.strings(key) if f.raw.get(key) is not None else None


@dataclasses.dataclass(frozen=True)
class Numbers(Codec):
    """A list of finite numbers, kept as a tuple of floats."""

    def dump(self, value: Any) -> Any:
        """The numbers of `value` as a JSON list."""
        return list(value)

    def load(self, f: JsonObject, key: str) -> tuple[float, ...] | None:
        """The numbers of the list at `key`, as a tuple of floats; an item that is not a finite number is refused."""
        return tuple(f.numbers(key)) if f.raw.get(key) is not None else None


@dataclasses.dataclass(frozen=True)
class NumberMap(Codec):
    """An object of finite numbers >= 0 by name (e.g. joules by device)."""

    def dump(self, value: Any) -> Any:
        """The mapping `value` as a JSON object."""
        return dict(value)

    def load(self, f: JsonObject, key: str) -> dict[str, float] | None:
        """The object at `key` as a dict of floats; an entry that is not a finite number >= 0 is refused."""
        return f.number_map(key) if f.raw.get(key) is not None else None


@dataclasses.dataclass(frozen=True)
class OpenObjects(Codec):
    """A list of objects whose keys are open-ended (e.g. each device as its backend describes it)."""

    def dump(self, value: Any) -> Any:
        """Each mapping of `value` as a JSON object, in a list."""
        return [dict(d) for d in value]

    def load(self, f: JsonObject, key: str) -> tuple[Mapping[str, Any], ...] | None:
        """The objects of the list at `key` as they are, as a tuple: each must be an object, its keys are open."""
        return tuple(d.raw for d in f.objects(key)) if f.raw.get(key) is not None else None


@dataclasses.dataclass(frozen=True)
class Record(Codec):
    """One nested record of type `of`."""

    of: type

    def dump(self, value: Any) -> Any:
        """The nested record `value` as its JSON object (`to_json_dict`)."""
        return to_json_dict(value)

    def load(self, f: JsonObject, key: str) -> Any:
        """The record of type `of` read from the object at `key`, each of its fields validated (`from_json`)."""
        nested = f.opt_object(key)
        return None if nested is None else from_json(self.of, nested)


@dataclasses.dataclass(frozen=True)
class Records(Codec):
    """A list of records of type `of`, kept as a tuple."""

    of: type

    def dump(self, value: Any) -> Any:
        """Each record of `value` as its JSON object, in a list."""
        return [to_json_dict(v) for v in value]

    def load(self, f: JsonObject, key: str) -> tuple[Any, ...] | None:
        """The records of type `of` read from the list at `key`, each given its position (for `AT_INDEX`)."""
        if f.raw.get(key) is None:
            return None
        return tuple(from_json(self.of, item, index=i) for i, item in enumerate(f.objects(key)))


@dataclasses.dataclass(frozen=True)
class RecordMap(Codec):
    """An object of records of type `of` by name; a null entry is left out."""

    of: type

    def dump(self, value: Any) -> Any:
        """Each record of the mapping `value` as its JSON object, under its name."""
        return {name: to_json_dict(v) for name, v in value.items()}

    def load(self, f: JsonObject, key: str) -> dict[str, object] | None:
        """The records of type `of` read from the object at `key`, by name; a null entry is left out."""
        nested = f.opt_object(key)
        if nested is None:
            return None
        entries = ((str(name), nested.opt_object(name)) for name in nested.raw)
        return {name: from_json(self.of, entry) for name, entry in entries if entry is not None}


# -- fields -----------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class FieldSpec:
    """One field of a record as JSON holds it.

    Attributes:
        codec: How the value is written and read.
        key: Its key; a dotted key (`reused_from.run_id`) is a key of a nested object.
        required: Reading fails, naming the key, when it is absent or null.
        if_missing: What an absent or null key reads as (`AT_INDEX`: the record's position in its list);
            by default the field's default, else None.
        written: Whether the record writes the key (by default always).
    """

    codec: Codec
    key: str | None = None
    required: bool = False
    if_missing: Any = _FIELD_DEFAULT
    written: Callable[[Any], bool] | None = None


def as_json(
    codec: Codec,
    *,
    key: str | None = None,
    required: bool = False,
    if_missing: Any = _FIELD_DEFAULT,
    written: Callable[[Any], bool] | None = None,
) -> dict[str, FieldSpec]:
    """A dataclass field's JSON definition, as its metadata: `field(default=None, metadata=as_json(Text()))`.

    Args:
        codec: How the value is written and read.
        key: The JSON key when it is not the field's name.
        required: The key must be present (not null) when read.
        if_missing: What an absent key reads as, when not the field's default.
        written: Whether the record writes the key (a function of the record).

    Returns:
        The metadata to give `dataclasses.field`.
    """
    return {_META: FieldSpec(codec, key, required, if_missing, written)}


#: The JSON definitions of records defined elsewhere, which cannot carry `json_field`s themselves.
_FOREIGN: dict[type, dict[str, FieldSpec]] = {}
#: A field as `_specs` lists it: its name, and its default (`MISSING` when it has none), or the factory of it.
_Field = tuple[str, Any, Any]


def define_foreign(cls: type, **specs: FieldSpec) -> None:
    """Give `cls`, defined in another module, a JSON definition: one `FieldSpec` per field.

    `cls` is a dataclass, or a TypedDict (a wire's body): `from_json` then reads the dict of that shape,
    its keys in the order given here, and every key of the TypedDict must be defined (a key the codec
    left out would be missing from what it reads). A TypedDict has no defaults: a key that may be absent
    says what it reads as with `if_missing`.

    Raises:
        TypeError: `cls` is a TypedDict whose keys are not those defined.
    """
    if not dataclasses.is_dataclass(cls) and set(specs) != set(getattr(cls, "__annotations__", ())):
        raise TypeError(f"{cls.__name__}: define every key of the TypedDict, and no other (defined: {sorted(specs)})")
    _FOREIGN[cls] = specs


def _specs(cls: type) -> list[tuple[_Field, FieldSpec]]:
    foreign = _FOREIGN.get(cls)
    if foreign is not None and not dataclasses.is_dataclass(cls):  # a TypedDict: its keys as defined
        return [((name, MISSING, MISSING), spec) for name, spec in foreign.items()]
    out = []
    for f in dataclasses.fields(cls):
        spec = foreign.get(f.name) if foreign is not None else f.metadata.get(_META)
        if spec is not None:
            out.append(((f.name, f.default, f.default_factory), spec))
    return out


def to_json_dict(record: object) -> dict[str, JsonValue]:
    """The JSON object of `record`: each defined field it writes, in the fields' order, under its key.

    A record may add keys derived from its fields: its method `json_derived()` maps a field's name to the
    (key, value) written after that field.
    """
    out: dict[str, JsonValue] = {}
    derived: Mapping[str, tuple[str, JsonValue]] = getattr(record, "json_derived", dict)()
    for (name, _, _), spec in _specs(type(record)):
        if spec.written is None or spec.written(record):
            value = getattr(record, name)
            *parents, last = (spec.key or name).split(".")
            node = out
            for part in parents:
                node = cast(dict[str, JsonValue], node.setdefault(part, {}))  # made here: an object
            node[last] = None if value is None else spec.codec.dump(value)
        if name in derived:
            key, value = derived[name]
            out[key] = value
    return out


def from_json(cls: type[T], f: JsonObject, *, index: int | None = None) -> T:
    """The record `cls` read from `f`, every field validated (see `FieldSpec`).

    Args:
        cls: The record's dataclass, or a TypedDict given a definition (`define_foreign`).
        f: Its JSON object.
        index: Its position in a list, for a field read `AT_INDEX`.

    Returns:
        The record (for a TypedDict: the dict, every key it defines present).

    Raises:
        UsageError: A field is missing or not what its codec accepts (the message names it).
    """
    values: dict[str, object] = {}
    for field, spec in _specs(cls):
        name = field[0]
        *parents, last = (spec.key or name).split(".")
        node: JsonObject | None = f
        for part in parents:
            node = node.opt_object(part) if node is not None else None
        value = spec.codec.load(node, last) if node is not None else None
        if value is None:
            if spec.required:
                (node or f).missing(last)
            value = _missing(field, spec, index)
        values[name] = value
    return cls(**values)


def _missing(field: _Field, spec: FieldSpec, index: int | None) -> Any:
    _, default, default_factory = field
    if spec.if_missing is AT_INDEX:
        return index
    if spec.if_missing is not _FIELD_DEFAULT:
        return spec.if_missing
    if default is not MISSING:
        return default
    if default_factory is not MISSING:
        return default_factory()
    return None


# -- reading one JSON object ------------------------------------------------------------------------------
class JsonObject:
    """Typed access to one JSON object of a record; every error names the file and the field.

    Args:
        raw: The object as `json.loads` gave it.
        where: The file, which starts every error message; empty: the caller names it (a message then
            starts with the field).
        prefix: The object's path in the file (`power_limit.`), which starts every field's name.
        fix: What every error message ends with, telling the user what to do: by default a run record's
            (`FIX`); a wire's reader says what to send instead (a request body is the client's, not a file);
            empty: the caller says it.
    """

    def __init__(self, raw: Mapping[str, Any], where: str, prefix: str = "", *, fix: str = FIX) -> None:
        self.raw, self.where, self.prefix, self.fix = raw, where, prefix, fix

    def _say(self, what: str) -> NoReturn:
        where, fix = (f"{self.where}: " if self.where else ""), (f"; {self.fix}" if self.fix else "")
        raise UsageError(f"{where}{what}{fix}")

    def _fail(self, key: str, expected: str, value: Any) -> NoReturn:
        self._say(f"{self.prefix}{key} must be {expected} (got {show(value)})")

    def refuse(self, key: str, expected: str, value: Any) -> NoReturn:
        """Raise the `UsageError` of `key` holding `value` where it must hold what `expected` says."""
        self._fail(key, expected, value)

    def refuse_as(self, key: str, words: str) -> NoReturn:
        """Raise the `UsageError` of `key` in a reader's own words (`must map device labels to numbers`).

        For a value whose shape no codec spells (a list of `[time, device, setting, value]`), so the
        message says what it must be as its format does; the file and the fix stay the reader's.
        """
        self._say(f"{self.prefix}{key} {words}")

    def missing(self, key: str) -> NoReturn:
        """Raise the `UsageError` of a required `key` that is absent or null."""
        self._say(f"key {self.prefix + key!r} is missing")

    def _required(self, key: str) -> Any:
        value = self.raw.get(key)
        if value is None:
            self.missing(key)
        return value

    def number(self, key: str, *, minimum: float | None = 0.0) -> float:
        """The number at a required `key`.

        Args:
            key: The field.
            minimum: The least it may be; None: no lower bound.

        Returns:
            The number as a float: finite, at most `MAX_FIGURE` in size, at least `minimum`.

        Raises:
            UsageError: It is absent, null, not such a number (a bool is not one), naming the field.
        """
        value = self._required(key)
        if not is_number(value) or (minimum is not None and value < minimum):
            self._fail(key, "a finite number" + (f" >= {minimum:g}" if minimum is not None else ""), value)
        if abs(value) > MAX_FIGURE:
            self._fail(key, f"at most {MAX_FIGURE:g} in size", value)
        return float(value)

    def opt_number(self, key: str, *, minimum: float | None = 0.0) -> float | None:
        """`number` for a key that may be absent or null (then None)."""
        return None if self.raw.get(key) is None else self.number(key, minimum=minimum)

    def opt_int(self, key: str, *, minimum: int = 0) -> int | None:
        """The whole number at `key`, at least `minimum` and at most `MAX_FIGURE`; None when absent or null.

        Raises:
            UsageError: It is not such a number (a bool or a float is not one), naming the field.
        """
        value = self.raw.get(key)
        if value is None:
            return None
        if not is_whole(value) or value < minimum:
            self._fail(key, f"a whole number >= {minimum}", value)
        if value > MAX_FIGURE:
            self._fail(key, f"at most {MAX_FIGURE:g}", value)
        return value

    def text(self, key: str) -> str:
        """The string at a required `key`; a `UsageError` naming the field when absent, null or not a string."""
        value = self._required(key)
        if not isinstance(value, str):
            self._fail(key, "a string", value)
        return value

    def opt_text(self, key: str) -> str | None:
        """`text` for a key that may be absent or null (then None)."""
        return None if self.raw.get(key) is None else self.text(key)

    def opt_bool(self, key: str) -> bool | None:
        """The boolean at `key`, None when absent or null; a `UsageError` naming the field when not a boolean."""
        value = self.raw.get(key)
        if value is not None and not isinstance(value, bool):
            self._fail(key, "true or false", value)
        return value

    def scalar(self, key: str) -> bool | int | float | str | None:
        """The scalar at `key`: a finite number, a string, a boolean or None (absent or null).

        Raises:
            UsageError: It is a list, an object or a non-finite number, naming the field.
        """
        value = self.raw.get(key)
        if (isinstance(value, float) and not math.isfinite(value)) or isinstance(value, list | Mapping):
            self._fail(key, "a finite number, a string, true, false or null", value)
        return value

    def timestamp(self, key: str) -> tuple[str, float]:
        """The time at a required `key`: (its text, its unix time in s).

        Raises:
            UsageError: It is absent, not a string, or not ISO 8601 with a timezone, naming the field.
        """
        text = self.text(key)
        return text, parse_timestamp_s(text, where=f"{self.where}: {self.prefix}{key}")

    def opt_object(self, key: str) -> JsonObject | None:
        """The object at `key`, whose errors name its fields under `key.`; None when absent or null.

        Raises:
            UsageError: It is not an object, naming the field.
        """
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            self._fail(key, "an object", value)
        return JsonObject(value, self.where, f"{self.prefix}{key}.", fix=self.fix)

    def _list(self, key: str) -> list[Any]:
        value = self.raw.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            self._fail(key, "a list", value)
        return value

    def objects(self, key: str) -> list[JsonObject]:
        """The objects of the list at `key`, each naming its fields under `key[i].`; empty when absent or null.

        Raises:
            UsageError: It is not a list, or an item is not an object, naming the field or the item.
        """
        items = []
        for i, value in enumerate(self._list(key)):
            if not isinstance(value, Mapping):
                self._fail(f"{key}[{i}]", "an object", value)
            items.append(JsonObject(value, self.where, f"{self.prefix}{key}[{i}].", fix=self.fix))
        return items

    def numbers(self, key: str) -> list[float]:
        """The numbers of the list at `key` as floats; empty when absent or null.

        Raises:
            UsageError: It is not a list, or an item is not a finite number within `MAX_FIGURE`, naming the item.
        """
        values = self._list(key)
        for i, value in enumerate(values):
            if not is_number(value) or abs(value) > MAX_FIGURE:
                self._fail(f"{key}[{i}]", f"a finite number of at most {MAX_FIGURE:g} in size", value)
        return [float(v) for v in values]

    def strings(self, key: str) -> tuple[str, ...]:
        """The strings of the list at `key`; empty when absent or null.

        Raises:
            UsageError: It is not a list, or an item is not a string, naming the item.
        """
        values = self._list(key)
        for i, value in enumerate(values):
            if not isinstance(value, str):
                self._fail(f"{key}[{i}]", "a string", value)
        return tuple(values)

    def number_map(self, key: str) -> dict[str, float]:
        """The object at `key` as a dict of finite numbers >= 0 by name; empty when absent or null.

        Raises:
            UsageError: It is not an object, or an entry is not such a number, naming the entry.
        """
        nested = self.opt_object(key)
        return {} if nested is None else {k: nested.number(k) for k in nested.raw}
