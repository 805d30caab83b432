# gpumodel.mk - the GPU cost model from the CUDA simulator's work counters (cuda/sim/cost.cpp).
#   make gpu-model        simulate one step of each case with fewer layers and rows, scale, and print a
#                         roofline per op for H100 SXM, H200 and RTX 4090 (scripts/gpu_model.py; a
#                         model, not a measurement). GPU_MODEL_CASES=gpt2,mistral narrows the cases.
#   make device-check-dry scripts/device-check.sh --dry-run: its stages on the CPU backend, tiny sizes
#   make test-gpu-model   the counters on kernels and a cuBLAS call of known work
#                         (tests/cudasim/cost_probe.cu, checked by scripts/test-gpu-model.sh)
GPU_MODEL_CASES ?=
.PHONY: gpu-model test-gpu-model device-check-dry
gpu-model: $(BUILD_SIM)/gtrain
	python3 scripts/gpu_model.py --bin $(BUILD_SIM)/gtrain $(if $(GPU_MODEL_CASES),--only $(GPU_MODEL_CASES))

$(BUILD_SIM)/gen/cost_probe.cpp: tests/cudasim/cost_probe.cu | $(BUILD_SIM)/gen
	{ echo '#line 1 "$<"'; cat $<; } > $@
$(BUILD_SIM)/cost_probe: $(BUILD_SIM)/gen/cost_probe.cpp $(SIM_RT_OBJS) $(SIM_HEADERS)
	$(CXX) $(SIM_CXXFLAGS) -o $@ $< $(SIM_RT_OBJS) $(SIM_LDLIBS)
test-gpu-model: $(BUILD_SIM)/cost_probe
	BUILD_SIM=$(BUILD_SIM) scripts/test-gpu-model.sh
device-check-dry:
	scripts/device-check.sh --dry-run
