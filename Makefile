# Builds the NCCL tuner shim (plugin/ncclshim, C) and its conformance harness.
#   make shim      -> $(BUILD)/libnccl-tuner-collplan.so
#   make shim TUNER_V7=1 -> the same, also exporting ncclTunerPlugin_v7 (NCCL master's unreleased
#                   tuner ABI; off by default since NCCL loads the newest symbol first). Use its own
#                   BUILD directory: make does not rebuild when only the option changes.
#   make harness   -> $(BUILD)/collplan-harness, $(BUILD)/collplan-profharness (the profiler's) and
#                   $(BUILD)/collplan-rulesharness (named-communicator rules: tuner and profiler together)
#   make asan      -> both, with -fsanitize=address,undefined, under $(BUILD)/asan
#   make fuzz      -> $(BUILD)/asan/collplan-fuzz-table (table reader mutation fuzzer, sanitized)
#   make tsan      -> the library and the profiler's harness with -fsanitize=thread, under $(BUILD)/tsan
#   make test      -> go test ./plugin/ (builds its own copies in a temp dir, runs valgrind)
#   make clean
# Override BUILD=dir to build elsewhere (the Go test does).

BUILD ?= build
ifeq ($(origin CC),default)
CC := gcc
endif

SHIM_DIR := plugin/ncclshim
SHIM_SRCS := $(SHIM_DIR)/shim.c $(SHIM_DIR)/cptable.c $(SHIM_DIR)/profiler.c $(SHIM_DIR)/names.c
SHIM_HDRS := $(SHIM_DIR)/names.h $(SHIM_DIR)/cptable.h $(SHIM_DIR)/nccl_tuner_abi.h $(SHIM_DIR)/nccl_profiler_abi.h
HARNESS_SRCS := $(SHIM_DIR)/test/harness.c
PROF_HARNESS_SRCS := $(SHIM_DIR)/test/profharness.c
RULES_HARNESS_SRCS := $(SHIM_DIR)/test/rulesharness.c
FUZZ_SRCS := $(SHIM_DIR)/test/fuzz_table.c $(SHIM_DIR)/cptable.c

WARN := -std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wformat=2
SHIM_CFLAGS := -O2 -g -fPIC -fvisibility=hidden $(WARN) -pthread
SHIM_LDFLAGS := -shared -pthread -Wl,-z,defs -Wl,-z,relro -Wl,-z,now
HARNESS_CFLAGS := -O2 -g $(WARN) -pthread
HARNESS_LDLIBS := -ldl -pthread
TUNER_V7 ?= 0
ifeq ($(TUNER_V7),1)
SHIM_CFLAGS += -DCOLLPLAN_TUNER_V7=1
endif
SAN := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
TSAN := -fsanitize=thread -fno-omit-frame-pointer

SHIM := $(BUILD)/libnccl-tuner-collplan.so
HARNESS := $(BUILD)/collplan-harness
PROF_HARNESS := $(BUILD)/collplan-profharness
RULES_HARNESS := $(BUILD)/collplan-rulesharness

.PHONY: all shim harness asan tsan fuzz test clean

all: shim harness

shim: $(SHIM)
harness: $(HARNESS) $(PROF_HARNESS) $(RULES_HARNESS)

$(SHIM): $(SHIM_SRCS) $(SHIM_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(SHIM_CFLAGS) $(CFLAGS) -o $@ $(SHIM_SRCS) $(SHIM_LDFLAGS) $(LDFLAGS)

$(HARNESS): $(HARNESS_SRCS) $(SHIM_DIR)/nccl_tuner_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(CFLAGS) -o $@ $(HARNESS_SRCS) $(HARNESS_LDLIBS) $(LDFLAGS)

$(PROF_HARNESS): $(PROF_HARNESS_SRCS) $(SHIM_DIR)/nccl_profiler_abi.h $(SHIM_DIR)/nccl_tuner_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(CFLAGS) -o $@ $(PROF_HARNESS_SRCS) $(HARNESS_LDLIBS) $(LDFLAGS)

$(RULES_HARNESS): $(RULES_HARNESS_SRCS) $(SHIM_DIR)/nccl_profiler_abi.h $(SHIM_DIR)/nccl_tuner_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(CFLAGS) -o $@ $(RULES_HARNESS_SRCS) $(HARNESS_LDLIBS) $(LDFLAGS)

asan: $(BUILD)/asan/libnccl-tuner-collplan.so $(BUILD)/asan/collplan-harness $(BUILD)/asan/collplan-profharness

$(BUILD)/asan/libnccl-tuner-collplan.so: $(SHIM_SRCS) $(SHIM_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(SHIM_CFLAGS) $(SAN) $(CFLAGS) -o $@ $(SHIM_SRCS) -shared -pthread $(LDFLAGS)

$(BUILD)/asan/collplan-harness: $(HARNESS_SRCS) $(SHIM_DIR)/nccl_tuner_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(SAN) $(CFLAGS) -o $@ $(HARNESS_SRCS) $(HARNESS_LDLIBS) $(LDFLAGS)

$(BUILD)/asan/collplan-profharness: $(PROF_HARNESS_SRCS) $(SHIM_DIR)/nccl_profiler_abi.h $(SHIM_DIR)/nccl_tuner_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(SAN) $(CFLAGS) -o $@ $(PROF_HARNESS_SRCS) $(HARNESS_LDLIBS) $(LDFLAGS)

tsan: $(BUILD)/tsan/libnccl-tuner-collplan.so $(BUILD)/tsan/collplan-profharness

$(BUILD)/tsan/libnccl-tuner-collplan.so: $(SHIM_SRCS) $(SHIM_HDRS)
	@mkdir -p $(dir $@)
	$(CC) $(SHIM_CFLAGS) $(TSAN) $(CFLAGS) -o $@ $(SHIM_SRCS) -shared -pthread $(LDFLAGS)

$(BUILD)/tsan/collplan-profharness: $(PROF_HARNESS_SRCS) $(SHIM_DIR)/nccl_profiler_abi.h $(SHIM_DIR)/nccl_tuner_abi.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(TSAN) $(CFLAGS) -o $@ $(PROF_HARNESS_SRCS) $(HARNESS_LDLIBS) $(LDFLAGS)

fuzz: $(BUILD)/asan/collplan-fuzz-table

$(BUILD)/asan/collplan-fuzz-table: $(FUZZ_SRCS) $(SHIM_DIR)/cptable.h
	@mkdir -p $(dir $@)
	$(CC) $(HARNESS_CFLAGS) $(SAN) $(CFLAGS) -o $@ $(FUZZ_SRCS) $(LDFLAGS)

test:
	go test ./plugin/

clean:
	rm -rf $(BUILD)
