# cudasim_nccl.mk - the CUDA simulator's NCCL model (cuda/sim/nccl.cpp) tested on its own:
#   make test-cudasim-nccl   builds build/cudasim/test_nccl_sim (the model + a stand-in runtime)
#                            and runs it under mpirun -np 1 and -np 2, plus the two mismatch
#                            cases, which must fail naming the mismatch.
# Skipped with a message when mpicxx or mpirun is missing. Included by the Makefile's mk/*.mk.
CUDASIM_MPICXX ?= $(shell command -v mpicxx 2>/dev/null)
CUDASIM_MPIRUN ?= $(shell command -v mpirun 2>/dev/null)
# OMPI_SKIP_MPICXX: no MPI C++ bindings (their casts warn).
CUDASIM_NCCL_FLAGS := -std=c++20 -O1 -g -Wall -Wextra -Werror -Wno-unknown-pragmas -DOMPI_SKIP_MPICXX=1 \
                      -DMPICH_SKIP_MPICXX=1 -Icuda/sim -Icuda/sim/include
CUDASIM_NCCL_RUN = $(CUDASIM_MPIRUN) --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1

.PHONY: test-cudasim-nccl
# the real cuda/dist_nccl.cu over the model, with src/run/dist.c's MPI and a stand-in runtime
CUDASIM_NCCL_RUN_INC := -Itests/cudasim/ncclrun/include -Icuda/sim -Icuda/sim/include -Icuda $(SRC_INC) -DGT_HAVE_NCCL -DGT_HAVE_MPI
build/cudasim/nccl_run: tests/cudasim/nccl_run.cpp cuda/dist_nccl.cu cuda/sim/nccl.cpp cuda/sim/fail.cpp cuda/sim/gtcsim.h cuda/sim/include/nccl.h \
                        $(wildcard tests/cudasim/ncclrun/include/*.h) src/run/dist.c src/common.c $(SRC_HDRS)
	mkdir -p $(dir $@)
	$(CUDASIM_MPICXX) $(CUDASIM_NCCL_RUN_INC) $(CUDASIM_NCCL_FLAGS) -Wno-unused-parameter -c -o build/cudasim/dist_nccl.o -x c++ cuda/dist_nccl.cu
	$(CUDASIM_MPICXX) $(CUDASIM_NCCL_RUN_INC) $(CUDASIM_NCCL_FLAGS) -Wno-unused-parameter -c -o build/cudasim/nccl_run.o tests/cudasim/nccl_run.cpp
	$(CUDASIM_MPICXX) $(CUDASIM_NCCL_FLAGS) -c -o build/cudasim/nccl_model.o cuda/sim/nccl.cpp
	$(CUDASIM_MPICXX) $(CUDASIM_NCCL_FLAGS) -c -o build/cudasim/sim_fail.o cuda/sim/fail.cpp
	mpicc -std=c11 -O1 -g -D_GNU_SOURCE -DGT_HAVE_MPI -DGT_HAVE_NCCL $(WARN) $(SRC_INC) -c -o build/cudasim/dist.o src/run/dist.c
	mpicc -std=c11 -O1 -g -D_GNU_SOURCE $(WARN) $(SRC_INC) -c -o build/cudasim/common.o src/common.c
	$(CUDASIM_MPICXX) -o $@ build/cudasim/nccl_run.o build/cudasim/dist_nccl.o build/cudasim/nccl_model.o \
	  build/cudasim/sim_fail.o build/cudasim/dist.o build/cudasim/common.o -lm
build/cudasim/test_nccl_sim: tests/cudasim/test_nccl_sim.cpp cuda/sim/nccl.cpp cuda/sim/fail.cpp cuda/sim/gtcsim.h cuda/sim/include/nccl.h
	mkdir -p $(dir $@)
	$(CUDASIM_MPICXX) $(CUDASIM_NCCL_FLAGS) -o $@ tests/cudasim/test_nccl_sim.cpp cuda/sim/nccl.cpp cuda/sim/fail.cpp

ifeq ($(and $(CUDASIM_MPICXX),$(CUDASIM_MPIRUN)),)
test-cudasim-nccl:
	@echo "test-cudasim-nccl: skipped (needs mpicxx and mpirun: apt-get install libopenmpi-dev openmpi-bin)"
else
test-cudasim-nccl: build/cudasim/test_nccl_sim build/cudasim/nccl_run
	$(CUDASIM_NCCL_RUN) -np 1 $<
	$(CUDASIM_NCCL_RUN) -np 2 $<
	$(CUDASIM_NCCL_RUN) -np 2 build/cudasim/nccl_run
	@for m in mismatch-count mismatch-order; do \
	  if GTCSIM_NCCL_TIMEOUT=30 timeout 120 $(CUDASIM_NCCL_RUN) -np 2 $< $$m >build/cudasim/$$m.log 2>&1; then \
	    echo "test-cudasim-nccl: $$m: the ranks' mismatch went unnoticed"; cat build/cudasim/$$m.log; exit 1; fi; \
	  grep -q "collectives do not match" build/cudasim/$$m.log || { \
	    echo "test-cudasim-nccl: $$m: failed, but not naming the mismatch"; cat build/cudasim/$$m.log; exit 1; }; \
	  echo "test-cudasim-nccl: $$m: caught"; \
	done
endif
