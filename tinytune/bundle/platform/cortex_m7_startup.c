/* Bare-metal start-up for a Cortex-M7 (here the Arm MPS2 AN500 board, as QEMU emulates it),
 * and for the Makefile's other Cortex-M images: the Cortex-M4F (MPS2 AN386) and the Cortex-M0+
 * (MPS2 AN385), whose boards QEMU emulates with the same memory map.
 *
 * The vector table gives the initial stack pointer and the reset handler. The reset handler
 * copies initialised data from flash to RAM, clears .bss, enables the FPU where the core has
 * one, opens the semihosting channel (printf goes to the host) and calls main(); its return
 * status ends the program through semihosting's exit.
 */
#include <stdint.h>
#include <stdlib.h>

extern uint32_t __etext, __data_start__, __data_end__, __bss_start__, __bss_end__;
extern uint32_t __StackTop;
extern int main(void);
extern void initialise_monitor_handles(void);

void Reset_Handler(void);
void Default_Handler(void);

void Default_Handler(void) {
    exit(3);
}

__attribute__((section(".vectors"), used)) static void (*const vector_table[16])(void) = {
    (void (*)(void))(&__StackTop),
    Reset_Handler,
    Default_Handler, /* NMI */
    Default_Handler, /* HardFault */
    Default_Handler, /* MemManage */
    Default_Handler, /* BusFault */
    Default_Handler, /* UsageFault */
    0, 0, 0, 0,
    Default_Handler, /* SVCall */
    Default_Handler, /* DebugMonitor */
    0,
    Default_Handler, /* PendSV */
    Default_Handler, /* SysTick */
};

void Reset_Handler(void) {
    uint32_t *src = &__etext;
    for (uint32_t *dst = &__data_start__; dst < &__data_end__;) {
        *dst++ = *src++;
    }
    for (uint32_t *dst = &__bss_start__; dst < &__bss_end__;) {
        *dst++ = 0;
    }
#if defined(__ARM_FP)
    /* CP10 and CP11 full access: the FPU (float32 classifier and QAS scales) */
    volatile uint32_t *cpacr = (volatile uint32_t *)0xE000ED88u;
    *cpacr |= (0xFu << 20);
    __asm volatile("dsb\n\tisb");
#endif
    initialise_monitor_handles();
    exit(main());
}
