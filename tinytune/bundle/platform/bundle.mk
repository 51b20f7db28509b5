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
#   make cortex-m0plus   bare-metal Cortex-M0+ image (RP2040,    make run-cortex-m0plus
#                        STM32G0; Armv6-M, no FPU; qemu-system-arm MPS2-AN385, a Cortex-M3
#                        that runs the same instructions, the same memory map)
#   make rv32imc         bare-metal RV32IMC image (ESP32-C3;     make run-rv32imc
#                        picolibc; qemu-system-riscv32 virt, output through semihosting)
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
#   make run-profile-cortex-m0plus   the same on the Cortex-M0+ (MPS2-AN385)
#                                                              -> build/profile-cortex-m0plus.json
#   make run-profile-rv32imc     qemu-system-riscv32 -icount shift=0: the instret counter,
#                                instructions                  -> build/profile-rv32imc.json
#   make profile-cortex-m0plus, profile-rv32imc   the images for QEMU; on a board, the counter
#                                of the RP2040 (EXTRA_CFLAGS=-DTT_RP2040_TIMER, microseconds)
#                                or the ESP32-C3 (-DTT_ESP32C3_CYCLES, cycles) instead
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
RISCV_CC ?= riscv64-unknown-elf-gcc
QEMU_RISCV32 ?= qemu-system-riscv32

SOURCES := main.c tt_model.c tt_data.c kernels/tt_forward.c kernels/tt_backward.c \
           kernels/tt_classifier.c kernels/tt_lite.c kernels/tt_image.c \
           kernels/tt_logmel.c
HEADERS := tt_model.h tt_data.h kernels/tt_int8.h kernels/tt_arith.h kernels/tt_logmel.h
# IEEE binary32 without fused multiply-adds: the float32 classifier and GroupNorm then give the
# same bits on every target. Linux builds at -O3, where gcc vectorises the kernels' loops
# (integer sums do not depend on their order); the Cortex-M images at -O2, for their flash. On
# x86-64 Linux the kernels are built twice, for AVX2 and for any x86-64, the processor's chosen
# when the program loads (DEFS=-DTT_NO_CLONES builds the second alone); both give the same bits.
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
# Cores without a vector unit take the kernels' register-blocked paths, as the Cortex-M4/M7 do
# (tt_arith.h chooses them itself only on Armv7E-M and Armv8-M Mainline): the Linux paths keep
# buffers of up to 96 KiB on the stack.
SCALAR_DEFS := -DTT_CORTEX_M=1
M0P_FLAGS := -mcpu=cortex-m0plus -mthumb -mfloat-abi=soft -ffunction-sections -fdata-sections \
             $(SCALAR_DEFS)
# picolibc's linker script, its memory laid out as QEMU's virt board has it: 4 MB of "flash"
# and 4 MB of RAM in its DRAM at 0x80000000, 8 KB of stack; semihosting for stdout and exit
RV32_FLAGS := -march=rv32imc -mabi=ilp32 --specs=picolibc.specs -ffunction-sections \
              -fdata-sections $(SCALAR_DEFS)
RV32_LDFLAGS := --oslib=semihost --crt0=semihost -Wl,--gc-sections \
                -Wl,--defsym=__flash=0x80000000 -Wl,--defsym=__flash_size=0x400000 \
                -Wl,--defsym=__ram=0x80400000 -Wl,--defsym=__ram_size=0x400000 \
                -Wl,--defsym=__stack_size=0x2000

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
M0P_ELF := $(BUILD)/cortex-m0plus/train.elf
RV32_ELF := $(BUILD)/rv32imc/train.elf
HOST_PROF := $(BUILD)/host/profile
AARCH64_PROF := $(BUILD)/aarch64/profile
M7_PROF := $(BUILD)/cortex-m7/profile.elf
M4_PROF := $(BUILD)/cortex-m4/profile.elf
M0P_PROF := $(BUILD)/cortex-m0plus/profile.elf
RV32_PROF := $(BUILD)/rv32imc/profile.elf
QEMU_M7 := $(QEMU_ARM) -M mps2-an500 -nographic -monitor none -serial none \
           -semihosting-config enable=on,target=native
QEMU_M4 := $(QEMU_ARM) -M mps2-an386 -nographic -monitor none -serial none \
           -semihosting-config enable=on,target=native
QEMU_M0P := $(QEMU_ARM) -M mps2-an385 -nographic -monitor none -serial none \
            -semihosting-config enable=on,target=native
# picolibc writes stdout to the semihosting console: QEMU's stdout here
QEMU_RV32 := $(QEMU_RISCV32) -M virt -bios none -nographic -monitor none -serial none \
             -chardev stdio,id=tt -semihosting-config enable=on,target=native,chardev=tt

.PHONY: all host host-asan aarch64 cortex-m7 cortex-m4 cortex-m0plus rv32imc run-host \
        run-host-asan run-aarch64 run-cortex-m7 run-cortex-m4 run-cortex-m0plus run-rv32imc \
        size clean profile-host profile-aarch64 profile-cortex-m7 run-profile-host \
        run-profile-aarch64 run-profile-cortex-m7 profile-cortex-m4 run-profile-cortex-m4 \
        profile-cortex-m0plus run-profile-cortex-m0plus profile-rv32imc run-profile-rv32imc

all: host

host: $(HOST_BIN)
host-asan: $(ASAN_BIN)
aarch64: $(AARCH64_BIN)
cortex-m7: $(M7_ELF)
cortex-m4: $(M4_ELF)
cortex-m0plus: $(M0P_ELF)
rv32imc: $(RV32_ELF)

# Every program is built object by object, each program's objects in a folder of their own
# beside it: make -j compiles them side by side, a changed source rebuilds its object alone, and
# a compiler cache (ccache) can keep the kernels' objects from one bundle to the next.
# $(call program,PROGRAM,OBJECTS,COMPILER,FLAGS,LINK FLAGS,SOURCES,OTHER PREREQUISITES):
# FLAGS compile every source and link (the core and C library flags choose the libraries),
# LINK FLAGS only link; OTHER PREREQUISITES are headers of these sources alone.
define program
$(1): $(patsubst %.c,$(2)/%.o,$(6))
	$(3) $(4) $(patsubst %.c,$(2)/%.o,$(6)) $(5) -o $$@ -lm

$(2)/%.o: %.c $(HEADERS) $(7)
	@mkdir -p $$(@D)
	$(3) $(4) -c $$< -o $$@
endef

MCU_SOURCES := platform/cortex_m7_startup.c $(SOURCES)
MCU_PROFILE_SOURCES := platform/cortex_m7_startup.c $(PROFILE_SOURCES)
LINUX_CFLAGS = $(CFLAGS) $(LINUX_OPT) $(EXTRA_CFLAGS)
MCU_CFLAGS = $(CFLAGS) $(MCU_OPT) $(EXTRA_CFLAGS)
TIMED := $(PROFILE_FLAGS) -D_POSIX_C_SOURCE=199309L

$(eval $(call program,$(HOST_BIN),$(BUILD)/host/obj,$(HOST_CC),$(LINUX_CFLAGS),,$(SOURCES)))
$(eval $(call program,$(ASAN_BIN),$(BUILD)/host-asan/obj,$(HOST_CC),\
    $(CFLAGS) $(ASAN_FLAGS) $(EXTRA_CFLAGS),,$(SOURCES)))
$(eval $(call program,$(AARCH64_BIN),$(BUILD)/aarch64/obj,$(AARCH64_CC),$(LINUX_CFLAGS),\
    -static,$(SOURCES)))
$(eval $(call program,$(M7_ELF),$(BUILD)/cortex-m7/obj,$(ARM_CC),$(MCU_CFLAGS) $(M7_FLAGS),\
    $(M7_LDFLAGS),$(MCU_SOURCES)))
$(eval $(call program,$(M4_ELF),$(BUILD)/cortex-m4/obj,$(ARM_CC),$(MCU_CFLAGS) $(M4_FLAGS),\
    $(M7_LDFLAGS),$(MCU_SOURCES)))
$(eval $(call program,$(M0P_ELF),$(BUILD)/cortex-m0plus/obj,$(ARM_CC),\
    $(MCU_CFLAGS) $(M0P_FLAGS),$(M7_LDFLAGS),$(MCU_SOURCES)))
$(eval $(call program,$(RV32_ELF),$(BUILD)/rv32imc/obj,$(RISCV_CC),\
    $(MCU_CFLAGS) $(RV32_FLAGS),$(RV32_LDFLAGS),$(SOURCES)))

profile-host: $(HOST_PROF)
profile-aarch64: $(AARCH64_PROF)
profile-cortex-m7: $(M7_PROF)
profile-cortex-m4: $(M4_PROF)
profile-cortex-m0plus: $(M0P_PROF)
profile-rv32imc: $(RV32_PROF)

$(eval $(call program,$(HOST_PROF),$(BUILD)/host/profile-obj,$(HOST_CC),\
    $(LINUX_CFLAGS) $(TIMED),,$(PROFILE_SOURCES),tt_profile.h))
$(eval $(call program,$(AARCH64_PROF),$(BUILD)/aarch64/profile-obj,$(AARCH64_CC),\
    $(LINUX_CFLAGS) $(TIMED),-static,$(PROFILE_SOURCES),tt_profile.h))
$(eval $(call program,$(M7_PROF),$(BUILD)/cortex-m7/profile-obj,$(ARM_CC),\
    $(MCU_CFLAGS) $(PROFILE_FLAGS) $(M7_FLAGS),$(M7_LDFLAGS),$(MCU_PROFILE_SOURCES),tt_profile.h))
$(eval $(call program,$(M4_PROF),$(BUILD)/cortex-m4/profile-obj,$(ARM_CC),\
    $(MCU_CFLAGS) $(PROFILE_FLAGS) $(M4_FLAGS),$(M7_LDFLAGS),$(MCU_PROFILE_SOURCES),tt_profile.h))
$(eval $(call program,$(M0P_PROF),$(BUILD)/cortex-m0plus/profile-obj,$(ARM_CC),\
    $(MCU_CFLAGS) $(PROFILE_FLAGS) $(M0P_FLAGS),$(M7_LDFLAGS),$(MCU_PROFILE_SOURCES),tt_profile.h))
$(eval $(call program,$(RV32_PROF),$(BUILD)/rv32imc/profile-obj,$(RISCV_CC),\
    $(MCU_CFLAGS) $(PROFILE_FLAGS) $(RV32_FLAGS),$(RV32_LDFLAGS),$(PROFILE_SOURCES),tt_profile.h))
# the Cortex-M images are laid out by the linker script
$(M7_ELF) $(M4_ELF) $(M0P_ELF) $(M7_PROF) $(M4_PROF) $(M0P_PROF): platform/cortex_m7.ld

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

run-profile-cortex-m0plus: $(M0P_PROF)
	$(QEMU_M0P) -icount shift=0,sleep=off -kernel $(M0P_PROF) > $(BUILD)/profile-cortex-m0plus.json
	@echo "wrote $(BUILD)/profile-cortex-m0plus.json: tinytune calibrate $(BUILD)/profile-cortex-m0plus.json ..."

run-profile-rv32imc: $(RV32_PROF)
	$(QEMU_RV32) -icount shift=0,sleep=off -kernel $(RV32_PROF) < /dev/null \
	    > $(BUILD)/profile-rv32imc.json
	@echo "wrote $(BUILD)/profile-rv32imc.json: tinytune calibrate $(BUILD)/profile-rv32imc.json ..."

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

run-cortex-m0plus: $(M0P_ELF)
	$(QEMU_M0P) -kernel $(M0P_ELF)

run-rv32imc: $(RV32_ELF)
	$(QEMU_RV32) -kernel $(RV32_ELF) < /dev/null

size: $(M7_ELF)
	$(ARM_SIZE) -A $(M7_ELF)
	$(ARM_SIZE) $(M7_ELF)

clean:
	rm -rf $(BUILD)
