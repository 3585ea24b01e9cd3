# Makefile: builds accel-lua (the program), accel.so (the Lua module) and the
# C unit tests, and runs the test suites. Everything goes under $(BUILD).
#
#   make             build/accel-lua, build/accel.so, build/libaccel-core.a, build/test_*
#   make deps        install missing Debian packages (scripts/install-deps.sh)
#   make test        deps, all, then scripts/run-tests.sh build
#   make run         deps, all, then trains the Fashion-MNIST MLP (examples/fashion_mnist.lua)
#   make asan-test   ASan+UBSan build in build/asan/, then the same tests
#   make fuzz        libFuzzer runs of the file readers (clang; not part of
#                    make test), FUZZ_SECONDS (default 30) per reader
#   make install     program, accel.so and man pages under PREFIX (default
#                    /usr/local), staged under DESTDIR; make uninstall
#   make deb         build/accel-lua_VERSION_amd64.deb (scripts/make-deb.sh)
#   make LUA=luajit  the same against LuaJIT 2.1 in build/luajit (docs/luajit.md)
#   make CUDA=1      also the CUDA build in $(BUILD)/cuda (all GPU targets; docs/gpu.md)
#   make cuda-ci     the CUDA build when a CUDA toolkit is installed, else a note (make test)
#   make clean

BUILD ?= build

# CUDA ?= 0: `make CUDA=1` adds the GPU build (the CUDA section below); the
# CPU build never needs CUDA.
CUDA ?= 0

CC := gcc
LUA ?= lua5.4
OPTFLAGS ?= -O3
SANFLAGS ?=
OMPFLAGS ?= -fopenmp
# Everything runs on the baseline x86-64; the CPU kernels are built once
# more for x86-64-v3 and picked at load time (KERNEL_VARIANTS below).
MARCH ?= -march=x86-64
CFLAGS := -std=c11 -D_GNU_SOURCE $(OPTFLAGS) $(MARCH) $(OMPFLAGS) -fno-math-errno \
          -Wall -Wextra -Werror -fPIC -g $(SANFLAGS)
CPPFLAGS := -I. -Ikernels -I/usr/include/lua5.4 -I/usr/lib/x86_64-linux-gnu/openmpi/include
DEPFLAGS = -MMD -MP
LDFLAGS := $(OMPFLAGS) $(SANFLAGS)
# accel.so leaves the Lua API to the interpreter that loads it (Debian's
# lua5.4 has Lua linked in statically; a second copy of Lua would break it).
LIBS_NOLUA := -ldnnl -lopenblas -lgomp -lm -lz -ldl -lcurl
LIBS := -llua5.4 -lyaml $(LIBS_NOLUA)
# The program alone: the REPL's line editing (host/repl.c).
PROGRAM_LIBS := -lreadline

ASAN_FLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer \
              -fno-sanitize-recover=undefined

# ---- LuaJIT (docs/luajit.md) ----
# `make LUA=luajit` builds accel-lua, accel.so and the C tests against
# LuaJIT 2.1 (Debian's libluajit-5.1-dev) in build/luajit (BUILD= still
# wins), next to the Lua 5.4 build. The C side reads bindings/lua_compat.h;
# scripts/embed-lua.lua runs under luajit there, so a library file outside
# LuaJIT's syntax fails that build. `make luajit` is the program and module
# only (what `make test` adds, target luajit-ci, for run-tests.sh's LuaJIT
# pass: BUILD/luajit). `make test LUA=luajit` runs the busted specs alone
# (run-tests.sh asks the program which interpreter it has).
ifeq ($(LUA),luajit)
ifeq ($(origin BUILD),file)
BUILD := build/luajit
endif
CPPFLAGS := $(subst -I/usr/include/lua5.4,-I/usr/include/luajit-2.1,$(CPPFLAGS))
LIBS := $(subst -llua5.4,-lluajit-5.1,$(LIBS))
endif
LUAJIT_BUILD := $(if $(filter luajit,$(LUA)),$(BUILD),$(BUILD)/luajit)

.PHONY: luajit luajit-ci
luajit: deps
	$(MAKE) --no-print-directory LUA=luajit BUILD=$(LUAJIT_BUILD) $(LUAJIT_BUILD)/accel-lua $(LUAJIT_BUILD)/accel.so

# make test: the LuaJIT program too (a LuaJIT `make test` builds itself).
luajit-ci: deps
ifneq ($(LUA),luajit)
	$(MAKE) --no-print-directory luajit
endif
test: luajit-ci
# ---- end LuaJIT ----

OBJ := $(BUILD)/obj
GEN := $(BUILD)/gen

# kernels/cpu/*.c except threads.c (OpenMP settings, no loops) are the
# dispatched kernels: one object per variant (see kernel_variant_rule).
KERNEL_SRC := $(filter-out kernels/cpu/threads.c,$(wildcard kernels/cpu/*.c))
KERNEL_VARIANTS := v3 base
MARCH_v3 := -march=x86-64-v3
MARCH_base := -march=x86-64
KERNEL_OBJ := $(foreach v,$(KERNEL_VARIANTS),$(KERNEL_SRC:%.c=$(OBJ)/%.$(v).o)) $(OBJ)/gen/kernel_dispatch.o
# core/ holds tensors, autograd and the ops; its folders hold the seams:
# core/backend (the device interface and the CPU, sim and CUDA backends),
# core/dist (communicators, DDP, the sharding engine), core/io (file formats).
CORE_SRC := $(filter-out core/dist/dist_nccl.c core/backend/backend_cuda.c,$(wildcard core/*.c core/*/*.c)) \
            kernels/cpu/threads.c
BIND_SRC := $(wildcard bindings/*.c)
HOST_SRC := $(wildcard host/*.c)
TEST_SRC := $(wildcard tests/c/test_*.c)
LUA_LIB := $(sort $(shell find bindings/lua -type f -name '*.lua' 2>/dev/null))

CORE_OBJ := $(CORE_SRC:%.c=$(OBJ)/%.o) $(KERNEL_OBJ)
BIND_OBJ := $(BIND_SRC:%.c=$(OBJ)/%.o) $(OBJ)/gen/embedded_lua.o
HOST_OBJ := $(HOST_SRC:%.c=$(OBJ)/%.o)
TEST_OBJ := $(TEST_SRC:%.c=$(OBJ)/%.o)
TEST_BIN := $(TEST_SRC:tests/c/%.c=$(BUILD)/%)

PROGRAM := $(BUILD)/accel-lua
MODULE := $(BUILD)/accel.so
CORE_LIB := $(BUILD)/libaccel-core.a

.PHONY: all deps test run asan-test fuzz fuzz-bins clean FORCE
.DEFAULT_GOAL := all

all: $(PROGRAM) $(MODULE) $(CORE_LIB) $(TEST_BIN)
ifeq ($(CUDA),1)
all: cuda
endif

$(PROGRAM): $(HOST_OBJ) $(BIND_OBJ) $(CORE_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(PROGRAM_LIBS)

$(MODULE): $(BIND_OBJ) $(CORE_OBJ) bindings/accel.map
	$(CC) $(LDFLAGS) -shared -Wl,--version-script=bindings/accel.map -o $@ $(BIND_OBJ) $(CORE_OBJ) $(LIBS_NOLUA)

# The C runtime alone, for C programs (docs/embedding.md): link with
# $(LIBS_NOLUA) -fopenmp, include core/*.h.
$(CORE_LIB): $(CORE_OBJ)
	rm -f $@
	$(AR) rcs $@ $^

$(BUILD)/test_%: $(OBJ)/tests/c/test_%.o $(CORE_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS)

$(OBJ)/%.o: %.c $(BUILD)/flags.txt
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(TEST_OBJ): CPPFLAGS += -Icore
# The C tests call F16C / AVX2 intrinsics directly as references, so they
# are built for (and run on) x86-64-v3 machines; the program does not
# need that.
$(TEST_OBJ): CFLAGS := $(filter-out -march=%,$(CFLAGS)) $(MARCH_v3)

# The compiler flags of this build: when they change (MARCH=, OPTFLAGS=,
# a Makefile edit), every object is compiled again, never mixed.
$(BUILD)/flags.txt: FORCE
	@mkdir -p $(@D)
	@echo '$(CC) $(CPPFLAGS) $(CFLAGS) $(MARCH_v3) $(MARCH_base)' > $@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi

# The CUDA caching allocator's bookkeeping is plain C, tested on the CPU.
$(BUILD)/test_cuda_alloc: $(OBJ)/kernels/cuda/alloc_cache.o $(OBJ)/kernels/cuda/error.o

# The embedded Lua library. The .list file changes only when the set of
# library files does, so adding or removing a file also regenerates.
$(GEN)/embedded_lua.list: FORCE
	@mkdir -p $(@D)
	@printf '%s\n' $(LUA_LIB) > $@.new
	@if cmp -s $@.new $@; then rm -f $@.new; else mv -f $@.new $@; fi

$(GEN)/embedded_lua.c: scripts/embed-lua.lua $(GEN)/embedded_lua.list $(LUA_LIB)
	$(LUA) scripts/embed-lua.lua $@ bindings/lua $(LUA_LIB)

$(OBJ)/gen/embedded_lua.o: $(GEN)/embedded_lua.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c -o $@ $<

deps:
	scripts/install-deps.sh

test: deps
	$(MAKE) all
	$(MAKE) cuda-ci
	scripts/run-tests.sh $(BUILD)

run: deps
	$(MAKE) all
	$(PROGRAM) examples/fashion_mnist.lua mlp

# Sanitizer build: its own tree, same runner, leak detection on. Leak
# reports from system libraries (not ours) are filtered by scripts/lsan.supp
# (read it for what is and is not suppressed, and why). The quarantine is
# kept small so memory_spec's flat-RSS check measures us, not ASan's
# deferred frees (256 MB by default).
asan-test: deps
	$(MAKE) all BUILD=build/asan OPTFLAGS="-O1 -g" SANFLAGS="$(ASAN_FLAGS)"
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:quarantine_size_mb=4:allocator_may_return_null=1 \
	LSAN_OPTIONS=suppressions=$(CURDIR)/scripts/lsan.supp:print_suppressions=0 \
	UBSAN_OPTIONS=print_stacktrace=1 \
	OMPI_MCA_mca_base_component_disable_dlclose=1 \
	ACCEL_TEST_NO_CUDA="the sanitizer build has no CUDA part (make test builds it)" \
	scripts/run-tests.sh build/asan

# Fuzzing: each tests/fuzz/fuzz_NAME.c is a libFuzzer target linked with
# the core (and, for yaml, the config reader), built by clang in its own
# tree with ASan+UBSan. OpenMP pragmas are left serial there
# (-fopenmp=libgomp: libgomp's API, no parallel code generation), as
# clang's OpenMP runtime is not the one the libraries use. clang comes from
# `scripts/install-deps.sh --fuzz`, so make test never needs it.
# scripts/run-fuzz.sh runs each target for FUZZ_SECONDS from the seed corpus
# in tests/fuzz/corpus/NAME (new inputs go to build/fuzz/corpus/NAME).
FUZZ_SECONDS ?= 30
FUZZ_OMP := -fopenmp=libgomp
# (thread counts that feed only the pragmas are unused there; gcc-only
# attributes are ignored)
FUZZ_SAN := -fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined \
            -Wno-unused-variable -Wno-unused-but-set-variable -Wno-unknown-attributes
FUZZ_SRC := $(wildcard tests/fuzz/fuzz_*.c)
FUZZ_BIN := $(FUZZ_SRC:tests/fuzz/%.c=$(BUILD)/%)
FUZZ_HOST_OBJ := $(OBJ)/host/config_yaml.o $(OBJ)/host/settings.o $(OBJ)/host/unsupported.o $(OBJ)/host/rank_log.o $(OBJ)/host/rank.o

fuzz:
	scripts/install-deps.sh --fuzz
	$(MAKE) fuzz-bins BUILD=build/fuzz CC=clang OPTFLAGS="-O1 -g" OMPFLAGS="$(FUZZ_OMP)" SANFLAGS="$(FUZZ_SAN)"
	scripts/run-fuzz.sh build/fuzz $(FUZZ_SECONDS)

fuzz-bins: $(FUZZ_BIN)

$(BUILD)/fuzz_%: $(OBJ)/tests/fuzz/fuzz_%.o $(CORE_OBJ) $(FUZZ_HOST_OBJ)
	$(CC) $(LDFLAGS) -fsanitize=fuzzer -o $@ $^ $(LIBS)

$(FUZZ_SRC:%.c=$(OBJ)/%.o): CPPFLAGS += -Icore

# ---- CUDA ----
# kernels/cuda/*.cu (nvcc) and *.c, core/dist/dist_nccl.c, core/backend/backend_cuda.c
# (the cuda backend: it fills backend_for's weak hook, so the core objects
# are the CPU build's), linked with the core, cudart (static), cuBLASLt and
# NCCL of $(CUDA_HOME), into $(BUILD)/cuda: the program accel-lua, the
# backend conformance test test_backend (run it as `test_backend cuda`) and
# the CUDA test binary tests/cuda/test_cuda.c. Warnings are errors
# in host and device code. Targets: sm_80 and sm_90 machine code plus
# compute_90 PTX (newer GPUs JIT it). `make test` builds the same (target
# cuda-ci: measured 118 s wall / 37 s CPU for all three targets on the
# 2-core build machine under a load of 15, well under the 3 minutes that
# would call for one target in CI) and skips, saying so, when
# $(CUDA_HOME) has no nvcc.
# CUDA_GENCODE="-gencode arch=compute_80,code=sm_80" builds one target.
# -fmad=false: device code rounds a product before adding it, as the CPU
# build does (-std=c11 contracts nothing); fused multiply-adds only where
# a kernel writes fmaf / fma, as its CPU twin does.
CUDA_HOME ?= /usr/local/cuda
NVCC := $(CUDA_HOME)/bin/nvcc
CUDA_GENCODE_ALL := -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 \
                    -gencode arch=compute_90,code=compute_90
CUDA_GENCODE ?= $(CUDA_GENCODE_ALL)
CUDA_BUILD ?= $(BUILD)/cuda
NVCCFLAGS := -std=c++17 -O3 -fmad=false $(CUDA_GENCODE) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror,-fPIC \
             -I. -Ikernels -I$(CUDA_HOME)/include
CUDA_CPPFLAGS := $(CPPFLAGS) -I$(CUDA_HOME)/include
CUDA_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart_static -lcublasLt -lnccl -lrt -lpthread -lstdc++
CUDA_CU_SRC := $(wildcard kernels/cuda/*.cu)
CUDA_C_SRC := $(wildcard kernels/cuda/*.c) core/dist/dist_nccl.c core/backend/backend_cuda.c
CUDA_OBJ := $(CUDA_CU_SRC:%.cu=$(CUDA_BUILD)/obj/%.o) $(CUDA_C_SRC:%.c=$(CUDA_BUILD)/obj/%.o)
CUDA_TEST := $(CUDA_BUILD)/test_cuda
CUDA_PROGRAM := $(CUDA_BUILD)/accel-lua
CUDA_TEST_BACKEND := $(CUDA_BUILD)/test_backend

.PHONY: cuda cuda-ci
cuda: $(CUDA_TEST) $(CUDA_PROGRAM) $(CUDA_TEST_BACKEND)

cuda-ci:
	@if [ -x $(NVCC) ]; then \
	    $(MAKE) --no-print-directory cuda; \
	else \
	    echo "cuda-ci: no CUDA toolkit at $(CUDA_HOME) (no $(NVCC)): the CUDA build is skipped"; \
	fi

$(CUDA_TEST): $(CUDA_BUILD)/obj/tests/cuda/test_cuda.o $(CUDA_BUILD)/obj/tests/cuda/host_ops.o $(CUDA_OBJ) $(CORE_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(CUDA_LIBS)

$(CUDA_PROGRAM): $(HOST_OBJ) $(BIND_OBJ) $(CORE_OBJ) $(CUDA_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(PROGRAM_LIBS) $(CUDA_LIBS)

$(CUDA_TEST_BACKEND): $(OBJ)/tests/c/test_backend.o $(CORE_OBJ) $(CUDA_OBJ)
	$(CC) $(LDFLAGS) -o $@ $^ $(LIBS) $(CUDA_LIBS)

$(CUDA_BUILD)/obj/%.o: %.cu
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -c -o $@ $<

$(CUDA_BUILD)/obj/%.o: %.c
	@mkdir -p $(@D)
	$(CC) $(CUDA_CPPFLAGS) $(CFLAGS) $(DEPFLAGS) -c -o $@ $<

$(CUDA_BUILD)/obj/tests/cuda/test_cuda.o: CUDA_CPPFLAGS += -Icore

-include $(wildcard $(CUDA_BUILD)/obj/*/*/*.d $(CUDA_BUILD)/obj/*/*.d)

clean:
	rm -rf build

FORCE:

-include $(patsubst %.o,%.d,$(CORE_OBJ) $(BIND_OBJ) $(HOST_OBJ) $(TEST_OBJ) $(FUZZ_SRC:%.c=$(OBJ)/%.o))

# Installation. `make install PREFIX=/usr/local DESTDIR=/tmp/stage` copies
# the program, accel.so and the man pages; `make uninstall` (same PREFIX
# and DESTDIR) removes exactly the files install lists in INSTALL_FILES
# (`make install-files` prints them). accel.so goes where
# Debian's lua5.4 looks for C modules: its package.cpath has
# /usr/local/lib/lua/5.4/?.so (for PREFIX=/usr/local) and
# /usr/lib/x86_64-linux-gnu/lua/5.4/?.so (for PREFIX=/usr, the .deb).
PREFIX ?= /usr/local
DESTDIR ?=
BINDIR ?= $(PREFIX)/bin
MANDIR ?= $(PREFIX)/share/man
LUA_CMOD_DIR ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/x86_64-linux-gnu/lua/5.4,$(PREFIX)/lib/lua/5.4)
MAN_PAGES := $(wildcard man/*.1)
INSTALL_FILES := $(BINDIR)/accel-lua $(LUA_CMOD_DIR)/accel.so \
                 $(MAN_PAGES:man/%=$(MANDIR)/man1/%)

.PHONY: install uninstall install-files deb linked-objects

install: $(PROGRAM) $(MODULE)
	install -d "$(DESTDIR)$(BINDIR)" "$(DESTDIR)$(LUA_CMOD_DIR)" "$(DESTDIR)$(MANDIR)/man1"
	install -m 0755 $(PROGRAM) "$(DESTDIR)$(BINDIR)/accel-lua"
	install -m 0644 $(MODULE) "$(DESTDIR)$(LUA_CMOD_DIR)/accel.so"
	install -m 0644 $(MAN_PAGES) "$(DESTDIR)$(MANDIR)/man1/"

# uninstall removes the files and, when they are left empty, only the Lua
# module directories (nothing else uses them); bin/ and share/man/man1 are
# system directories on Debian (base-files makes them) and stay.
LUA_CMOD_DIRS := $(LUA_CMOD_DIR) $(patsubst %/,%,$(dir $(LUA_CMOD_DIR)))

uninstall:
	rm -f $(addprefix "$(DESTDIR),$(addsuffix ",$(INSTALL_FILES)))
	for d in $(LUA_CMOD_DIRS); do \
	    if [ -d "$(DESTDIR)$$d" ]; then rmdir --ignore-fail-on-non-empty "$(DESTDIR)$$d"; fi; \
	done

# The installed paths, one a line (scripts/test-install.sh compares them).
install-files:
	@printf '%s\n' $(INSTALL_FILES)

# A Debian package of this build: $(BUILD)/accel-lua_VERSION_ARCH.deb
# (scripts/make-deb.sh says what goes in; needs dpkg-dev).
deb: $(PROGRAM) $(MODULE)
	scripts/make-deb.sh $(BUILD)

# Kernels for every x86-64, fast where the CPU allows: each file of
# KERNEL_SRC is compiled once per variant (v3: -march=x86-64-v3, AVX2 + FMA
# + F16C; base: the baseline x86-64, where kernels/cpu/simd.h lets SIMDe
# stand in for the intrinsics), and each copy's global functions get the
# variant as a suffix (k_add -> k_add_v3, k_add_base; objcopy). The
# generated $(GEN)/kernel_dispatch.c defines every original name as a GNU
# ifunc whose resolver (kernels/cpu/dispatch.h) picks the v3 copy when the
# CPU has x86-64-v3, once, when the program or accel.so is loaded. The
# resolver runs before sanitizers start, so that file is never
# instrumented.

# kernel_variant_rule V: the compile-and-rename rule of variant V.
define kernel_variant_rule
$$(OBJ)/kernels/cpu/%.$(1).o: kernels/cpu/%.c $$(BUILD)/flags.txt
	@mkdir -p $$(@D)
	$$(CC) $$(CPPFLAGS) $$(filter-out -march=%,$$(CFLAGS)) $$(MARCH_$(1)) -Wno-psabi -MMD -MP -MT $$@ -MF $$(@:.o=.d) -c -o $$@.raw $$<
	nm --defined-only -g $$@.raw | awk '$$$$2 == "T" { print $$$$3, $$$$3 "_$(1)" }' >$$@.syms
	objcopy --redefine-syms=$$@.syms $$@.raw $$@
endef
$(foreach v,$(KERNEL_VARIANTS),$(eval $(call kernel_variant_rule,$(v))))

$(GEN)/kernel_dispatch.c: $(KERNEL_SRC:%.c=$(OBJ)/%.v3.o)
	@mkdir -p $(@D)
	{ echo '/* generated by the Makefile: one ifunc per kernel function */'; \
	  echo '#include "kernels/cpu/dispatch.h"'; \
	  cat $(KERNEL_SRC:%.c=$(OBJ)/%.v3.o.syms) | awk '{ print "DISPATCH(" $$1 ")" }'; } >$@

# The objects of accel-lua and accel.so (scripts/check-baseline.sh reads them).
linked-objects:
	@echo $(sort $(HOST_OBJ) $(BIND_OBJ) $(CORE_OBJ))

$(OBJ)/gen/kernel_dispatch.o: $(GEN)/kernel_dispatch.c kernels/cpu/dispatch.h
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) $(filter-out -fsanitize% -fno-sanitize%,$(CFLAGS)) -c -o $@ $<
