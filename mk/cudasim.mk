# cudasim.mk - the CUDA backend on the CPU: cuda/*.cu compiled by the host C++ compiler against
# the simulator's headers (cuda/sim/include/) and linked with the simulator (cuda/sim/*.cpp), so
# the Criterion suite runs through cuda/ without a GPU (GTRAIN_TEST_DEVICE=cuda).
#   make test-cudasim        build build-cudasim/{gtrain,test_gtrain,dist_probe} and run the whole
#                            suite on it (scripts/test-cudasim.sh; CUDASIM_FILTER narrows it)
#   make test-cudasim-mutants  plant known bugs into a copy of cuda/ and show the suite catches each
# The .cu sources are used unchanged except one rewrite: `extern __shared__ T name[];` (which host
# C++ cannot express) becomes a pointer to the block's dynamic shared memory, on the same line.
# The NCCL model (cuda/sim/nccl.cpp) runs its ranks over MPI, so it is built only with MPI=1.
# -g1: line tables (backtraces name file:line) at 2/3 of -g's compile time, which every planted bug
# pays again (scripts/cudasim-mutants.sh recompiles one file per bug).
# SAN (instrumentation such as --coverage, scripts/flavour-coverage.sh) applies here as in the host build.
# -ffp-contract=fast: a * b + c fused into an FMA, as nvcc does by default (--fmad=true).
# As with nvcc, the CUDA sources and the simulator make a module, $(BUILD_SIM)/libgtrain-cuda.so (and
# its device probe), that gtrain and test_gtrain load with dlopen (src/backend/backend_module.c): the
# simulated suite runs through the same loader as a GPU build.
BUILD_SIM ?= build-cudasim
CXX ?= g++
SIM_HAVE_NCCL   := $(if $(filter 1,$(MPI)),$(wildcard cuda/sim/nccl.cpp)) # the NCCL model runs over MPI
SIM_SRCS := $(filter-out $(if $(SIM_HAVE_NCCL),,cuda/sim/nccl.cpp),$(wildcard cuda/sim/*.cpp))
SIM_DEFS := -DGT_HAVE_CUDA $(if $(SIM_HAVE_NCCL),-DGT_HAVE_NCCL)
SIM_CFLAGS = $(filter-out -DGT_HAVE_CUDA -DGT_HAVE_NCCL -I$(NCCL_HOME)/include,$(CFLAGS)) $(SIM_DEFS)
SIM_INC  := -Icuda/sim/include -Icuda/sim -Icuda $(SRC_INC)
SIM_CXXFLAGS := -std=c++20 -O2 -g1 $(ARCH_FLAGS) -fPIC -fvisibility=hidden -ffp-contract=fast -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas \
  $(SIM_DEFS) $(SIM_INC) $(if $(SIM_HAVE_NCCL),-DOMPI_SKIP_MPICXX=1 $(shell $(MPICC) --showme:compile)) $(SAN)
SIM_LDLIBS = $(PKG_LIBS) -fopenmp -lmvec -lm -ldl -rdynamic $(if $(filter 1,$(MPI)),$(shell $(MPICC) --showme:link)) $(SAN)
SIM_MODULE_LDLIBS = -lstdc++ -lm -lpthread $(if $(SIM_HAVE_NCCL),$(shell $(MPICC) --showme:link)) $(SAN)
SIM_MODULE := $(BUILD_SIM)/libgtrain-cuda.so $(BUILD_SIM)/libgtrain-cuda-probe.so
# The host C code (src/, tests/) is compiled once: when the plain build's flags are the simulator
# build's (the same words in another order: CUDA and NCCL found and MPI on, as in scripts/test.sh on
# CI), the simulator build links the plain build's objects ($(BUILD)/obj, $(BUILD)/tests), built by
# the plain rules if missing; otherwise (no nvcc, no NCCL, MPI=0) it compiles its own here.
SIM_HOST_DIFF = $(strip $(filter-out $(CFLAGS),$(SIM_CFLAGS)) $(filter-out $(SIM_CFLAGS),$(CFLAGS)))
SIM_HOST := $(if $(SIM_HOST_DIFF),$(BUILD_SIM),$(BUILD))
SIM_OBJS := $(patsubst src/%.c,$(SIM_HOST)/obj/%.o,$(SRCS))
SIM_LIB_OBJS := $(filter-out $(SIM_HOST)/obj/main.o,$(SIM_OBJS))
SIM_TEST_OBJS := $(patsubst tests/%.c,$(SIM_HOST)/tests/%.o,$(TEST_SRCS))
SIM_CU_OBJS := $(patsubst cuda/%.cu,$(BUILD_SIM)/cuda/%.o,$(CU_SRCS))
SIM_RT_OBJS := $(patsubst cuda/sim/%.cpp,$(BUILD_SIM)/sim/%.o,$(SIM_SRCS))
SIM_HEADERS := $(wildcard cuda/sim/*.h cuda/sim/*.inc cuda/sim/include/*.h)
# a Criterion --filter glob for a part of the suite (empty: all of it)
CUDASIM_FILTER ?=

# objects depend on the flags they were built with
SIM_STAMP := $(BUILD_SIM)/flags.stamp
ifneq ($(filter test-cudasim cudasim-build $(BUILD_SIM)/%,$(MAKECMDGOALS)),)
$(shell mkdir -p $(BUILD_SIM) && echo '$(CC) $(SIM_CFLAGS) $(CXX) $(SIM_CXXFLAGS)' | cmp -s - $(SIM_STAMP) || echo '$(CC) $(SIM_CFLAGS) $(CXX) $(SIM_CXXFLAGS)' > $(SIM_STAMP))
endif

.PHONY: test-cudasim cudasim-build test-cudasim-mutants
cudasim-build: $(BUILD_SIM)/gtrain $(SIM_MODULE) $(BUILD_SIM)/test_gtrain $(BUILD_SIM)/dist_probe

$(BUILD_SIM)/obj/%.o: src/%.c $(SRC_HDRS) $(SIM_STAMP) | $(BUILD_SIM)/obj
	@mkdir -p $(@D)
	$(CC) $(SIM_CFLAGS) -c -o $@ $<
$(BUILD_SIM)/tests/%.o: tests/%.c $(SRC_HDRS) $(wildcard tests/*.h) $(SIM_STAMP) | $(BUILD_SIM)/tests
	$(CC) $(SIM_CFLAGS) $(CRIT_CFLAGS) -Itests -c -o $@ $<
$(BUILD_SIM)/gen/%.cpp: cuda/%.cu | $(BUILD_SIM)/gen
	{ echo '#line 1 "$<"'; sed -E 's/extern __shared__ (__align__\([0-9]+\) )?([A-Za-z_][A-Za-z_0-9 ]*[A-Za-z_0-9]) ([A-Za-z_][A-Za-z_0-9]*)\[\];/\2 *const \3 = (\2 *)gtcsim::dyn_smem();/' $<; } > $@.tmp
	@! grep -n 'extern __shared__' $@.tmp || { echo "$<: an extern __shared__ declaration the rewrite does not know"; rm -f $@.tmp; exit 1; }
	mv $@.tmp $@
$(BUILD_SIM)/cuda/%.o: $(BUILD_SIM)/gen/%.cpp $(wildcard cuda/*.cuh) $(SRC_HDRS) $(SIM_HEADERS) $(SIM_STAMP) | $(BUILD_SIM)/cuda
	$(CXX) $(SIM_CXXFLAGS) -c -o $@ $<
$(BUILD_SIM)/sim/%.o: cuda/sim/%.cpp $(SIM_HEADERS) $(SIM_STAMP) | $(BUILD_SIM)/sim
	$(CXX) $(SIM_CXXFLAGS) -c -o $@ $<
$(BUILD_SIM)/gtrain: $(SIM_OBJS) | $(SIM_MODULE)
	$(CC) -o $@ $^ $(SIM_LDLIBS)
$(BUILD_SIM)/libgtrain-cuda.so: $(SIM_CU_OBJS) $(SIM_RT_OBJS)
	$(CXX) -shared -o $@ $^ $(SIM_MODULE_LDLIBS)
$(BUILD_SIM)/libgtrain-cuda-probe.so: $(BUILD_SIM)/cuda/device_probe.o $(SIM_RT_OBJS)
	$(CXX) -shared -o $@ $^ $(SIM_MODULE_LDLIBS)
$(BUILD_SIM)/test_gtrain: $(SIM_TEST_OBJS) $(SIM_LIB_OBJS) | $(SIM_MODULE)
	$(CC) -o $@ $^ $(CRIT_LIBS) $(SIM_LDLIBS)
# the MPI probe the dist_mpi tests look for beside $$GTRAIN_BIN (no CUDA in it)
$(BUILD_SIM)/dist_probe: tests/mpi/dist_probe.c src/run/dist.c src/common.c $(SRC_HDRS) $(SIM_STAMP) | $(BUILD_SIM)/obj
	$(CC) $(SIM_CFLAGS) -o $@ tests/mpi/dist_probe.c src/run/dist.c src/common.c $(SIM_LDLIBS)
$(BUILD_SIM)/obj $(BUILD_SIM)/tests $(BUILD_SIM)/gen $(BUILD_SIM)/cuda $(BUILD_SIM)/sim:
	mkdir -p $@

test-cudasim: cudasim-build
	BUILD_SIM=$(BUILD_SIM) CUDASIM_FILTER='$(CUDASIM_FILTER)' scripts/test-cudasim.sh $(TEST_ARGS)

# known bugs planted into a copy of cuda/, each of which the simulated suite must catch
test-cudasim-mutants: cudasim-build
	BUILD_SIM=$(BUILD_SIM) scripts/cudasim-mutants.sh
