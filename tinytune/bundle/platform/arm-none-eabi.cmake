# CMake toolchain file: arm-none-eabi-gcc (newlib) for a bare-metal Cortex-M.
#
#   cmake -S . -B build-m7 -DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake
#   cmake -S . -B build-m0 -DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake -DTT_ARM_CPU=cortex-m0plus
#
# TT_ARM_CPU chooses the core and its floating-point unit: cortex-m7 (the default; STM32F7/H7),
# cortex-m4 (Cortex-M4F: nRF52840, STM32F4) or cortex-m0plus (no FPU: RP2040, STM32G0). Where
# qemu-system-arm is installed, ctest runs the example on QEMU's MPS2 board of that core.
set(CMAKE_SYSTEM_NAME Generic)
set(CMAKE_SYSTEM_PROCESSOR arm)
set(CMAKE_C_COMPILER arm-none-eabi-gcc)
set(CMAKE_CXX_COMPILER arm-none-eabi-g++)
set(CMAKE_TRY_COMPILE_TARGET_TYPE STATIC_LIBRARY)
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
list(APPEND CMAKE_TRY_COMPILE_PLATFORM_VARIABLES TT_ARM_CPU)

if(NOT TT_ARM_CPU)
  set(TT_ARM_CPU cortex-m7)
endif()
set(TT_ARM_CPU "${TT_ARM_CPU}" CACHE STRING "the core: cortex-m7, cortex-m4 or cortex-m0plus")
if(TT_ARM_CPU STREQUAL "cortex-m7")
  set(TT_ARM_FLAGS "-mcpu=cortex-m7 -mfloat-abi=hard -mfpu=fpv5-sp-d16")
  set(TT_QEMU_BOARD mps2-an500)
elseif(TT_ARM_CPU STREQUAL "cortex-m4")
  set(TT_ARM_FLAGS "-mcpu=cortex-m4 -mfloat-abi=hard -mfpu=fpv4-sp-d16")
  set(TT_QEMU_BOARD mps2-an386)
elseif(TT_ARM_CPU STREQUAL "cortex-m0plus")
  set(TT_ARM_FLAGS "-mcpu=cortex-m0plus -mfloat-abi=soft")
  set(TT_QEMU_BOARD mps2-an385)  # a Cortex-M3: it runs the Armv6-M instructions alike
else()
  message(FATAL_ERROR "TT_ARM_CPU must be cortex-m7, cortex-m4 or cortex-m0plus, got '${TT_ARM_CPU}'")
endif()

set(CMAKE_C_FLAGS_INIT "${TT_ARM_FLAGS} -mthumb -ffunction-sections -fdata-sections")
set(CMAKE_CXX_FLAGS_INIT "${CMAKE_C_FLAGS_INIT}")
set(CMAKE_EXE_LINKER_FLAGS_INIT "-Wl,--gc-sections")

find_program(TT_QEMU_ARM qemu-system-arm)
if(TT_QEMU_ARM)
  set(CMAKE_CROSSCOMPILING_EMULATOR
    ${TT_QEMU_ARM} -M ${TT_QEMU_BOARD} -nographic -monitor none -serial none
    -semihosting-config enable=on,target=native -kernel)
endif()
