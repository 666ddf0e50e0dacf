# The two commands of README.md: `make demo` and `make test`. Each installs what is missing
# (scripts/install-deps.sh), configures and builds into build/, then runs.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
ARGS ?=

.PHONY: all deps configure build test demo bench fuzz format clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 600

demo: build
	./$(BUILD)/cli/kvcascade demo $(ARGS)

bench: build
	./$(BUILD)/bench/bench_prefix_index

# The libFuzzer campaign (clang-14, ASan + UBSan, separate build dir): every fuzz/ target for
# FUZZ_SECONDS each, then its corpus minimised back into fuzz/corpus/ (scripts/fuzz.sh).
FUZZ_SECONDS ?= 600
fuzz: deps
	FUZZ_SECONDS=$(FUZZ_SECONDS) bash scripts/fuzz.sh $(FUZZ_TARGETS)

format:
	git ls-files '*.h' '*.cc' '*.cu' '*.cuh' | xargs clang-format -i

clean:
	rm -rf $(BUILD)
