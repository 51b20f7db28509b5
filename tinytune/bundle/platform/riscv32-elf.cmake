# CMake toolchain file: riscv64-unknown-elf-gcc with picolibc for a bare-metal RV32IMC core
# (the ESP32-C3's instruction set; Debian: gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf).
#
#   cmake -S . -B build-rv -DCMAKE_TOOLCHAIN_FILE=cmake/riscv32-elf.cmake
#
# Where qemu-system-riscv32 is installed, ctest runs the example on QEMU's virt board. An
# ESP32-C3 firmware is built by ESP-IDF or Arduino with Espressif's own compiler instead: add
# tt_model.c and kernels/*.c to it as the bundle's README says.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR riscv32)
set(CMAKE_C_COMPILER riscv64-unknown-elf-gcc)
set(CMAKE_CXX_COMPILER riscv64-unknown-elf-g++)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)

set(CMAKE_C_FLAGS_INIT
  "-march=rv32imc -mabi=ilp32 --specs=picolibc.specs -ffunction-sections -fdata-sections")
set(CMAKE_CXX_FLAGS_INIT "${CMAKE_C_FLAGS_INIT}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--gc-sections")

find_program(TT_QEMU_RISCV32 qemu-system-riscv32)
if(TT_QEMU_RISCV32)
  # picolibc writes stdout to the semihosting console: sent to QEMU's stdout
  set(CMAKE_CROSSCOMPILING_EMULATOR
    ${TT_QEMU_RISCV32} -M virt -bios none -nographic -monitor none -serial none
    -chardev stdio,id=tt -semihosting-config enable=on,target=native,chardev=tt -kernel)
endif()
