# The bundle as a CMake project: the library `tinytune` (the model and the kernels: all a
# firmware needs) and, when this folder is the top-level project, the example
# `tinytune_example` (main.c and its samples) with a test that runs it.
#
#   cmake -S . -B build-cmake && cmake --build build-cmake && ctest --test-dir build-cmake  # here
#   cmake -S . -B build-m7 -DCMAKE_TOOLCHAIN_FILE=cmake/arm-none-eabi.cmake  # Cortex-M7; M4F, M0+:
#       -DTT_ARM_CPU=cortex-m4 or cortex-m0plus
#   cmake -S . -B build-rv -DCMAKE_TOOLCHAIN_FILE=cmake/riscv32-elf.cmake    # RV32IMC (ESP32-C3)
#
# With a toolchain file, ctest runs the example under QEMU where QEMU is installed, as the
# Makefile's run-* targets do. In a firmware's own CMake project:
#
#   add_subdirectory(path/to/bundle tinytune)
#   target_link_libraries(app PRIVATE tinytune)
cmake_minimum_required(VERSION 3.20)
project(tinytune_bundle LANGUAGES C)

set(TT_TOP_LEVEL OFF)
if(CMAKE_SOURCE_DIR STREQUAL CMAKE_CURRENT_SOURCE_DIR)
  set(TT_TOP_LEVEL ON)
  if(NOT CMAKE_BUILD_TYPE AND NOT CMAKE_CONFIGURATION_TYPES)
    set(CMAKE_BUILD_TYPE Release CACHE STRING "the build type" FORCE)
  endif()
endif()
option(TINYTUNE_EXAMPLE "build the example and its test" ${TT_TOP_LEVEL})

add_library(tinytune STATIC
  tt_model.c
  kernels/tt_forward.c
  kernels/tt_backward.c
  kernels/tt_classifier.c
  kernels/tt_lite.c
  kernels/tt_image.c
  kernels/tt_logmel.c
)
target_include_directories(tinytune
  PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
  PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/kernels
)
set_target_properties(tinytune PROPERTIES C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
# IEEE binary32 without fused multiply-adds: the same bits on every target
if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
  target_compile_options(tinytune PRIVATE -ffp-contract=off)
endif()
if(NOT CMAKE_SYSTEM_NAME MATCHES "^(Linux|Darwin|Windows|FreeBSD|Android|iOS)$")
  # a microcontroller (Generic, the Pico SDK's PICO, ...): the kernels' register-blocked paths,
  # whatever the core (the Makefile's SCALAR_DEFS says why)
  target_compile_definitions(tinytune PRIVATE TT_CORTEX_M=1)
endif()
if(NOT MSVC)
  target_link_libraries(tinytune PUBLIC m)
endif()

if(TINYTUNE_EXAMPLE)
  add_executable(tinytune_example main.c tt_data.c)
  target_link_libraries(tinytune_example PRIVATE tinytune)
  set_target_properties(tinytune_example PROPERTIES
    C_STANDARD 99 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
  if(CMAKE_C_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(tinytune_example PRIVATE -ffp-contract=off)
  endif()
  if(CMAKE_SYSTEM_NAME STREQUAL "Generic")
    # the images of the Makefile: QEMU's boards, output and exit through semihosting
    set_target_properties(tinytune_example PROPERTIES SUFFIX .elf)
    if(CMAKE_SYSTEM_PROCESSOR STREQUAL "arm")
      target_sources(tinytune_example PRIVATE platform/cortex_m7_startup.c)
      target_link_options(tinytune_example PRIVATE
        --specs=rdimon.specs -T${CMAKE_CURRENT_SOURCE_DIR}/platform/cortex_m7.ld)
    elseif(CMAKE_SYSTEM_PROCESSOR STREQUAL "riscv32")
      target_link_options(tinytune_example PRIVATE
        --oslib=semihost --crt0=semihost
        -Wl,--defsym=__flash=0x80000000 -Wl,--defsym=__flash_size=0x400000
        -Wl,--defsym=__ram=0x80400000 -Wl,--defsym=__ram_size=0x400000
        -Wl,--defsym=__stack_size=0x2000)
    endif()
  endif()
  enable_testing()
  add_test(NAME example COMMAND tinytune_example)
endif()
