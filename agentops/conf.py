"""The environment, read through declarations: each variable is declared once, where it is
read, with its kind, its default and what it means.

Reading a variable declares it (:data:`declared`), so the settings page (docs/settings.md,
written by ``python -m devtools.settings_table``) is made from what the code reads and cannot
miss one. A value that does not parse stops the start with a sentence naming the variable
(:class:`SettingRefused`), never a bare ``ValueError``.

Nothing here imports Django's settings: gunicorn's configuration reads through it before the
app is loaded.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from django.core.exceptions import ImproperlyConfigured

T = TypeVar("T")

TRUE = frozenset({"1", "true", "yes", "on"})


class SettingRefused(ImproperlyConfigured):
    """A variable whose value is not of its kind (a word for a number): the start stops,
    naming it."""

    def __init__(self, name: str, value: str, wanted: str) -> None:
        super().__init__(f"{name} is {value!r}, not {wanted}")
        self.setting = name


@dataclass(frozen=True)
class Setting:
    """One environment variable as the code declares it."""

    name: str
    kind: str
    """text, secret, url, path, flag, integer, number, seconds, list, seconds list, mapping."""
    default: object
    meaning: str
    shown: str
    """The default as the settings page shows it (`make run` may set another)."""
    group: str


declared: dict[str, Setting] = {}
"""Every variable declared so far, by name, in the order first declared."""


def declare(setting: Setting) -> Setting:
    """Register ``setting``; the same variable read in two places must be declared alike."""
    known = declared.setdefault(setting.name, setting)
    if known != setting:
        raise ImproperlyConfigured(
            f"{setting.name} is declared twice, differently ({known.group!r} and "
            f"{setting.group!r}): declare it once and read it through that declaration"
        )
    return known


def declare_unless_known(setting: Setting) -> Setting:
    """Register ``setting`` unless its variable is declared already (a tool's setting that
    the settings module declares with its meaning and default): the declaration in place."""
    return declared.setdefault(setting.name, setting)


def raw(name: str) -> str | None:
    """A declared variable as the environment holds it, read now (``os.environ`` is looked up
    at every call, never cached, so a test may replace it). An undeclared one is refused: what
    the code reads is what the settings page shows."""
    if name not in declared:
        raise ImproperlyConfigured(f"{name} is read but not declared (agentops/conf.py)")
    return os.environ.get(name)


def _number(text: str) -> str:
    """``5.0`` as ``5``, ``0.5`` as ``0.5``: a default as people write it."""
    return text[:-2] if text.endswith(".0") else text


def _shown(default: object) -> str:
    if isinstance(default, bool):
        return "on" if default else "off"
    if default in ("", (), [], {}):
        return "empty"
    if isinstance(default, float):
        return f"`{_number(repr(default))}`"
    if isinstance(default, tuple | list):
        return "`" + ",".join(_number(str(item)) for item in default) + "`"
    if isinstance(default, dict):
        return "`" + ",".join(f"{k}={_number(str(v))}" for k, v in default.items()) + "`"
    return f"`{default}`"


def _items(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


class Section:
    """The variables of one part of agentops (a group of the settings page). Each reader
    declares the variable and returns its value now: the environment's, parsed, or the
    default when it is unset (or, for numbers, flags and ``blank_is_default`` text, empty)."""

    def __init__(self, title: str) -> None:
        self.title = title

    def setting(
        self, name: str, kind: str, default: object, meaning: str, shown: str | None
    ) -> Setting:
        """Declare a variable read some other way (by a library, or read again later)."""
        return declare(
            Setting(
                name=name,
                kind=kind,
                default=default,
                meaning=meaning,
                shown=_shown(default) if shown is None else shown,
                group=self.title,
            )
        )

    def _parsed(
        self,
        name: str,
        kind: str,
        default: T,
        meaning: str,
        shown: str | None,
        parse: Callable[[str], T],
        wanted: str,
    ) -> T:
        self.setting(name, kind, default, meaning, shown)
        value = raw(name)
        if value is None or not value.strip():
            return default
        try:
            return parse(value)
        except ValueError:
            raise SettingRefused(name, value, wanted) from None

    def text(
        self,
        name: str,
        default: str,
        meaning: str,
        *,
        shown: str | None = None,
        kind: str = "text",
        blank_is_default: bool = False,
    ) -> str:
        """Text as given (an empty value stays empty unless ``blank_is_default``); ``kind``
        says what it holds for the page (``secret``, ``url``, ``path``)."""
        self.setting(name, kind, default, meaning, shown)
        value = raw(name)
        if value is None or (blank_is_default and not value):
            return default
        return value

    def flag(self, name: str, default: bool, meaning: str, *, shown: str | None = None) -> bool:
        """On for 1, true, yes or on (any case); off for anything else set."""
        return self._parsed(
            name, "flag", default, meaning, shown, lambda v: v.strip().lower() in TRUE, "a flag"
        )

    def integer(self, name: str, default: int, meaning: str, *, shown: str | None = None) -> int:
        return self._parsed(name, "integer", default, meaning, shown, int, "a whole number")

    def number(self, name: str, default: float, meaning: str, *, shown: str | None = None) -> float:
        return self._parsed(name, "number", default, meaning, shown, float, "a number")

    def seconds(
        self, name: str, default: float, meaning: str, *, shown: str | None = None
    ) -> float:
        return self._parsed(name, "seconds", default, meaning, shown, float, "a number of seconds")

    def names(
        self, name: str, default: tuple[str, ...], meaning: str, *, shown: str | None = None
    ) -> list[str]:
        """Comma-separated items, each stripped, blanks left out (empty: none)."""
        self.setting(name, "list", default, meaning, shown)
        value = raw(name)
        return list(default) if value is None else _items(value)

    def seconds_list(
        self, name: str, default: tuple[float, ...], meaning: str, *, shown: str | None = None
    ) -> tuple[float, ...]:
        """Comma-separated numbers of seconds (empty: none)."""
        self.setting(name, "seconds list", default, meaning, shown)
        value = raw(name)
        if value is None:
            return default
        try:
            return tuple(float(item) for item in _items(value))
        except ValueError:
            raise SettingRefused(name, value, "numbers of seconds, comma-separated") from None

    def seconds_by_name(
        self, name: str, meaning: str, *, shown: str | None = None
    ) -> dict[str, float]:
        """``name=seconds,...`` (empty: none)."""
        self.setting(name, "mapping", {}, meaning, shown)
        found: dict[str, float] = {}
        for item in _items(raw(name) or ""):
            key, _, seconds = item.partition("=")
            try:
                found[key.strip()] = float(seconds)
            except ValueError:
                raise SettingRefused(name, item, "name=seconds") from None
        return found
