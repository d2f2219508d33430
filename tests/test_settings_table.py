"""The settings page is made from the code's declarations, and the code reads nothing it does
not declare (issue 37; agentops/conf.py, devtools/settings_table.py).

- docs/settings.md is what the generator writes now;
- every variable read while Django's settings and apps, gunicorn's configuration and the MCP
  server's command load (recorded by an ``os.environ`` that notes each name asked for) is
  declared, but for a short list of variables that are not agentops' own;
- the product's sources read the environment only through agentops/conf.py;
- each kind of variable parses as it says, and a value that does not stops the start with a
  sentence naming the variable.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentops import conf
from agentops.conf import Section, SettingRefused
from tests.agentops.test_project import GIFTCARDS

ROOT = Path(__file__).resolve().parents[1]

NOT_OURS = {
    # Django's own.
    "DJANGO_SETTINGS_MODULE",
    "DJANGO_ALLOW_ASYNC_UNSAFE",
    "DJANGO_COLORS",
    # The interpreter's, the system's and the terminal's.
    "PATH",
    "HOME",
    "TZ",
    "TERM",
    "LANG",
    "LANGUAGE",
    "TMPDIR",
    "TEMP",
    "TMP",
    "NO_COLOR",
    "FORCE_COLOR",
    "COLUMNS",
    "LINES",
    # Libraries' own: the stripe library's log level and the coding agent it tells Stripe of,
    # prometheus-client's older spelling of its directory, RQ's key prefix.
    "STRIPE_LOG",
    "CLAUDECODE",
    "CLAUDE_CODE_CHILD_SESSION",
    "prometheus_multiproc_dir",
    "RQ_KEY_PREFIX",
}
"""Variables read that are not agentops' settings; a library's own are matched by prefix."""
NOT_OURS_PREFIXES = ("PYTHON", "_PYTHON", "LC_", "OTEL_", "PSYCOPG_", "PYDANTIC_", "PROMETHEUS_")


# The script a fresh interpreter runs: it replaces os.environ before anything is imported by
# one that notes every name asked for (get, [], in; not a walk over all of them, which is a
# library's copy of the environment, not a read of a setting).
RECORDING = r"""
import json
import os
import sys

seen = set()


class Recording(os._Environ):
    walking = 0

    def __getitem__(self, key):
        if not Recording.walking:
            seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        seen.add(key)
        return super().__contains__(key)

    def __iter__(self):
        Recording.walking += 1
        try:
            yield from super().__iter__()
        finally:
            Recording.walking -= 1


old = os.environ
os.environ = Recording(
    old._data, old.encodekey, old.decodekey, old.encodevalue, old.decodevalue
)

import django

django.setup()
import agentops.gunicorn_conf
import agentops.management.commands.mcp_server
from agentops.effects._registry import tools_made
from agentops.effects import _http
from agentops.telemetry.checks import metrics_multiprocess

tools_made()  # each tool made, as a run makes them: their settings read
_http._ca_bundle()
metrics_multiprocess()

from agentops import conf

json.dump({"seen": sorted(seen), "declared": sorted(conf.declared)}, sys.stdout)
"""


def test_the_page_is_what_the_declarations_say() -> None:
    """Whatever the shell that checks it holds: the generator reads the declarations in an
    environment of its own."""
    shell = {**os.environ, "AGENTOPS_APPS": "giftcards", "MAX_FAILED_RUNS": "9"}
    result = subprocess.run(
        [sys.executable, "-m", "devtools.settings_table", "--check", "docs/settings.md"],
        cwd=ROOT,
        env=shell,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_page_out_of_date_is_found(tmp_path: Path) -> None:
    page = tmp_path / "settings.md"
    page.write_text((ROOT / "docs" / "settings.md").read_text().replace("`8765`", "`8766`"))
    result = subprocess.run(
        [sys.executable, "-m", "devtools.settings_table", "--check", str(page)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert "-| `MCP_PORT` | `8766` |" in result.stdout
    assert f"python -m devtools.settings_table --write {page}" in result.stderr


def test_a_value_that_does_not_parse_stops_the_start_naming_it() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": "postgres://refused@127.0.0.1:1/refused",
        "MAX_FAILED_RUNS": "five",
    }
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "SettingRefused: MAX_FAILED_RUNS is 'five', not a whole number" in result.stderr


def test_every_variable_the_code_reads_is_on_the_page() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": "postgres://recording@127.0.0.1:1/recording",
        "AGENTOPS_EXAMPLES": "1",
        "SUPPORT_API_BASE": "http://127.0.0.1:9",
    }
    result = subprocess.run(
        [sys.executable, "-c", RECORDING],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    seen, declared = set(found["seen"]), set(found["declared"])
    page = (ROOT / "docs" / "settings.md").read_text()
    on_page = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", page, flags=re.MULTILINE))
    ours = {name for name in seen - NOT_OURS if not name.startswith(NOT_OURS_PREFIXES)}
    assert ours - declared == set(), "read but not declared (agentops/conf.py)"
    assert declared - on_page == set(), "declared but not on docs/settings.md"
    # The recording saw the reads it should: a setting of each process.
    assert {"DJANGO_SECRET_KEY", "GUNICORN_BIND", "MCP_PORT", "REQUESTS_CA_BUNDLE"} <= seen


def test_your_own_apps_tools_settings_are_declared_when_its_tools_load(tmp_path: Path) -> None:
    """An app of one's own (AGENTOPS_APPS) configures its tools from the environment alone:
    the settings its tools name are declared when the apps' tools are loaded, for the page."""
    app = tmp_path / "giftcards"
    app.mkdir()
    (app / "__init__.py").write_text("")
    (app / "effects.py").write_text(GIFTCARDS)
    script = (
        "import django, json; django.setup(); from agentops import conf; "
        "print(json.dumps({n: [s.kind, s.shown, s.meaning] for n, s in conf.declared.items()}))"
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(tmp_path),
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": "postgres://giftcards@127.0.0.1:1/giftcards",
        "AGENTOPS_APPS": "giftcards",
    }
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    declared = json.loads(result.stdout.splitlines()[-1])
    assert declared["GIFTCARD_API_BASE"] == [
        "url",
        "empty (its calls are refused: agentops.W117)",
        "The address of the provider that `giftcard_issue` calls.",
    ]
    assert declared["GIFTCARD_KEY_LIFETIME_SECONDS"][:2] == [
        "seconds",
        "none: required (agentops.E118)",
    ]
    # One the settings module declares keeps its own meaning and default.
    assert declared["STRIPE_API_BASE"][1] == "empty (= the real Stripe)"


def test_the_product_reads_the_environment_only_through_its_declarations() -> None:
    """``os.environ`` or ``getenv`` read anywhere in the product but agentops/conf.py would
    be a variable the page can miss. Writing one (``setdefault``, the test settings' own) is
    not a read of a setting."""
    reads = re.compile(r"os\.environ\.get\(|os\.environ\[|getenv\(|os\.environ\b(?!\.setdefault)")
    allowed_writes = re.compile(r"os\.environ\.setdefault\(|os\.environ\[[^]]+\] = ")
    found = []
    for package in ("agentops", "journal", "commerce", "examples"):
        for path in (ROOT / package).rglob("*.py"):
            if path == ROOT / "agentops" / "conf.py":
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                code = allowed_writes.sub("", line.split("#")[0])
                if reads.search(code) and "os.environ`" not in line:
                    found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == []


def test_every_variable_the_development_tools_name_is_on_the_page() -> None:
    """The launcher, the chaos run and the sandbox providers read their environment
    themselves (devtools is not shipped, its launcher runs without Django, and the sandboxes
    know nothing of agentops): each ``AGENTOPS_…`` or ``SANDBOX_…`` name in their sources is
    declared by devtools.settings_table, and so on the page."""
    page = (ROOT / "docs" / "settings.md").read_text()
    on_page = set(re.findall(r"^\| `([A-Z0-9_]+)` \|", page, flags=re.MULTILINE))
    named = set()
    for package in ("devtools", "sandbox"):
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            named |= set(re.findall(r"[\"']((?:AGENTOPS|SANDBOX)_[A-Z0-9_]+)[\"']", text))
    assert named
    assert named - on_page == set()
    sandbox_ports = {name for name in on_page if name.startswith("AGENTOPS_SANDBOX_")}
    assert "AGENTOPS_SANDBOX_PAYMENTS_PORT" in sandbox_ports


# --- Each kind -------------------------------------------------------------------------------


@pytest.fixture
def section(monkeypatch: pytest.MonkeyPatch) -> Section:
    monkeypatch.setattr(conf, "declared", {})
    return Section("Tests")


def _set(monkeypatch: pytest.MonkeyPatch, name: str, value: str | None) -> None:
    if value is None:
        monkeypatch.delenv(name, raising=False)
    else:
        monkeypatch.setenv(name, value)


@pytest.mark.parametrize(
    ("value", "read"),
    [(None, "dflt"), ("", ""), ("given", "given")],
)
def test_text_is_as_given(
    section: Section, monkeypatch: pytest.MonkeyPatch, value: str | None, read: str
) -> None:
    _set(monkeypatch, "AO_TEST_TEXT", value)
    assert section.text("AO_TEST_TEXT", "dflt", "A text.") == read
    assert conf.declared["AO_TEST_TEXT"].shown == "`dflt`"


def test_blank_text_may_mean_the_default(section: Section, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AO_TEST_TEXT", "")
    assert section.text("AO_TEST_TEXT", "json", "A text.", blank_is_default=True) == "json"


@pytest.mark.parametrize(
    ("value", "read"),
    [(None, True), ("", True), ("0", False), ("no", False), (" Yes ", True), ("on", True)],
)
def test_a_flag_is_on_for_1_true_yes_or_on(
    section: Section, monkeypatch: pytest.MonkeyPatch, value: str | None, read: bool
) -> None:
    _set(monkeypatch, "AO_TEST_FLAG", value)
    assert section.flag("AO_TEST_FLAG", True, "A flag.") is read


def test_an_integer_is_a_whole_number(section: Section, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AO_TEST_INT", " 7 ")
    assert section.integer("AO_TEST_INT", 5, "An integer.") == 7
    monkeypatch.setenv("AO_TEST_INT", "")
    assert section.integer("AO_TEST_INT", 5, "An integer.") == 5
    monkeypatch.setenv("AO_TEST_INT", "2.5")
    with pytest.raises(SettingRefused, match=r"^AO_TEST_INT is '2\.5', not a whole number$"):
        section.integer("AO_TEST_INT", 5, "An integer.")


def test_seconds_and_numbers_name_the_variable_they_refuse(
    section: Section, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AO_TEST_SECONDS", "1.5")
    assert section.seconds("AO_TEST_SECONDS", 60.0, "Seconds.") == 1.5
    assert conf.declared["AO_TEST_SECONDS"].shown == "`60`"
    monkeypatch.setenv("AO_TEST_SECONDS", "a minute")
    with pytest.raises(SettingRefused, match="AO_TEST_SECONDS is 'a minute', not a number of s"):
        section.seconds("AO_TEST_SECONDS", 60.0, "Seconds.")
    monkeypatch.setenv("AO_TEST_NUMBER", "x")
    with pytest.raises(SettingRefused, match="AO_TEST_NUMBER is 'x', not a number"):
        section.number("AO_TEST_NUMBER", 0.5, "A number.")


def test_a_list_is_comma_separated_blanks_left_out(
    section: Section, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AO_TEST_LIST", raising=False)
    assert section.names("AO_TEST_LIST", ("a", "b"), "A list.") == ["a", "b"]
    assert conf.declared["AO_TEST_LIST"].shown == "`a,b`"
    monkeypatch.setenv("AO_TEST_LIST", " x, ,y ")
    assert section.names("AO_TEST_LIST", ("a", "b"), "A list.") == ["x", "y"]
    monkeypatch.setenv("AO_TEST_LIST", "")
    assert section.names("AO_TEST_LIST", ("a", "b"), "A list.") == []


def test_a_schedule_is_seconds_comma_separated(
    section: Section, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AO_TEST_SCHEDULE", "1, 5,30")
    assert section.seconds_list("AO_TEST_SCHEDULE", (2.0,), "A schedule.") == (1.0, 5.0, 30.0)
    monkeypatch.setenv("AO_TEST_SCHEDULE", "1,soon")
    with pytest.raises(SettingRefused, match="AO_TEST_SCHEDULE is '1,soon', not numbers of"):
        section.seconds_list("AO_TEST_SCHEDULE", (2.0,), "A schedule.")


def test_seconds_by_name_are_name_equals_seconds(
    section: Section, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AO_TEST_MAP", "charge_customer=8, send_email=3")
    read = section.seconds_by_name("AO_TEST_MAP", "Per name.")
    assert read == {"charge_customer": 8.0, "send_email": 3.0}
    monkeypatch.setenv("AO_TEST_MAP", "charge_customer")
    with pytest.raises(SettingRefused, match="AO_TEST_MAP is 'charge_customer', not name=sec"):
        section.seconds_by_name("AO_TEST_MAP", "Per name.")


def test_a_variable_is_declared_once(section: Section) -> None:
    section.text("AO_TEST_ONCE", "", "Once.")
    section.text("AO_TEST_ONCE", "", "Once.")  # read again, declared alike: fine
    with pytest.raises(ImproperlyConfigured, match="declared twice, differently"):
        section.text("AO_TEST_ONCE", "other", "Once.")


def test_an_undeclared_variable_is_not_read(section: Section) -> None:
    with pytest.raises(ImproperlyConfigured, match="AO_TEST_NEVER is read but not declared"):
        conf.raw("AO_TEST_NEVER")
