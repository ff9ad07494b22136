"""Study parameters (``--set NAME=VALUE``) and the resolved configuration of a run."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from simkit.runner.study import Study

__all__ = ["Param", "resolve_config", "show_value", "level_grid"]


def show_value(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message, shortened: always one line, at most ~``limit`` chars."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr() of an int of more than 4300 digits raises (sys.set_int_max_str_digits)
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-12:]} ({len(text)} chars)"


_WORDS = {1: "one", 2: "two", 3: "three", 4: "four", 5: "five"}


def level_grid(low: int, high: int, step: int) -> list[int]:
    """``low, low*step, low*step^2, ...`` up to ``high`` (inclusive): a geometric design grid."""
    out, v = [], int(low)
    while v <= high:
        out.append(v)
        v *= int(step)
    return out


@dataclasses.dataclass(frozen=True)
class Param:
    """A study parameter that ``--set NAME=VALUE`` may override.

    ``kind`` is int, float, str or bool; ``low``/``high`` bound numbers (``low_open`` makes the
    lower bound strict); ``choices`` restricts strings; ``quick`` is the ``--quick`` value;
    ``default=None`` means "use each setting's own value" for per-setting overrides.

    ``multi=True`` makes the value a comma-separated list: of ``choices`` (str), or of numbers (int,
    float), kept as its text in the configuration and read with :meth:`values`. A list of numbers has
    at least ``min_items`` distinct items (0: the empty text is the empty list), each within
    ``low``/``high``, a multiple of ``multiple_of`` and, with ``power_of_two``, a power of two;
    ``items_doc`` says what an item is in the error ("even dimensions >= 6"); :meth:`values` sorts
    them (descending if ``descending``) unless ``sort=False`` keeps the given order.
    """

    name: str
    kind: type
    default: Any
    doc: str
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    choices: tuple | None = None
    quick: Any = None
    power_of_two: bool = False
    multi: bool = False  # a comma-separated list of choices or numbers
    min_items: int = 1
    multiple_of: int | None = None
    descending: bool = False
    sort: bool = True
    items_doc: str | None = None

    def parse(self, text: str) -> Any:
        """Parse a ``--set`` value string and validate it (a non-string goes to :meth:`validate`)."""
        if not isinstance(text, str):
            return self.validate(text)
        raw = text.strip()
        if self._number_list:
            self.values(raw)
            return raw
        if self.kind is bool:
            low = raw.lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"'{self.name}' must be true or false, got {show_value(text)}")
        if self.kind is int:
            try:
                value = int(raw)
            except ValueError:
                try:
                    f = float(raw)
                except ValueError:
                    raise ValueError(f"'{self.name}' must be an integer, got {show_value(text)}") from None
                if not math.isfinite(f) or not f.is_integer():
                    raise ValueError(f"'{self.name}' must be an integer, got {show_value(text)}") from None
                value = int(f)
            return self.validate(value)
        if self.kind is float:
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"'{self.name}' must be a number, got {show_value(text)}") from None
            return self.validate(value)
        return self.validate(raw)

    def validate(self, value: Any) -> Any:
        """Check a value against kind, bounds and choices; return it normalised."""
        if value is None and self.default is None:
            return None
        if self._number_list:
            if isinstance(value, (list, tuple)):
                value = ",".join(str(v) for v in value)
            if not isinstance(value, str):
                raise ValueError(f"'{self.name}' must be a comma-separated list, got {show_value(value)}")
            self.values(value)
            return value.strip()
        if self.kind is bool:
            if not isinstance(value, (bool, np.bool_)):
                raise ValueError(f"'{self.name}' must be true or false, got {show_value(value)}")
            return bool(value)
        if self.kind in (int, float):
            return self._validate_number(value)
        if not isinstance(value, str):
            raise ValueError(f"'{self.name}' must be text, got {show_value(value)}")
        if self.choices is not None:
            items = [v.strip() for v in value.split(",")] if self.multi else [value]
            bad = [v for v in items if v not in self.choices]
            if bad or not items or items == [""]:
                raise ValueError(f"'{self.name}' must be one or more of {', '.join(self.choices)} "
                                 f"(comma-separated), got {show_value(value)}")
            dup = next((v for i, v in enumerate(items) if v in items[:i]), None)
            if dup is not None:  # a repeated cell would share its seeds and checkpoints with the first
                raise ValueError(f"'{self.name}' lists {dup!r} twice, got {show_value(value)}")
            return ",".join(items)
        return value

    @property
    def _number_list(self) -> bool:
        return self.multi and self.kind in (int, float)

    def values(self, text: str) -> list:
        """The numbers of a list parameter's text (``multi`` with kind int or float), checked and sorted.

        Raises ``ValueError`` with one line naming the parameter: "'ds' must list at least three
        distinct even dimensions >= 6, got '6,7,8'".
        """
        if not self._number_list:
            raise TypeError(f"parameter {self.name!r} is not a list of numbers")
        what = "integers" if self.kind is int else "numbers"
        try:
            vals = [self.kind(v) for v in str(text).split(",") if v.strip()]
        except ValueError:
            raise ValueError(f"'{self.name}' must be comma-separated {what}, got {show_value(text)}") from None

        def ok(v):
            if not math.isfinite(v) or (self.high is not None and v > self.high):
                return False
            if self.low is not None and (v <= self.low if self.low_open else v < self.low):
                return False
            if self.power_of_two and (v < 1 or int(v) & (int(v) - 1)):
                return False
            return self.multiple_of is None or v % self.multiple_of == 0

        if len(vals) < self.min_items or len(set(vals)) != len(vals) or not all(ok(v) for v in vals):
            count = f"at least {_WORDS.get(self.min_items, str(self.min_items))} " if self.min_items > 1 else ""
            raise ValueError(f"'{self.name}' must list {count}distinct {self.items_doc or what}, "
                             f"got {show_value(text)}")
        return sorted(vals, reverse=self.descending) if self.sort else vals

    def _validate_number(self, value: Any) -> int | float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"'{self.name}' must be {'a number' if self.kind is float else 'an integer'}, "
                             f"got {show_value(value)}")
        if isinstance(value, (int, np.integer)):
            value = int(value)  # exact at any size: float() overflows beyond ~1.8e308
            if self.kind is float:
                try:
                    value = float(value)
                except OverflowError:
                    raise ValueError(f"'{self.name}' must be finite, got {show_value(value)}") from None
        else:
            if not math.isfinite(float(value)):
                raise ValueError(f"'{self.name}' must be finite, got {value!r}")
            if self.kind is int:
                if not float(value).is_integer():
                    raise ValueError(f"'{self.name}' must be an integer, got {value!r}")
                value = int(value)
            else:
                value = float(value)
        if self.low is not None:
            if self.low_open and value <= self.low:
                raise ValueError(f"'{self.name}' must be > {self.low:g}, got {show_value(value)}")
            if not self.low_open and value < self.low:
                raise ValueError(f"'{self.name}' must be >= {self.low:g}, got {show_value(value)}")
        if self.high is not None and value > self.high:
            raise ValueError(f"'{self.name}' must be <= {self.high:g}, got {show_value(value)}")
        if self.power_of_two and (value < 1 or value & (value - 1)):
            raise ValueError(f"'{self.name}' must be a power of two, got {show_value(value)}")
        return value


def resolve_config(study: Study, overrides: dict[str, Any] | None = None, *, quick: bool = False,
                   seed: int | None = None) -> dict[str, Any]:
    """Defaults, then ``--quick`` values, then overrides (validated); plus the seed."""
    cfg = {name: p.default for name, p in study.params.items()}
    if quick:
        for name, p in study.params.items():
            if p.quick is not None:
                cfg[name] = p.quick
    for name, value in (overrides or {}).items():
        if name not in study.params:
            known = ", ".join(sorted(study.params))
            raise ValueError(f"unknown parameter {show_value(name)} for study {study.name}; known: {known}")
        p = study.params[name]
        cfg[name] = p.parse(value) if isinstance(value, str) else p.validate(value)
    if seed is None:
        seed = study.default_seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0 or seed >= 2**63:
        raise ValueError(f"'seed' must be an integer in [0, 2**63), got {show_value(seed)}")
    cfg["seed"] = int(seed)
    cfg["quick"] = bool(quick)
    study.check_config(cfg)
    return cfg
