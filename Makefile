# The two commands of the README: `make demo` and `make test`. Both set up
# their own virtual environment on a fresh machine.
VENV ?= .venv
PYTHON = $(VENV)/bin/python
BACKENDS ?= tensorflow jax torch

.PHONY: demo test install

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PYTHON) examples/demo.py

# The suite runs once per Keras backend: everything kbert claims, on each.
test: $(VENV)/.installed
	@for backend in $(BACKENDS); do \
		echo "=== KERAS_BACKEND=$$backend ==="; \
		KERAS_BACKEND=$$backend $(PYTHON) -m pytest -rs -p no:cacheprovider || exit 1; \
	done
