# gtrain - see README.md.  make | make test | make test-asan | make cuda-check | make demo | make bench
BUILD    ?= build
CC       ?= gcc
CUDA     ?= auto
MPI      ?= auto
NCCL     ?= auto
ARCH_FLAGS ?= -march=native
OPT      ?= -O3
CUDA_ARCH ?= -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
SAN      ?=

comma    := ,
PKGS     := yaml-0.1 libcjson openblas oniguruma libutf8proc icu-uc
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS   := $(shell pkg-config --libs $(PKGS) 2>/dev/null)
# the parquet reader's codecs (snappy has no pkg-config file in Debian)
PKG_LIBS   += -lsnappy -lzstd -lz
CRIT_CFLAGS := $(shell pkg-config --cflags criterion 2>/dev/null)
CRIT_LIBS   := $(shell pkg-config --libs criterion 2>/dev/null)

WARN     := -Wall -Wextra -Wshadow -Wno-unused-parameter
CFLAGS   += -std=c11 $(OPT) $(ARCH_FLAGS) -g -fopenmp -fno-math-errno -D_GNU_SOURCE $(WARN) $(PKG_CFLAGS) $(SRC_INC) $(SAN)
# -rdynamic: the CUDA backend module (below) calls back into the executable (gt_error, backend_alloc ...)
LDLIBS   += $(PKG_LIBS) -fopenmp -lmvec -lm -ldl -rdynamic $(SAN)

# CUDA backend: built when nvcc is found (CUDA=0 leaves it out, CUDA=1 insists).
NVCC ?= $(shell command -v nvcc 2>/dev/null || (test -x /usr/local/cuda/bin/nvcc && echo /usr/local/cuda/bin/nvcc))
ifeq ($(CUDA),auto)
  ifneq ($(NVCC),)
    CUDA := 1
  else
    CUDA := 0
  endif
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
# CUDA sources always compile with warnings as errors (CI checks this without a GPU).
# The CUDA backend is a module, $(BUILD)/libgtrain-cuda.so (src/backend/cuda_module.h), that gtrain
# opens with dlopen when a run asks for CUDA: only it links cuBLAS, cuBLASLt, cudart and NCCL. Its
# code is position independent and hidden but for the one entry point.
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH) $(SRC_INC) -Werror all-warnings -Xcompiler -Wall,-Wextra,-Wno-unused-parameter,-Werror \
             -Xcompiler -fPIC,-fvisibility=hidden
CU_SRCS  := $(wildcard cuda/*.cu)
ifeq ($(CUDA),1)
  CFLAGS  += -DGT_HAVE_CUDA
  NVCCFLAGS += -DGT_HAVE_CUDA
  CU_OBJS := $(patsubst cuda/%.cu,$(BUILD)/cuda/%.o,$(CU_SRCS))
  CUDA_MODULE := $(BUILD)/libgtrain-cuda.so $(BUILD)/libgtrain-cuda-probe.so
  CUDA_LDLIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcublas -lcudart_static -ldl -lrt -lpthread -lstdc++ -lm
else
  CU_OBJS :=
  CUDA_MODULE :=
endif

# NCCL (data parallel on the CUDA backend, cuda/dist_nccl.cu): built when CUDA is and nccl.h is
# found in NCCL_HOME (default: the CUDA toolkit), /usr/include or /usr/local/include. NCCL=0 leaves
# it out (dist_nccl.cu then compiles to nothing); NCCL=1 insists.
ifneq ($(CUDA),1)
  ifeq ($(NCCL),1)
    $(error NCCL=1 needs the CUDA backend (CUDA=1))
  endif
  NCCL := 0
endif
NCCL_HOME ?= $(firstword $(patsubst %/include/nccl.h,%,$(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h /usr/local/include/nccl.h)))
ifeq ($(NCCL),auto)
  NCCL := $(if $(NCCL_HOME),1,0)
endif
ifeq ($(NCCL),1)
  ifeq ($(wildcard $(NCCL_HOME)/include/nccl.h),)
    $(error NCCL=1 but nccl.h was not found (set NCCL_HOME, or apt-get install libnccl-dev))
  endif
  CFLAGS    += -DGT_HAVE_NCCL
  NVCCFLAGS += -DGT_HAVE_NCCL -I$(NCCL_HOME)/include
  NCCL_LIBDIR := $(firstword $(wildcard $(NCCL_HOME)/lib64/libnccl.so $(NCCL_HOME)/lib/libnccl.so $(NCCL_HOME)/lib/x86_64-linux-gnu/libnccl.so /usr/lib/x86_64-linux-gnu/libnccl.so))
  CUDA_LDLIBS += $(if $(NCCL_LIBDIR),-L$(dir $(NCCL_LIBDIR)) -Wl$(comma)-rpath$(comma)$(dir $(NCCL_LIBDIR))) -lnccl
endif

# MPI (data parallel on the CPU backend): built when Open MPI's mpicc is found (MPI=0 leaves it out).
# A run without a launcher never starts MPI, so linking it costs a plain run nothing.
MPICC ?= $(shell command -v mpicc 2>/dev/null)
ifeq ($(MPI),auto)
  MPI := $(if $(MPICC),1,0)
endif
ifeq ($(MPI),1)
  ifeq ($(MPICC),)
    $(error MPI=1 but mpicc was not found (apt-get install libopenmpi-dev openmpi-bin))
  endif
  CFLAGS += -DGT_HAVE_MPI $(shell $(MPICC) --showme:compile)
  LDLIBS += $(shell $(MPICC) --showme:link)
endif

SRC_DIRS := src src/tokenizer src/model src/io src/run src/backend
SRC_INC  := $(addprefix -I,$(SRC_DIRS))
SRC_HDRS := $(wildcard $(addsuffix /*.h,$(SRC_DIRS)))
SRCS     := $(wildcard $(addsuffix /*.c,$(SRC_DIRS)))
OBJS     := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(SRCS))
LIB_OBJS := $(filter-out $(BUILD)/obj/main.o,$(OBJS))
TEST_SRCS := $(wildcard tests/*.c)
TEST_OBJS := $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(TEST_SRCS))

.PHONY: all test test-asan cuda-check demo bench clean help-config-doc
all: $(BUILD)/gtrain $(CUDA_MODULE)

# (the module with it: a script that asks for build/gtrain gets what device: cuda loads)
$(BUILD)/gtrain: $(OBJS) | $(CUDA_MODULE)
	$(CC) -o $@ $^ $(LDLIBS)

# the CUDA backend module, found beside the executables of $(BUILD) (gtrain, test_gtrain, bench_*),
# and its device probe (cudart only: what device: auto and --version load)
$(BUILD)/libgtrain-cuda.so: $(CU_OBJS)
	$(CC) -shared -o $@ $^ $(CUDA_LDLIBS)
$(BUILD)/libgtrain-cuda-probe.so: $(BUILD)/cuda/device_probe.o
	$(CC) -shared -o $@ $^ -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt -lpthread -lstdc++

# Objects depend on the flags they were built with (CUDA=0/1, sanitizers, MPI): a change rebuilds.
FLAGS_STAMP := $(BUILD)/flags.stamp
$(shell mkdir -p $(BUILD) && echo '$(CC) $(CFLAGS) $(NVCCFLAGS)' | cmp -s - $(FLAGS_STAMP) || echo '$(CC) $(CFLAGS) $(NVCCFLAGS)' > $(FLAGS_STAMP))

$(BUILD)/obj/%.o: src/%.c $(SRC_HDRS) $(FLAGS_STAMP) | $(BUILD)/obj
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -c -o $@ $<

$(BUILD)/cuda/%.o: cuda/%.cu $(wildcard cuda/*.cuh) $(SRC_HDRS) $(FLAGS_STAMP) | $(BUILD)/cuda
	$(NVCC) $(NVCCFLAGS) -c -o $@ $<

$(BUILD)/tests/%.o: tests/%.c $(SRC_HDRS) $(wildcard tests/*.h) $(FLAGS_STAMP) | $(BUILD)/tests
	$(CC) $(CFLAGS) $(CRIT_CFLAGS) -Itests -c -o $@ $<

$(BUILD)/test_gtrain: $(TEST_OBJS) $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) -o $@ $^ $(CRIT_LIBS) $(LDLIBS)

$(BUILD)/obj $(BUILD)/cuda $(BUILD)/tests:
	mkdir -p $@

# The gradient all-reduce fp32 vs ddp_grad_dtype bf16, timed under mpirun by make bench.
$(BUILD)/bench_dist: bench/bench_dist.c src/run/dist.c src/common.c $(SRC_HDRS) $(FLAGS_STAMP) | $(BUILD)/obj
	$(CC) $(CFLAGS) -o $@ bench/bench_dist.c src/run/dist.c src/common.c $(LDLIBS)

# A small MPI program that exercises every collective of dist.c (tests/test_dist.c runs it).
$(BUILD)/dist_probe: tests/mpi/dist_probe.c src/run/dist.c src/common.c $(SRC_HDRS) $(FLAGS_STAMP) | $(BUILD)/obj
	$(CC) $(CFLAGS) -o $@ tests/mpi/dist_probe.c src/run/dist.c src/common.c $(LDLIBS)

# The test binary finds gtrain and the repo through these variables.
# GOMP_SPINCOUNT: Criterion runs tests in parallel, so OpenMP threads share the cores (see
# cpu_runtime_setup in src/backend/blas_setup.c). OPENBLAS_CORETYPE: the kernel gtrain chooses on this CPU
# (bench_step --blas-core), so the op tests check the GEMMs gtrain's runs use.
# bench_step, bench_svd, bench_pack, bench_nf4 and bench_decode are built (not run) so that a change that breaks the benchmark fails the tests
# GTRAIN_REFS_PY: the Python of the test references (scripts/install-deps.sh --test-refs), whose
# programs run through a fork server (scripts/with-refs-server.sh: torch & co. imported once). The closing
# line counts passed, failed and skipped tests (scripts/tap-summary.sh), naming each skip.
test: $(BUILD)/gtrain $(CUDA_MODULE) $(BUILD)/test_gtrain $(BUILD)/dist_probe $(BUILD)/bench_step $(BUILD)/bench_svd $(BUILD)/bench_pack $(BUILD)/bench_nf4 $(BUILD)/bench_decode
	GTRAIN_REFS_PY="$${GTRAIN_REFS_PY:-$$(scripts/install-deps.sh --venv-path)/bin/python}" \
	GOMP_SPINCOUNT=$${GOMP_SPINCOUNT:-1000} GTRAIN_BIN=$(abspath $(BUILD)/gtrain) GTRAIN_ROOT=$(CURDIR) \
	OPENBLAS_CORETYPE="$${OPENBLAS_CORETYPE:-$$($(BUILD)/bench_step --blas-core)}" \
	  scripts/with-refs-server.sh $(BUILD)/test_gtrain --tap=$(BUILD)/test.tap $(TEST_ARGS); rc=$$?; \
	  scripts/tap-summary.sh $(BUILD)/test.tap tests; exit $$rc

# The whole suite under AddressSanitizer + UBSan with leaks fatal (CPU backend only: sanitizers and
# CUDA mix badly). Criterion ignores a worker's exit status once its test reported, so a leak
# printed at exit would pass: scripts/test-asan.sh sends every sanitizer report (test workers and
# every gtrain a test starts) to files and fails the run when there is one. -g1 (after CFLAGS' -g):
# line tables, all a report's stack needs, at 4/5 of -g's compile time.
ASAN_BUILD ?= build-asan
test-asan:
	$(MAKE) BUILD=$(ASAN_BUILD) CUDA=0 OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined -g1" $(ASAN_BUILD)/gtrain $(ASAN_BUILD)/test_gtrain $(ASAN_BUILD)/dist_probe
	scripts/test-asan.sh $(ASAN_BUILD) $(TEST_ARGS)

# Compile the CUDA backend with warnings as errors (needs nvcc, not a GPU).
cuda-check:
	@test -n "$(NVCC)" || { echo "cuda-check: nvcc not found"; exit 1; }
	$(MAKE) CUDA=1 $(patsubst cuda/%.cu,$(BUILD)/cuda/%.o,$(CU_SRCS))
	@echo "cuda-check: $(words $(CU_SRCS)) CUDA source(s) compiled with warnings as errors"

demo: $(BUILD)/gtrain $(CUDA_MODULE)
	$(BUILD)/gtrain --config configs/shakespeare-char.yaml

$(BUILD)/bench_step: bench/bench_step.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/bench_attention: bench/bench_attention.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)
$(BUILD)/bench_rows: bench/bench_rows.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench_svd: bench/bench_svd.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench_pack: bench/bench_pack.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench_decode: bench/bench_decode.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -o $@ $^ $(LDLIBS)

# the NF4 base: QPiSSA's against QLoRA's quantization error (tests/qerr.c, shared with the test) and
# the dequantize against the memory-bandwidth floor
$(BUILD)/bench_nf4: bench/bench_nf4.c tests/qerr.c $(LIB_OBJS) | $(CUDA_MODULE)
	$(CC) $(CFLAGS) -Itests -o $@ $^ $(LDLIBS)

# Step time and tokens/s of gtrain beside PyTorch's CPU step on the same shapes, the time of
# the SVD PiSSA needs, decode tokens/s beside transformers' generate, and gtrain tokenize's tokens/s beside
# Hugging Face's tokenizers (not a test).
bench: $(BUILD)/gtrain $(CUDA_MODULE) $(BUILD)/bench_step $(BUILD)/bench_svd $(BUILD)/bench_pack $(BUILD)/bench_nf4 $(BUILD)/bench_decode $(BUILD)/bench_dist
	scripts/bench.sh $(BUILD)
	scripts/bench-tokenizer.sh $(BUILD)

clean:
	rm -rf build build-asan build-*

# Optional pieces (fuzzing, MPI tools) keep their rules in mk/*.mk.
-include $(wildcard mk/*.mk)
