# Tide's two commands, wrapping CMake:
#   make demo   installs what is missing, builds, runs the main example
#   make test   installs what is missing, builds, runs every C test and spec,
#               then the C tests and specs again under AddressSanitizer + UBSan,
#               and the C tests under ThreadSanitizer
# `make` alone builds build/tide, the REPL and script runner (repl/tide.c).
# `make install` installs libtide, tide.h, the pkg-config files, the Lua module
# and `tide` under PREFIX (default /usr/local; DESTDIR is honoured).
BUILD    ?= build
JOBS     ?= $(shell nproc 2>/dev/null || echo 2)
BUSTED   := luajit /usr/bin/busted

.PHONY: all deps build install demo test test-c test-specs test-asan test-tsan bench bench-cuda sz clean
PREFIX   ?= /usr/local

all: build

deps:
	@tools/setup-deps

$(BUILD)/CMakeCache.txt:
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null

build: deps $(BUILD)/CMakeCache.txt
	@cmake --build $(BUILD) -j$(JOBS) >$(BUILD)/build.log 2>&1 || { cat $(BUILD)/build.log; exit 1; }

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

demo: build
	$(BUILD)/tide examples/fashion_mnist.lua

test: build test-c test-specs test-asan test-tsan

test-c:
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

test-specs:
	$(BUILD)/tide /usr/bin/busted -o utfTerminal spec
	@# again with another default device: the specs must not assume "cpu", as
	@# on a GPU machine they run with TIDE_DEFAULT_DEVICE=cuda:0 (tools/gpu-session)
	TIDE_DEFAULT_DEVICE=cpu:1 $(BUILD)/tide /usr/bin/busted -o utfTerminal spec
	@# and on cuda:0 of the fake device (runtime/tests/fake_backend.c, host memory
	@# and the CPU's kernels): libtide's CUDA paths, every spec, without a GPU
	TIDE_CUDA_LIBRARY=$(abspath $(BUILD))/libtide_fakecuda.so TIDE_DEFAULT_DEVICE=cuda:0 $(BUILD)/tide /usr/bin/busted -o utfTerminal spec
	@# a model on the second of two fake devices keeps everything there
	TIDE_CUDA_LIBRARY=$(abspath $(BUILD))/libtide_fakecuda.so TIDE_FAKE_DEVICES=2 TIDE_SPEC_DEVICE=cuda:1 \
	  $(BUILD)/tide /usr/bin/busted -o utfTerminal spec/device_placement_spec.lua

build-asan/CMakeCache.txt:
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTIDE_SANITIZE=address,undefined -DTIDE_CUDA=OFF >/dev/null

test-asan: deps build-asan/CMakeCache.txt
	@cmake --build build-asan -j$(JOBS) >build-asan/build.log 2>&1 || { cat build-asan/build.log; exit 1; }
	cd build-asan && UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j$(JOBS)
	@# the specs too, with libtide built with the sanitizers preloaded into LuaJIT
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  build-asan/tide /usr/bin/busted -o utfTerminal spec
	@# and on the fake device's cuda:0: libtide's device paths under the sanitizers
	LD_PRELOAD="$$(gcc -print-file-name=libasan.so) $$(gcc -print-file-name=libubsan.so)" \
	  ASAN_OPTIONS=detect_leaks=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  TIDE_CUDA_LIBRARY=$(abspath build-asan)/libtide_fakecuda.so TIDE_DEFAULT_DEVICE=cuda:0 \
	  build-asan/tide /usr/bin/busted -o utfTerminal spec

build-tsan/CMakeCache.txt:
	@cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DTIDE_SANITIZE=thread -DTIDE_CUDA=OFF >/dev/null

# The engine's C tests (and the others) under ThreadSanitizer.
test-tsan: deps build-tsan/CMakeCache.txt
	@cmake --build build-tsan -j$(JOBS) >build-tsan/build.log 2>&1 || { cat build-tsan/build.log; exit 1; }
	cd build-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 ctest --output-on-failure -j$(JOBS)

bench: build
	bench/startup_bench.sh $(BUILD)/tide
	$(BUILD)/tide bench/ops_bench.lua
	$(BUILD)/tide bench/engine_bench.lua
	$(BUILD)/tide bench/transcend_bench.lua
	$(BUILD)/tide bench/conv_bench.lua
	$(BUILD)/tide bench/train_bench.lua
	$(BUILD)/tide bench/jit_bench.lua
	$(BUILD)/tide bench/sort_bench.lua
	$(BUILD)/tide bench/linalg_bench.lua
	$(BUILD)/tide bench/sweep_bench.lua

# The GPU figures (bench/cuda_bench.lua), each next to cuBLAS called directly
# (tide_cuda_ref) and PyTorch on the same GPU; says why and exits 0 without one.
bench-cuda: build
	$(BUILD)/tide bench/cuda_bench.lua

sz:
	@for d in runtime/include runtime/src/core runtime/src/ops runtime/src/engine runtime/src/autograd runtime/src/graph runtime/src/io bindings lua/tide repl spec; do \
	  printf '%6d %s\n' $$(cat $$(find $$d -type f) | wc -l) $$d; done

clean:
	rm -rf $(BUILD) build-asan build-tsan
