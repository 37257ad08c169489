# Thin wrapper over CMake. `make` builds, `make test` runs the whole suite,
# `make demo` runs the demo. BUILD_DIR and CMAKE_ARGS may be overridden.
BUILD_DIR ?= build
CMAKE_ARGS ?=
JOBS ?= $(shell nproc)

.PHONY: all configure test demo clean format fuzz

all: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

configure:
	@test -f $(BUILD_DIR)/CMakeCache.txt || cmake -S . -B $(BUILD_DIR) -G Ninja $(CMAKE_ARGS)

test: all
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) $(CTEST_ARGS)

demo: all
	$(BUILD_DIR)/tools/ferry-run/ferry-run -n 4 $(BUILD_DIR)/examples/ferry-demo

format:
	clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD_DIR)
