# Two commands on a fresh machine: `make run` (the demo) and `make test`.
# Both need only python3 (3.11+); everything else goes into .venv, including the
# PostgreSQL and Redis binaries (see devtools/stack/; scripts/stack.py is its entry point).

PYTHON ?= python3
PYTEST_ARGS ?=
# pytest runs as this many shards side by side, each with a PostgreSQL and a Redis of its own
# (devtools/stack/shards.py, tests/sharding.py); each prints its slowest tests at its end.
TEST_SHARDS ?= 4
VENV := .venv
STAMP := $(VENV)/.installed
BENCH_STAMP := $(VENV)/.installed-bench
# The browser tests drive Debian's Chromium (never one a tool downloads).
CHROMIUM ?= /usr/bin/chromium

.PHONY: run test docs bench soak chaos chaos-cluster promtool patroni systemd-analyze

run: $(STAMP)
	$(VENV)/bin/python scripts/stack.py run

# mypy's django plugin and makemigrations import agentops.settings, which insists on a
# DATABASE_URL and, with DEBUG off, a secret key. Neither needs a database, so placeholders do:
# nothing listens on port 1, and makemigrations' check of the applied history, which it
# skips with a warning when it cannot connect, is left out quietly.
NO_DATABASE := DJANGO_DEBUG=1 DATABASE_URL=postgres://typecheck@127.0.0.1:1/typecheck
test: $(STAMP) $(CHROMIUM) promtool patroni systemd-analyze
	$(VENV)/bin/ruff check .
	$(NO_DATABASE) $(VENV)/bin/mypy .
	$(VENV)/bin/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir var/site
	promtool test rules deploy/prometheus/agentops.rules.test.yml
	$(NO_DATABASE) $(VENV)/bin/python -W 'ignore:Got an error checking a consistent migration history' \
		manage.py makemigrations --check --dry-run
	$(VENV)/bin/python scripts/stack.py test --shards $(TEST_SHARDS) -- \
		$(VENV)/bin/python -m pytest --durations=15 $(PYTEST_ARGS)

# The documentation site (mkdocs.yml, docs/): built strictly (a broken link or anchor, or a page
# left out of the nav, fails), then served with live reload beside `make run`'s port 8000.
DOCS_ADDR ?= 127.0.0.1:8001
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir var/site
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve --strict --dev-addr $(DOCS_ADDR)

# `manage.py bench` against durable throwaway servers (fsync on): see docs/benchmarks.md.
# Production settings (DEBUG off, logging at its default level) over plain HTTP on loopback,
# with a key made for the run.
bench: $(BENCH_STAMP)
	DJANGO_DEBUG=0 DJANGO_HTTPS=0 \
	DJANGO_SECRET_KEY=$$($(PYTHON) -c 'import secrets; print(secrets.token_urlsafe(50))') \
	$(VENV)/bin/python scripts/stack.py bench -- sh -c \
		'$(VENV)/bin/python manage.py migrate -v0 && $(VENV)/bin/python manage.py collectstatic --noinput -v0 && $(VENV)/bin/python manage.py bench $(BENCH_ARGS)'

# The soak (docs/benchmarks.md): waves of renewals against a growing journal whose ranges are
# 20 s wide and kept 30 s, so that retention drops ranges while it runs. SOAK_ARGS="--waves 5".
SOAK_ARGS ?=
soak: $(BENCH_STAMP)
	JOURNAL_PARTITION_SECONDS=20 JOURNAL_RETAIN_SECONDS=30 JOURNAL_PARTITIONS_AHEAD=3 \
		$(MAKE) bench BENCH_ARGS="--soak $(SOAK_ARGS)"

# Installed when missing, as root (CI is); otherwise say how.
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "the browser tests need Debian's chromium at $(CHROMIUM): sudo apt-get install chromium"; \
		exit 1; \
	fi

# The alert rules' tests need promtool, which Debian ships in its prometheus package: installed
# when missing, as root (CI is); otherwise say how.
promtool:
	@if ! command -v promtool >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
		else \
			echo "the alert rules' tests need promtool: sudo apt-get install prometheus"; \
			exit 1; \
		fi; \
	fi

# The failover test (tests/cluster/, devtools/cluster/) runs Debian's Patroni and etcd over the
# project's PostgreSQL binaries: installed when missing, as root (CI is); otherwise say how.
patroni:
	@if ! command -v patroni >/dev/null || ! command -v etcd >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends patroni etcd-server >/dev/null; \
		else \
			echo "the failover test needs Patroni and etcd: sudo apt-get install patroni etcd-server"; \
			exit 1; \
		fi; \
	fi

# The chaos run (docs/proof.md): N tasks under a seeded fault schedule, then
# the journal checked against the providers' ledgers. CHAOS_ARGS="--seed 3 --harness naive".
CHAOS_ARGS ?=
chaos: $(STAMP)
	$(VENV)/bin/python scripts/stack.py chaos -- $(VENV)/bin/python manage.py chaos --json $(CHAOS_ARGS)

# The same on a Patroni cluster (devtools/chaos/cluster.py): a primary and its synchronous
# standby, each in a network namespace of its own (as root), with a failover, a switchover,
# the primary cut off, Redis emptied and a rolling deploy of the workers on top.
chaos-cluster: $(STAMP) patroni
	$(VENV)/bin/python scripts/stack.py chaos -- $(VENV)/bin/python -m devtools.chaos.cluster --json $(CHAOS_ARGS)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e '.[dev]'
	touch $@

# The benchmark's peer (DBOS), on top of the rest.
$(BENCH_STAMP): $(STAMP)
	$(VENV)/bin/pip install -e '.[dev,bench]'
	touch $@

# The deployment recipe's tests score the systemd units' hardening with systemd-analyze
# (Debian's systemd package): installed when missing, as root (CI is); otherwise say how.
systemd-analyze:
	@if ! command -v systemd-analyze >/dev/null; then \
		if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends systemd >/dev/null; \
		else \
			echo "the deployment recipe's tests need systemd-analyze: sudo apt-get install systemd"; \
			exit 1; \
		fi; \
	fi
