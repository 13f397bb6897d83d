"""The one configuration reader: a YAML file with a section per component, one error type.

Every command reads the same file (``--config``, ``--broker-config`` and ``--alerts`` may name one
file): ``detectors:``, ``broker:``, ``alerts:``, ... Each component declares its section as a
msgspec Struct and asks for it with ``section``; nothing else parses YAML. Errors name the file, the
key path and the problem, with "did you mean" for a near-miss key, so a typo in a 200-line file is
found without reading the code:

    site.yaml: detectors.ecmp.max_over_maen: unknown key (did you mean `max_over_mean`?)
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, TypeVar

import msgspec

T = TypeVar("T")

Positive = Annotated[float, msgspec.Meta(gt=0)]
"""A setting that must be above zero (a time, a size, a ratio over one)."""
Fraction = Annotated[float, msgspec.Meta(gt=0, le=1)]
"""A share of something: above 0, at most 1."""
AtLeastOne = Annotated[int, msgspec.Meta(ge=1)]
"""A count of polls, ports or partitions."""
PollWindow = Annotated[int, msgspec.Meta(ge=1, le=8)]
"""A window of polls kept as bits per port (``detectors.systematic``): 1 to 8."""

SECTIONS = ("detectors", "broker", "alerts", "collect", "sonic", "gnmi")
"""The top-level keys a config file may hold; a component that adds one registers it here."""


class ConfigError(ValueError):
    """A configuration that cannot be used. ``str()`` is ``FILE: KEY: problem`` (parts that are
    known), which is what every command prints before exiting 2."""

    def __init__(self, problem: str, file: str | Path | None = None, key: str | None = None) -> None:
        self.problem, self.file, self.key = problem, file, key
        super().__init__(": ".join(str(p) for p in (file, key, problem) if p))


def read_yaml(path: str | Path) -> Any:
    """A YAML document, or ConfigError naming the file (and the line, for a syntax error)."""
    import yaml

    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text (byte {exc.start})", path) from None
    except OSError as exc:
        raise ConfigError(exc.strerror or str(exc), path) from None
    try:
        return yaml.safe_load(text)
    except RecursionError:
        raise ConfigError("invalid YAML: nested too deeply", path) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"invalid YAML: {problem}", path, where) from None


class ConfigFile:
    """A config file's sections. ``ConfigFile(None)`` is the empty config: every section default."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path is not None else None
        doc = read_yaml(self.path) if self.path is not None else None
        if doc is None:
            doc = {}
        if not isinstance(doc, dict):
            raise ConfigError(f"expected a mapping of sections ({', '.join(SECTIONS)})", self.path)
        for key in doc:
            if key not in SECTIONS:
                raise ConfigError(_unknown(str(key), SECTIONS), self.path, str(key))
        self._doc: dict[str, Any] = doc

    def raw(self, name: str) -> Any:
        """A section as plain data (None when absent), for components that compile it themselves."""
        return self._doc.get(name)

    def section(self, name: str, type_: type[T], overrides: Mapping[str, Any] | None = None) -> T:
        """The section ``name`` as ``type_`` (its defaults where absent); ``overrides`` (e.g. from
        the environment) win over the file's keys."""
        data = self._doc.get(name) or {}
        if not isinstance(data, dict):
            raise ConfigError("expected a mapping", self.path, name)
        if overrides:
            data = {**data, **overrides}
        return convert(data, type_, self.path, name)


def convert(data: Any, type_: type[T], file: str | Path | None, key: str, strict: bool = True) -> T:
    """``data`` checked and converted to ``type_``; an error names ``file``, the key path under
    ``key`` and the problem, with a suggestion for a near-miss key. ``strict=False`` takes
    numbers and times written as strings (hand-edited lists such as silences)."""
    _check_keys(data, msgspec.inspect.type_info(type_), key, file)
    try:
        return msgspec.convert(data, type_, strict=strict)
    except msgspec.ValidationError as exc:
        message, _, at = str(exc).rpartition(" - at `$")
        if not message:
            raise ConfigError(str(exc), file, key) from None
        raise ConfigError(message, file, key + at.rstrip("`")) from None
    except ValueError as exc:  # a Struct's own __post_init__ check
        raise ConfigError(str(exc), file, key) from None


def check_keys(data: Any, type_: type, file: str | Path | None, key: str = "") -> None:
    """Refuse a key ``type_`` does not have, naming ``file``, the key path and the likely one meant;
    for readers that convert by themselves (a scenario's own msgspec options)."""
    _check_keys(data, msgspec.inspect.type_info(type_), key, file)


def _check_keys(data: Any, info: msgspec.inspect.Type, path: str, file: str | Path | None) -> None:
    """Walk ``data`` beside its type and refuse unknown keys with a suggestion (msgspec names the
    unknown key but cannot say which one was meant), and a value outside a fixed set with the set."""
    if isinstance(info, msgspec.inspect.UnionType):
        structs = [t for t in info.types if isinstance(t, msgspec.inspect.StructType)]
        if len(structs) == 1 and isinstance(data, dict):
            _check_keys(data, structs[0], path, file)
        others = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
        if len(others) == 1 and isinstance(others[0], msgspec.inspect.LiteralType) and data is not None:
            _check_keys(data, others[0], path, file)
        return
    if isinstance(info, msgspec.inspect.LiteralType) and data not in info.values:
        # msgspec says only "Invalid enum value": the reader is told the choices
        raise ConfigError(f"{data!r} is not one of: {', '.join(map(str, info.values))}", file, path)
    if isinstance(info, msgspec.inspect.StructType) and isinstance(data, dict):
        fields = {f.encode_name: f for f in info.fields}
        for key, value in data.items():
            field = fields.get(key)
            at = f"{path}.{key}" if path else str(key)
            if field is None:
                raise ConfigError(_unknown(str(key), list(fields)), file, at)
            _check_keys(value, field.type, at, file)
    elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.TupleType) and isinstance(data, list):
        item = getattr(info, "item_type", None)
        if item is not None:
            for i, value in enumerate(data):
                _check_keys(value, item, f"{path}[{i}]", file)
    elif isinstance(info, msgspec.inspect.DictType) and isinstance(data, dict):
        for key, value in data.items():
            _check_keys(value, info.value_type, f"{path}.{key}", file)


def _unknown(key: str, known: list[str] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean `{close[0]}`?)"
    return f"unknown key (known: {', '.join(sorted(known))})"
