# Two commands on a fresh machine: `make run` (the demo) and `make test`.
# Both need only python3 (3.11+); everything else goes into .venv, including the
# PostgreSQL and Redis binaries (see scripts/stack.py).

PYTHON ?= python3
PYTEST_ARGS ?=
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test bench chaos

run: $(STAMP)
	$(VENV)/bin/python scripts/stack.py run

# mypy's django plugin imports agentops.settings, which insists on a DATABASE_URL and, with
# DEBUG off, a secret key. It never connects, so placeholders do.
test: $(STAMP)
	$(VENV)/bin/ruff check .
	DJANGO_DEBUG=1 DATABASE_URL=postgres://typecheck@127.0.0.1/typecheck $(VENV)/bin/mypy .
	$(VENV)/bin/python scripts/stack.py test -- $(VENV)/bin/python -m pytest $(PYTEST_ARGS)

# A 100-task renewal batch on 1, then 2 workers, against durable throwaway servers.
bench: $(STAMP)
	$(VENV)/bin/python scripts/stack.py bench -- $(VENV)/bin/python scripts/bench_batch.py $(BENCH_ARGS)

# The chaos run (README, "Proof: the chaos run"): N tasks under a seeded fault schedule, then
# the journal checked against the providers' ledgers. CHAOS_ARGS="--seed 3 --harness naive".
CHAOS_ARGS ?=
chaos: $(STAMP)
	$(VENV)/bin/python scripts/stack.py chaos -- $(VENV)/bin/python manage.py chaos --json $(CHAOS_ARGS)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --upgrade pip
	$(VENV)/bin/pip install -e '.[dev]'
	touch $@
