# fuzz.mk - libFuzzer targets for every reader of untrusted input (tests/fuzz/).
#   make fuzz [FUZZ_SECONDS=60] [FUZZ_JOBS=2]   build and run each target for FUZZ_SECONDS
#   make fuzz-build                              build them only (build-fuzz/fuzz_*)
# The library objects are compiled with clang and the same sanitizers as the targets
# (ASan + UBSan + fuzzer coverage), into their own build directory.
FUZZ_CC      ?= clang-14
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_JOBS    ?= 2
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer
FUZZ_CFLAGS  := -std=c11 -O1 -g -fopenmp -D_GNU_SOURCE $(WARN) $(PKG_CFLAGS) $(SRC_INC) $(FUZZ_SAN)
FUZZ_TARGETS := $(patsubst tests/fuzz/%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS    := $(addprefix $(FUZZ_BUILD)/,$(FUZZ_TARGETS))
# every source but main.c: the readers reach the model through the checkpoint code (LoRA adapters
# load into a model), and the model the CPU backend (clang ignores its GCC-only simd attribute)
FUZZ_LIB_SRCS := $(filter-out src/main.c,$(SRCS))
FUZZ_LIB_OBJS := $(patsubst src/%.c,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_LIB_SRCS))

.PHONY: fuzz fuzz-build
fuzz-build: $(FUZZ_BINS)

fuzz: $(FUZZ_BINS)
	FUZZ_BUILD=$(FUZZ_BUILD) FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_JOBS=$(FUZZ_JOBS) scripts/fuzz.sh $(FUZZ_TARGETS)

$(FUZZ_BUILD)/obj/%.o: src/%.c $(SRC_HDRS) | $(FUZZ_BUILD)/obj
	@mkdir -p $(@D)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -c -o $@ $<

$(FUZZ_BUILD)/libgtrain.a: $(FUZZ_LIB_OBJS)
	rm -f $@ && ar rcs $@ $^

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(wildcard tests/fuzz/*.h) $(FUZZ_BUILD)/libgtrain.a $(SRC_HDRS)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer -o $@ $< $(FUZZ_BUILD)/libgtrain.a $(PKG_LIBS) -lm

$(FUZZ_BUILD)/obj:
	mkdir -p $@
