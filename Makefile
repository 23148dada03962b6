# The README names two targets: `make demo` (the main job) and `make test` (every test). Both run
# `setup` first, which installs only what is missing, so a warm run starts working within seconds.
SHELL := /bin/bash
PY := .venv/bin/python
LIB := python/recgo/librecgo.so
GO_SOURCES := $(shell find capi engine kernels planner internal -name '*.go' ! -name '*_test.go' 2>/dev/null) go.mod go.sum
ENV := source scripts/env.sh &&

.PHONY: setup demo test test-go test-race test-py abi fuzz lint lib bench wheel clean

setup: .venv/.recgo-dev $(LIB)

.cache/go-mod.stamp: go.mod go.sum
	@mkdir -p .cache && go mod download && touch $@

.cache/highs/lib/libhighs.a:
	@bash scripts/link_highs.sh

.venv/.recgo-stamp:
	@bash scripts/setup_python.sh

# Development install: the venv imports recgo straight from python/ (what `pip install -e .` gives,
# without rebuilding through pip on every change).
.venv/.recgo-dev: .venv/.recgo-stamp scripts/setup_python.sh
	@bash scripts/setup_python.sh
	@$(PY) -c "import site,sys; open(site.getsitepackages()[0]+'/recgo-dev.pth','w').write('$(CURDIR)/python\n')"
	@touch $@

lib: $(LIB)
$(LIB): $(GO_SOURCES) .cache/go-mod.stamp .cache/highs/lib/libhighs.a
	@echo "[build] librecgo.so"
	@$(ENV) flock .cache/build.lock go build -trimpath -buildmode=c-shared -o $@ ./capi
	@mv -f python/recgo/librecgo.h .cache/librecgo.h  # the cgo header scripts/gen_abi.py reads

demo: setup
	$(PY) -m recgo train --backend all --steps 300 --out train-report

bench: setup
	@for b in benchmarks/[a-z]*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

test: setup lint test-go test-race fuzz test-py

lint:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.cache/*' -not -path './.venv/*')); if [ -n "$$out" ]; then echo "gofmt needed: $$out"; exit 1; fi
	@$(ENV) go vet ./...

test-go:
	@$(ENV) go test -count=1 ./...
	@echo "[test] portable kernels (GOEXPERIMENT unset)"
	@source scripts/env.sh && pkgs=$$(go list ./kernels/... 2>/dev/null); [ -z "$$pkgs" ] || GOEXPERIMENT= go test -count=1 $$pkgs

# The engine, its kernels and internal packages once under the race detector (the concurrency contracts).
test-race:
	@echo "[test] engine, kernels and internal packages under -race"
	@$(ENV) go test -race -count=1 ./engine/... ./kernels/... ./internal/...

# Regenerate python/recgo/_abi.py (the C ABI's Python declarations) from the Go sources.
abi:
	@$(PY) scripts/gen_abi.py

# Short fuzz runs of every Fuzz* target. Count-based on purpose: a duration -fuzztime hits Go's coordinator race
# (golang/go#75804, unfixed in 1.26) and fails with "context deadline exceeded". `make fuzz FUZZTIME=200000x` for longer.
FUZZTIME ?= 20000x
fuzz:
	@$(ENV) for pkg in $$(go list ./...); do \
	  dir=$$(go list -f '{{.Dir}}' $$pkg); \
	  for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/func //'); do \
	    echo "[fuzz] $$pkg $$f"; go test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg >/dev/null || { go test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg; exit 1; }; \
	  done; \
	done

test-py:
	@$(PY) -m pytest -q --durations=15 tests  # the slowest tests listed: the warm run is to stay near 15 minutes

wheel: setup
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .  # py3-none-manylinux_*: one wheel for every Python

clean:
	rm -rf build dist $(LIB) .cache/go-mod.stamp
