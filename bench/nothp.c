/* nothp.c: an LD_PRELOAD shim that ignores MADV_HUGEPAGE, so the same hptrain binary runs
 * without the 2 MiB pages src/mem/mem.c asks for (docs/benchmarks.md, "Fifth pass"); every
 * other madvise goes through.
 *   cc -O2 -shared -fPIC bench/nothp.c -o build/nothp.so -ldl
 *   LD_PRELOAD=build/nothp.so build/step_budget --T 64 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>
#include <sys/mman.h>

int madvise(void *addr, size_t len, int advice) {
    static int (*real)(void *, size_t, int);
    if (advice == MADV_HUGEPAGE) return 0;
    if (!real) real = (int (*)(void *, size_t, int))dlsym(RTLD_NEXT, "madvise");
    return real ? real(addr, len, advice) : -1;
}
