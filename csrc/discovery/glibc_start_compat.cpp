// Lets flink-gpu-discovery run on glibc 2.28 (manylinux_2_28) although it is linked against a
// newer glibc. Since glibc 2.34 the startup code binds __libc_start_main@GLIBC_2.34, a version
// that older glibc lacks; the function is the same, only new startup code stopped passing an
// `init` callback (new glibc runs the constructors itself when `init` is NULL, old glibc does not).
// Linked with -Wl,--wrap=__libc_start_main: we call the original version and pass an `init` that
// runs the constructors, exactly what the startup code of glibc < 2.34 did. Both old and new glibc
// honour a non-NULL `init`.
#include "base/glibc_compat.hpp"

#ifdef FLINK_GPU_GLIBC_BASE

using InitFn = void (*)(int, char**, char**);
using MainFn = int (*)(int, char**, char**);

extern "C" {
// Provided by the default linker script (PROVIDE_HIDDEN) and crti.o.
extern InitFn __preinit_array_start[] __attribute__((visibility("hidden")));
extern InitFn __preinit_array_end[] __attribute__((visibility("hidden")));
extern InitFn __init_array_start[] __attribute__((visibility("hidden")));
extern InitFn __init_array_end[] __attribute__((visibility("hidden")));
void _init();

int flink_gpu_libc_start_main(MainFn main, int argc, char** argv, InitFn init, void (*fini)(), void (*rtld_fini)(),
                              void* stack_end);
__asm__(".symver flink_gpu_libc_start_main,__libc_start_main@" FLINK_GPU_GLIBC_BASE);
}

static void run_constructors(int argc, char** argv, char** envp) {
    for (InitFn* f = __preinit_array_start; f != __preinit_array_end; ++f) (*f)(argc, argv, envp);
    _init();
    for (InitFn* f = __init_array_start; f != __init_array_end; ++f) (*f)(argc, argv, envp);
}

extern "C" __attribute__((visibility("default"))) int __wrap___libc_start_main(
    MainFn main, int argc, char** argv, InitFn /*init: NULL from new startup code*/, void (*)(), void (*rtld_fini)(),
    void* stack_end) {
    return flink_gpu_libc_start_main(main, argc, argv, run_constructors, nullptr, rtld_fini, stack_end);
}

#endif
