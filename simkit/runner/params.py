"""Study parameters (``--set NAME=VALUE``) and the resolved configuration of a run."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from simkit.runner.study import Study

__all__ = ["Param", "resolve_config", "show_value"]


def show_value(value: Any, limit: int = 80) -> str:
    """``repr(value)`` for an error message, shortened: always one line, at most ~``limit`` chars."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 256:
        # repr() of an int of more than 4300 digits raises (sys.set_int_max_str_digits)
        return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-12:]} ({len(text)} chars)"


@dataclasses.dataclass(frozen=True)
class Param:
    """A study parameter that ``--set NAME=VALUE`` may override.

    ``kind`` is int, float, str or bool; ``low``/``high`` bound numbers (``low_open`` makes the
    lower bound strict); ``choices`` restricts strings; ``quick`` is the ``--quick`` value;
    ``default=None`` means "use each setting's own value" for per-setting overrides.
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
    multi: bool = False  # a comma-separated list of choices

    def parse(self, text: str) -> Any:
        """Parse a ``--set`` value string and validate it (a non-string goes to :meth:`validate`)."""
        if not isinstance(text, str):
            return self.validate(text)
        raw = text.strip()
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
