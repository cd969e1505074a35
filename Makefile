# The two commands for a fresh machine: `make demo` and `make test`.
BUILD     ?= build
JOBS      ?= $(shell nproc)
CMAKE_ARGS ?=
PREFIX    ?= /usr/local
# ccache, where it is installed, makes rebuilds of unchanged files instant.
CCACHE    := $(shell command -v ccache 2>/dev/null)
LAUNCHER  := $(if $(CCACHE),-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
DEB_PACKAGES := build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev \
  libucx-dev libamdhip64-5 \
  clang-format clang-tidy libgtest-dev libgmock-dev libbenchmark-dev libasio-dev \
  libssl-dev nettle-dev libcereal-dev libspdlog-dev libfmt-dev libcli11-dev libcaf-dev iproute2 \
  libboost-dev nlohmann-json3-dev libdw-dev libjs-chart.js \
  openssh-client openssh-server slurm-wlm munge python3-yaml libgloo-dev python3-torch libtorch-dev \
  python3-sklearn zlib1g-dev \
  pybind11-dev python3-dev python3-pytest python3-cloudpickle python3-numpy \
  python3-venv python3-pip python3-setuptools flake8 python3-mypy

# What only the tests use: a real browser for the dashboard, Prometheus' checker, a terminal.
TEST_PACKAGES := chromium fonts-liberation prometheus tmux

# `import baton` from the build tree: PYTHONPATH=python:$(BUILD)/python (see the README).
python: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target python

.PHONY: python all deps deps-build build install test test-asan test-tsan test-sanitizers-core demo bench format format-check tidy clean

all: build

# Installs what the build and the tests need (deps-build: the build alone); apt-get update runs
# only when something is missing.
deps:
	@$(MAKE) --no-print-directory deps-build PACKAGES="$(DEB_PACKAGES) $(TEST_PACKAGES)"

PACKAGES ?= $(DEB_PACKAGES)
deps-build:
	@missing=$$(for p in $(PACKAGES); do \
	  dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing$$(echo ' '$$missing)"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing; \
	else echo "make deps: all packages present"; fi

# Line tables only (-g1): what stack traces, perf and the sanitizers' reports need, in two thirds
# of the compile time of full debug information (-g) and a quarter of its object size. CMAKE_ARGS
# may set it back: -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG".
DEBUG_INFO := "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG"
$(BUILD)/build.ninja:
	cmake -S . -B $(BUILD) -G Ninja $(LAUNCHER) $(DEBUG_INFO) $(CMAKE_ARGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Headers, libraries, the CMake package (find_package(baton)) and baton.pc under $(PREFIX).
install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

# The suite under AddressSanitizer + UndefinedBehaviorSanitizer, and under ThreadSanitizer, built
# at -O1 with line tables only (-g1): what the sanitizers' reports need, in less than half the
# compile time of -O2 -g under ASan.
SAN_FLAGS := -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
test-asan:
	cmake -S . -B build-asan -G Ninja -DBATON_SANITIZE=address,undefined -DBATON_BENCH=OFF $(SAN_FLAGS) $(LAUNCHER) $(CMAKE_ARGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ctest --output-on-failure -j $(JOBS)

test-tsan:
	cmake -S . -B build-tsan -G Ninja -DBATON_SANITIZE=thread -DBATON_BENCH=OFF $(SAN_FLAGS) $(LAUNCHER) $(CMAKE_ARGS)
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tsan.supp ctest --output-on-failure -j $(JOBS)

# The runtime's core tests (actors, links, meshes, processes, supervision, collectives) under both
# sanitizers, in CI's time: only their targets are built.
CORE_TESTS := test_actor_proc test_actor_remote test_actor_threadpool test_net_link test_net_auth \
  test_net_link_shm test_net_wake_ups test_net_io_thread test_host_mesh test_host_mesh_spawn \
  test_host_runtime test_host_spawn test_host_supervision test_host_cast_failures test_host_stop test_host_lifecycle test_rdma_lifecycle test_net_work_queue test_net_wake_group test_net_edge_watch \
  test_collective_collective
CORE_REGEX := ^(actor\.proc|actor\.remote|actor\.threadpool|net\.link|net\.link_shm|net\.wake_ups|net\.io_thread|net\.auth|net\.work_queue|net\.wake_group|net\.edge_watch|host\.mesh|host\.mesh_spawn|host\.runtime|host\.spawn|host\.supervision|host\.cast_failures|host\.stop|host\.lifecycle|rdma\.lifecycle|collective\.collective)$$
test-sanitizers-core:
	cmake -S . -B build-asan -G Ninja -DBATON_SANITIZE=address,undefined -DBATON_BENCH=OFF \
	  -DBATON_EXAMPLES=OFF -DBATON_HEADER_CHECK=OFF $(SAN_FLAGS) $(LAUNCHER) $(CMAKE_ARGS)
	cmake --build build-asan -j $(JOBS) --target $(CORE_TESTS)
	cd build-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --output-on-failure -j $(JOBS) -R '$(CORE_REGEX)'
	cmake -S . -B build-tsan -G Ninja -DBATON_SANITIZE=thread -DBATON_BENCH=OFF \
	  -DBATON_EXAMPLES=OFF -DBATON_HEADER_CHECK=OFF $(SAN_FLAGS) $(LAUNCHER) $(CMAKE_ARGS)
	cmake --build build-tsan -j $(JOBS) --target $(CORE_TESTS)
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:suppressions=$(CURDIR)/tsan.supp \
	  ctest --output-on-failure -j $(JOBS) -R '$(CORE_REGEX)'

# Only what the demo runs: the example and the libraries under it, and `baton` to look inside it
# (not the tests, fuzzers, header checks and other examples a full build makes).
demo: deps-build $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target ddp_train baton-cli
	./$(BUILD)/bin/ddp_train

bench: build
	./$(BUILD)/bin/baton-bench all
	@if ls $(BUILD)/python/baton/_baton*.so >/dev/null 2>&1; then \
	  PYTHONPATH=python:$(BUILD)/python /usr/bin/python3 bench/python/bench.py \
	    --baton-bench $(BUILD)/bin/baton-bench; fi

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp')

format-check:
	clang-format --dry-run -Werror $$(git ls-files '*.cpp' '*.hpp')
	flake8 python examples bench/python setup.py
	cd python && /usr/bin/python3 -m mypy --config-file ../pyproject.toml -p baton

# The libtorch translation units (*.torch*.cpp) are left out: clang 14 cannot parse libtorch
# 1.13's headers with GCC 12's library (GCC builds them).
tidy: $(BUILD)/build.ninja
	run-clang-tidy -quiet -p $(BUILD) $$(git ls-files 'src/*.cpp' | grep -v '\.fuzz\.cpp$$' | grep -v '\.torch\.')

clean:
	rm -rf $(BUILD)
