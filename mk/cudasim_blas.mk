# cudasim_blas.mk - the standalone test of the simulator's cuBLAS/cuBLASLt model (cuda/sim/cublas.cpp,
# cublaslt.cpp, cublas_model.h) against a stand-in of the gtcsim.h runtime
# (tests/cudasim/test_cublas_sim.cpp):
#   make test-cudasim-blas
CUDASIM_BLAS_TEST := $(BUILD)/cudasim/test_cublas_sim
CUDASIM_BLAS_SRCS := cuda/sim/cublas.cpp cuda/sim/cublaslt.cpp
$(CUDASIM_BLAS_TEST): tests/cudasim/test_cublas_sim.cpp $(CUDASIM_BLAS_SRCS) cuda/sim/cublas_model.h \
                      cuda/sim/gtcsim.h cuda/sim/include/cublasLt.h cuda/sim/include/cublas_v2.h src/common.h
	@mkdir -p $(dir $@)
	$(CXX) -std=c++20 -O1 -g -Wall -Wextra -Icuda/sim/include -Icuda/sim $(SRC_INC) -o $@ \
	  tests/cudasim/test_cublas_sim.cpp $(CUDASIM_BLAS_SRCS) -lm
.PHONY: test-cudasim-blas
test-cudasim-blas: $(CUDASIM_BLAS_TEST)
	$(CUDASIM_BLAS_TEST)
