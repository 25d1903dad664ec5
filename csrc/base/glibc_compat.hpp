// Bind libdl entry points to their original symbol versions. glibc >= 2.34 moved them into libc
// under GLIBC_2.34, which would make every binary we build require glibc 2.34; the wheels target
// manylinux_2_28, whose glibc exports only the old versions (still exported by new glibc too).
#pragma once

#include <climits>  // defines __GLIBC__

#if defined(__GLIBC__) && !defined(FLINK_GPU_NO_SYMVER)
#if defined(__x86_64__)
#define FLINK_GPU_GLIBC_BASE "GLIBC_2.2.5"
#elif defined(__aarch64__)
#define FLINK_GPU_GLIBC_BASE "GLIBC_2.17"
#endif
#ifdef FLINK_GPU_GLIBC_BASE
__asm__(".symver dlopen,dlopen@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver dlsym,dlsym@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver dlerror,dlerror@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver dlclose,dlclose@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver dladdr,dladdr@" FLINK_GPU_GLIBC_BASE);
// libpthread's, moved into libc (and re-versioned) by glibc 2.32 and 2.34 (the metrics sampler's and
// nvml/deadline's threads, nvml/loader's fork handler). Not under a sanitizer: its runtime intercepts only the default
// versions.
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
__asm__(".symver pthread_create,pthread_create@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver pthread_detach,pthread_detach@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver pthread_sigmask,pthread_sigmask@" FLINK_GPU_GLIBC_BASE);
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@" FLINK_GPU_GLIBC_BASE);  // nvml/loader's fork handler
#if defined(__x86_64__)
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@GLIBC_2.3.3");
#else
__asm__(".symver pthread_condattr_setclock,pthread_condattr_setclock@" FLINK_GPU_GLIBC_BASE);
#endif
#endif
#endif
#endif
