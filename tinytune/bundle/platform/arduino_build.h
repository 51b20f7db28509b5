/* How the units of the Arduino library (src/) compile the bundle's C: as its Makefile does.
 *
 * Arduino and PlatformIO compile every file under src/ with the board's flags and src/ on the
 * include path; each unit there includes this header and then one source file of the bundle,
 * so that the sources exist once. Two of the Makefile's flags cannot be given to them:
 *
 *   -ffp-contract=off  IEEE binary32 without fused multiply-adds, the same bits on every
 *                      target: the cores build GNU C, in which GCC fuses a*b+c where the FPU
 *                      can (a Cortex-M4F or M7). A pragma says it here.
 *   TT_CORTEX_M        the kernels' register-blocked paths on a microcontroller whatever its
 *                      core (tt_arith.h chooses them itself on Armv7E-M and Armv8-M Mainline;
 *                      elsewhere the paths for Linux keep buffers of up to 96 KiB on the stack).
 */
#ifndef TT_ARDUINO_H
#define TT_ARDUINO_H

#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#if !defined(TT_CORTEX_M) && !defined(__linux__) && !defined(__APPLE__)
#define TT_CORTEX_M 1
#endif

#endif /* TT_ARDUINO_H */
