# reliability.mk - the suite under AddressSanitizer + UBSan with leaks made fatal.
#   make test-lsan [LSAN_BUILD=build-lsan] [TEST_ARGS=...]
# Criterion runs each test in a forked worker whose exit status it ignores once the test has
# reported, so a leak that LeakSanitizer prints at the worker's exit does not fail the test.
# scripts/test-asan.sh therefore has every sanitizer report (test workers and every gtrain the
# tests spawn) written to files via ASAN_OPTIONS/UBSAN_OPTIONS log_path, and fails the run when any
# exists, naming the tests whose stacks they show.
LSAN_BUILD ?= build-lsan
LSAN_SAN   := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined

.PHONY: test-lsan
test-lsan:
	$(MAKE) BUILD=$(LSAN_BUILD) CUDA=0 OPT=-O1 SAN="$(LSAN_SAN)" $(LSAN_BUILD)/gtrain $(LSAN_BUILD)/test_gtrain
	scripts/test-asan.sh $(LSAN_BUILD) $(TEST_ARGS)
