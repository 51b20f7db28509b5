# Build and run the tinytune training bundle.
#
#   make host            native build (gcc)                      make run-host
#   make host-asan       AddressSanitizer + UBSan, guard bytes   make run-host-asan
#                        around the arena (-DTT_GUARD)
#   make aarch64         static ARM Linux build                  make run-aarch64 (qemu-aarch64)
#   make cortex-m7       bare-metal Cortex-M7 image              make run-cortex-m7
#                        (qemu-system-arm, MPS2-AN500, output through semihosting)
#   make cortex-m4       bare-metal Cortex-M4F image (nRF52840,  make run-cortex-m4
#                        STM32F4, ...; qemu-system-arm MPS2-AN386, the same memory map)
#   make size            flash (text + data) and static SRAM (data + bss) of the Cortex-M7 image
#
# The profiler (platform/profile_main.c, -DTT_PROFILE) times every kernel call of the step and
# prints a measurement file for `tinytune calibrate`:
#   make run-profile-host        clock_gettime                 -> build/profile-host.json
#   make run-profile-aarch64     clock_gettime; qemu-aarch64 runs it here, but its times are the
#                                emulator's: run build/aarch64/profile on the board
#   make run-profile-cortex-m7   QEMU, -icount shift=0,sleep=off: instructions
#                                                              -> build/profile-cortex-m7.json
#   make profile-cortex-m7       the image for a board (DWT cycle counter); its semihosting
#                                output is the measurement file
#   make run-profile-cortex-m4   the same on the Cortex-M4F (MPS2-AN386)
#                                                              -> build/profile-cortex-m4.json
#   make profile-cortex-m4       the Cortex-M4F image for a board (nRF52840: DWT cycles)
# PROFILE_STEPS=N sets the timed steps (default 10); on a board set the core clock with
# EXTRA_CFLAGS=-DTT_CPU_HZ=... when it differs from the device profile's. The file names the
# device it was measured on: "host" on Linux, the bundle's device on a Cortex-M, or NAME with
# PROFILE_TARGET=NAME (make profile-aarch64 PROFILE_TARGET=rpi4 for a Raspberry Pi 4);
# `tinytune calibrate --device D` takes only files of device D.
#
# DEFS=-DTT_DUMP adds every step's logits and loss, the trained parameters and the evaluation
# logits to the output (use another BUILD folder for it, e.g. BUILD=build-dump).

BUILD ?= build
DEFS ?=
EXTRA_CFLAGS ?=
HOST_CC ?= gcc
AARCH64_CC ?= aarch64-linux-gnu-gcc
ARM_CC ?= arm-none-eabi-gcc
ARM_SIZE ?= arm-none-eabi-size
QEMU_AARCH64 ?= qemu-aarch64
QEMU_ARM ?= qemu-system-arm

SOURCES := main.c tt_model.c tt_data.c kernels/tt_forward.c kernels/tt_backward.c \
           kernels/tt_classifier.c kernels/tt_lite.c
HEADERS := tt_model.h tt_data.h kernels/tt_int8.h kernels/tt_arith.h
# IEEE binary32 without fused multiply-adds: the float32 classifier and GroupNorm then give the
# same bits on every target. Linux builds at -O3, where gcc vectorises the kernels' loops
# (integer sums do not depend on their order); the Cortex-M images at -O2, for their flash.
CFLAGS := -std=c99 -ffp-contract=off -Wall -Wextra -I. -Ikernels $(DEFS)
LINUX_OPT ?= -O3
MCU_OPT ?= -O2
ASAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer \
              -g -O1 -DTT_GUARD
M7_FLAGS := -mcpu=cortex-m7 -mthumb -mfloat-abi=hard -mfpu=fpv5-sp-d16 \
            -ffunction-sections -fdata-sections
M7_LDFLAGS := --specs=rdimon.specs -T platform/cortex_m7.ld -Wl,--gc-sections
M4_FLAGS := -mcpu=cortex-m4 -mthumb -mfloat-abi=hard -mfpu=fpv4-sp-d16 \
            -ffunction-sections -fdata-sections

PROFILE_STEPS ?= 10
PROFILE_SOURCES := platform/profile_main.c $(filter-out main.c,$(SOURCES))
PROFILE_FLAGS := -DTT_PROFILE -DTT_PROFILE_STEPS=$(PROFILE_STEPS)
ifneq ($(PROFILE_TARGET),)
PROFILE_FLAGS += -DTT_PROFILE_TARGET='"$(PROFILE_TARGET)"'
endif

HOST_BIN := $(BUILD)/host/train
ASAN_BIN := $(BUILD)/host-asan/train
AARCH64_BIN := $(BUILD)/aarch64/train
M7_ELF := $(BUILD)/cortex-m7/train.elf
M4_ELF := $(BUILD)/cortex-m4/train.elf
HOST_PROF := $(BUILD)/host/profile
AARCH64_PROF := $(BUILD)/aarch64/profile
M7_PROF := $(BUILD)/cortex-m7/profile.elf
M4_PROF := $(BUILD)/cortex-m4/profile.elf
QEMU_M7 := $(QEMU_ARM) -M mps2-an500 -nographic -monitor none -serial none \
           -semihosting-config enable=on,target=native
QEMU_M4 := $(QEMU_ARM) -M mps2-an386 -nographic -monitor none -serial none \
           -semihosting-config enable=on,target=native

.PHONY: all host host-asan aarch64 cortex-m7 cortex-m4 run-host run-host-asan run-aarch64 \
        run-cortex-m7 run-cortex-m4 size clean profile-host profile-aarch64 profile-cortex-m7 \
        run-profile-host run-profile-aarch64 run-profile-cortex-m7 profile-cortex-m4 \
        run-profile-cortex-m4

all: host

host: $(HOST_BIN)
host-asan: $(ASAN_BIN)
aarch64: $(AARCH64_BIN)
cortex-m7: $(M7_ELF)
cortex-m4: $(M4_ELF)

$(HOST_BIN): $(SOURCES) $(HEADERS)
	@mkdir -p $(@D)
	$(HOST_CC) $(CFLAGS) $(LINUX_OPT) $(EXTRA_CFLAGS) $(SOURCES) -o $@ -lm

$(ASAN_BIN): $(SOURCES) $(HEADERS)
	@mkdir -p $(@D)
	$(HOST_CC) $(CFLAGS) $(ASAN_FLAGS) $(EXTRA_CFLAGS) $(SOURCES) -o $@ -lm

$(AARCH64_BIN): $(SOURCES) $(HEADERS)
	@mkdir -p $(@D)
	$(AARCH64_CC) -static $(CFLAGS) $(LINUX_OPT) $(EXTRA_CFLAGS) $(SOURCES) -o $@ -lm

$(M7_ELF): $(SOURCES) $(HEADERS) platform/cortex_m7_startup.c platform/cortex_m7.ld
	@mkdir -p $(@D)
	$(ARM_CC) $(CFLAGS) $(MCU_OPT) $(EXTRA_CFLAGS) $(M7_FLAGS) $(M7_LDFLAGS) \
	    platform/cortex_m7_startup.c $(SOURCES) -o $@ -lm

$(M4_ELF): $(SOURCES) $(HEADERS) platform/cortex_m7_startup.c platform/cortex_m7.ld
	@mkdir -p $(@D)
	$(ARM_CC) $(CFLAGS) $(MCU_OPT) $(EXTRA_CFLAGS) $(M4_FLAGS) $(M7_LDFLAGS) \
	    platform/cortex_m7_startup.c $(SOURCES) -o $@ -lm

profile-host: $(HOST_PROF)
profile-aarch64: $(AARCH64_PROF)
profile-cortex-m7: $(M7_PROF)
profile-cortex-m4: $(M4_PROF)

$(HOST_PROF): $(PROFILE_SOURCES) $(HEADERS) tt_profile.h
	@mkdir -p $(@D)
	$(HOST_CC) $(CFLAGS) $(LINUX_OPT) $(EXTRA_CFLAGS) $(PROFILE_FLAGS) -D_POSIX_C_SOURCE=199309L \
	    $(PROFILE_SOURCES) -o $@ -lm

$(AARCH64_PROF): $(PROFILE_SOURCES) $(HEADERS) tt_profile.h
	@mkdir -p $(@D)
	$(AARCH64_CC) -static $(CFLAGS) $(LINUX_OPT) $(EXTRA_CFLAGS) $(PROFILE_FLAGS) \
	    -D_POSIX_C_SOURCE=199309L $(PROFILE_SOURCES) -o $@ -lm

$(M7_PROF): $(PROFILE_SOURCES) $(HEADERS) tt_profile.h platform/cortex_m7_startup.c \
            platform/cortex_m7.ld
	@mkdir -p $(@D)
	$(ARM_CC) $(CFLAGS) $(MCU_OPT) $(EXTRA_CFLAGS) $(PROFILE_FLAGS) $(M7_FLAGS) $(M7_LDFLAGS) \
	    platform/cortex_m7_startup.c $(PROFILE_SOURCES) -o $@ -lm

$(M4_PROF): $(PROFILE_SOURCES) $(HEADERS) tt_profile.h platform/cortex_m7_startup.c \
            platform/cortex_m7.ld
	@mkdir -p $(@D)
	$(ARM_CC) $(CFLAGS) $(MCU_OPT) $(EXTRA_CFLAGS) $(PROFILE_FLAGS) $(M4_FLAGS) $(M7_LDFLAGS) \
	    platform/cortex_m7_startup.c $(PROFILE_SOURCES) -o $@ -lm

run-profile-host: $(HOST_PROF)
	./$(HOST_PROF) > $(BUILD)/profile-host.json
	@echo "wrote $(BUILD)/profile-host.json: tinytune calibrate $(BUILD)/profile-host.json ..."

run-profile-aarch64: $(AARCH64_PROF)
	$(QEMU_AARCH64) ./$(AARCH64_PROF) > $(BUILD)/profile-aarch64.json
	@echo "wrote $(BUILD)/profile-aarch64.json (times under emulation)"

run-profile-cortex-m7: $(M7_PROF)
	$(QEMU_M7) -icount shift=0,sleep=off -kernel $(M7_PROF) > $(BUILD)/profile-cortex-m7.json
	@echo "wrote $(BUILD)/profile-cortex-m7.json: tinytune calibrate $(BUILD)/profile-cortex-m7.json ..."

run-profile-cortex-m4: $(M4_PROF)
	$(QEMU_M4) -icount shift=0,sleep=off -kernel $(M4_PROF) > $(BUILD)/profile-cortex-m4.json
	@echo "wrote $(BUILD)/profile-cortex-m4.json: tinytune calibrate $(BUILD)/profile-cortex-m4.json ..."

run-host: $(HOST_BIN)
	./$(HOST_BIN)

# the kernels never allocate; the leak checker needs ptrace, which some containers forbid
run-host-asan: $(ASAN_BIN)
	ASAN_OPTIONS=detect_leaks=0 ./$(ASAN_BIN)

run-aarch64: $(AARCH64_BIN)
	$(QEMU_AARCH64) ./$(AARCH64_BIN)

run-cortex-m7: $(M7_ELF)
	$(QEMU_M7) -kernel $(M7_ELF)

run-cortex-m4: $(M4_ELF)
	$(QEMU_M4) -kernel $(M4_ELF)

size: $(M7_ELF)
	$(ARM_SIZE) -A $(M7_ELF)
	$(ARM_SIZE) $(M7_ELF)

clean:
	rm -rf $(BUILD)
