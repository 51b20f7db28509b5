# The bundle's library in a Zephyr build, when CONFIG_TINYTUNE is set (zephyr/Kconfig): the
# model and the kernels, compiled as the bundle's Makefile compiles them; with
# CONFIG_TINYTUNE_EXAMPLE, also the example's samples and the example as tt_example().
if(CONFIG_TINYTUNE)
  set(TT_BUNDLE ${CMAKE_CURRENT_LIST_DIR}/..)
  zephyr_library()
  zephyr_library_sources(
    ${TT_BUNDLE}/tt_model.c
    ${TT_BUNDLE}/kernels/tt_forward.c
    ${TT_BUNDLE}/kernels/tt_backward.c
    ${TT_BUNDLE}/kernels/tt_classifier.c
    ${TT_BUNDLE}/kernels/tt_lite.c
    ${TT_BUNDLE}/kernels/tt_image.c
    ${TT_BUNDLE}/kernels/tt_logmel.c
  )
  zephyr_include_directories(${TT_BUNDLE})
  zephyr_library_include_directories(${TT_BUNDLE}/kernels)
  # IEEE binary32 without fused multiply-adds: the same bits on every target
  zephyr_library_compile_options(-ffp-contract=off)
  if(NOT CONFIG_ARCH_POSIX)
    # the kernels' register-blocked paths on every microcontroller core
    zephyr_library_compile_definitions(TT_CORTEX_M=1)
  endif()
  if(CONFIG_TINYTUNE_EXAMPLE)
    zephyr_library_sources(${TT_BUNDLE}/tt_data.c ${TT_BUNDLE}/main.c)
    zephyr_library_compile_definitions(TT_EXAMPLE_NO_MAIN)
  endif()
endif()
