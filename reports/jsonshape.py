"""A small structural checker for parsed JSON: required and optional fields and their JSON types,
so a reader rejects a malformed file with one message naming the field, instead of raising
AttributeError or TypeError deep inside the code that uses it."""
from __future__ import annotations

from dataclasses import dataclass, field

# How a message names the JSON type of a parsed value (bool before int: True is an int).
_TYPE_NAMES = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
               (list, "an array"), (dict, "an object"), (type(None), "null"))
_KIND_NAMES = {"string": "a string", "integer": "an integer", "number": "a number",
               "boolean": "a boolean", "null": "null"}


class ShapeMismatch(Exception):
    """A parsed document whose field `path` does not have the shape the reader needs."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"`{path}` {problem}" if path else problem)
        self.path, self.problem = path, problem

    def about(self, whole: str) -> str:
        """The message, naming `whole` (say "the evidence record") when the document itself is
        at fault rather than one of its fields."""
        return str(self) if self.path else f"{whole} {self.problem}"


def json_type(value) -> str:
    """'an object', 'a string', ... : the JSON type of a parsed value, for messages."""
    for t, name in _TYPE_NAMES:
        if isinstance(value, t):
            return name
    return type(value).__name__


def _join(path: str, key) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else str(key)


class Shape:
    def check(self, value, path: str = "") -> None:
        raise NotImplementedError

    def expected(self) -> str:
        raise NotImplementedError


@dataclass
class Scalar(Shape):
    """One of the JSON scalar kinds; `strings`, when given, are the only strings allowed."""
    kinds: tuple[str, ...]
    strings: tuple[str, ...] | None = None

    def _is(self, kind: str, v) -> bool:
        if kind == "string":
            return isinstance(v, str)
        if kind == "integer":
            return isinstance(v, int) and not isinstance(v, bool)
        if kind == "number":
            return isinstance(v, (int, float)) and not isinstance(v, bool)
        if kind == "boolean":
            return isinstance(v, bool)
        return v is None

    def check(self, value, path: str = "") -> None:
        if not any(self._is(k, value) for k in self.kinds):
            raise ShapeMismatch(path, f"is {json_type(value)}, expected {self.expected()}")
        if isinstance(value, str) and self.strings is not None and value not in self.strings:
            raise ShapeMismatch(path, f"is {value[:60]!r}, expected {self.expected()}")

    def expected(self) -> str:
        names = []
        for k in self.kinds:
            if k == "string" and self.strings is not None:
                names.append("one of " + ", ".join(map(repr, self.strings)))
            else:
                names.append(_KIND_NAMES[k])
        return " or ".join(names)


@dataclass
class Arr(Shape):
    items: Shape

    def check(self, value, path: str = "") -> None:
        if not isinstance(value, list):
            raise ShapeMismatch(path, f"is {json_type(value)}, expected an array")
        for i, v in enumerate(value):
            self.items.check(v, _join(path, i))

    def expected(self) -> str:
        return "an array"


@dataclass
class Obj(Shape):
    """An object: `required` fields must be present, `optional` ones are checked when present,
    and `values` (for maps keyed by names) checks every value not listed in either."""
    required: dict[str, Shape] = field(default_factory=dict)
    optional: dict[str, Shape] = field(default_factory=dict)
    values: Shape | None = None

    def check(self, value, path: str = "") -> None:
        if not isinstance(value, dict):
            raise ShapeMismatch(path, f"is {json_type(value)}, expected an object")
        missing = [k for k in self.required if k not in value]
        if missing:
            raise ShapeMismatch(path, _missing(missing))
        for k, v in value.items():
            shape = self.required.get(k) or self.optional.get(k) or self.values
            if shape is not None:
                shape.check(v, _join(path, k))

    def expected(self) -> str:
        return "an object"


def _missing(keys: list[str]) -> str:
    shown = ", ".join(f"`{k}`" for k in keys[:4])
    more = f" and {len(keys) - 4} more" if len(keys) > 4 else ""
    return f"has no {shown}{more} (required field{'s' if len(keys) > 1 else ''} missing)"


@dataclass
class Either(Shape):
    """The first of `shapes` whose JSON type matches decides (an object or null, say)."""
    shapes: tuple[Shape, ...]

    def check(self, value, path: str = "") -> None:
        for s in self.shapes:
            if isinstance(s, Scalar):
                try:
                    s.check(value, path)
                    return
                except ShapeMismatch:
                    continue
            if isinstance(s, Obj) and isinstance(value, dict) or \
                    isinstance(s, Arr) and isinstance(value, list):
                s.check(value, path)
                return
        raise ShapeMismatch(path, f"is {json_type(value)}, expected "
                                  f"{' or '.join(s.expected() for s in self.shapes)}")

    def expected(self) -> str:
        return " or ".join(s.expected() for s in self.shapes)


class Anything(Shape):
    def check(self, value, path: str = "") -> None:
        return None

    def expected(self) -> str:
        return "any JSON value"


STRING = Scalar(("string",))
INT = Scalar(("integer",))
BOOL = Scalar(("boolean",))
ANY = Anything()
OPT_STRING = Scalar(("string", "null"))
OPT_INT = Scalar(("integer", "null"))
OPT_BOOL = Scalar(("boolean", "null"))
# A float (or null) the writer may have turned into a string because JSON has no inf or nan.
OPT_NUMBER = Scalar(("number", "string", "null"), ("inf", "-inf", "nan"))


def nullable(shape: Shape) -> Shape:
    return Either((Scalar(("null",)), shape))


def string_map(values: Shape) -> Obj:
    """An object used as a map: any keys, every value of one shape."""
    return Obj(values=values)
