/* vmm.cu: the device region's memory, mapped as the allocator reaches it. The region is one
 * range of addresses of the budget's size (cuMemAddressReserve: no memory behind it); physical
 * memory is created and mapped in chunks of CU_VMM_CHUNK (cuMemCreate, cuMemMap, cuMemSetAccess)
 * up to the end of the highest piece the carve allocator has handed out (carve.h's high-water
 * mark), and kept until the region closes. So the GPU's used memory (cudaMemGetInfo,
 * nvidia-smi) follows what the run uses, the plan's peak, not the budget: the first GPU run had
 * the whole 21.6 GiB budget taken for a 6.8 GiB plan (docs/cuda.md). Everything is allocated at
 * setup or in the first step, so the mapping happens then, not in later steps.
 * The driver's functions come through cudaGetDriverEntryPointByVersion (no link to libcuda:
 * the library loads on machines without a driver). Where the device or the driver has no
 * virtual memory management, or HPT_CUDA_VMM=0, cu_vmm_open says so and backend.cu takes the
 * region with one cudaMalloc as before. Called with backend.cu's lock held. */
#include "kernels/cuda/cu_common.cuh"

#include <cuda.h>
#include <stdlib.h>
#include <string.h>

#define CU_VMM_CHUNK ((size_t)64 << 20)

typedef CUresult (*fn_attr)(int *, CUdevice_attribute, CUdevice);
typedef CUresult (*fn_gran)(size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags);
typedef CUresult (*fn_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
typedef CUresult (*fn_addr_free)(CUdeviceptr, size_t);
typedef CUresult (*fn_create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *, unsigned long long);
typedef CUresult (*fn_release)(CUmemGenericAllocationHandle);
typedef CUresult (*fn_map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
typedef CUresult (*fn_unmap)(CUdeviceptr, size_t);
typedef CUresult (*fn_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);

static struct {
    fn_attr attr;
    fn_gran gran;
    fn_reserve reserve;
    fn_addr_free addr_free;
    fn_create create;
    fn_release release;
    fn_map map;
    fn_unmap unmap;
    fn_access access;
    int loaded; /* 1: every entry point found; -1: not */
} D;

static struct {
    CUdeviceptr base;
    size_t size, mapped, chunk;
    CUmemGenericAllocationHandle *h; /* one per mapped chunk */
    int nh, cap, device;
} V;

static int load(void) {
    if (D.loaded) return D.loaded > 0;
    struct {
        const char *name;
        void **fn;
    } t[] = {{"cuDeviceGetAttribute", (void **)&D.attr},
             {"cuMemGetAllocationGranularity", (void **)&D.gran},
             {"cuMemAddressReserve", (void **)&D.reserve},
             {"cuMemAddressFree", (void **)&D.addr_free},
             {"cuMemCreate", (void **)&D.create},
             {"cuMemRelease", (void **)&D.release},
             {"cuMemMap", (void **)&D.map},
             {"cuMemUnmap", (void **)&D.unmap},
             {"cuMemSetAccess", (void **)&D.access}};
    D.loaded = 1;
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion(t[i].name, t[i].fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess || !*t[i].fn)
            D.loaded = -1;
    }
    (void)cudaGetLastError();
    return D.loaded > 0;
}

static CUmemAllocationProp prop_of(int device) {
    CUmemAllocationProp p;
    memset(&p, 0, sizeof p);
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = device;
    return p;
}

bool cu_vmm_open(int device, size_t size, char **base) {
    const char *env = getenv("HPT_CUDA_VMM");
    if ((env && !strcmp(env, "0")) || !size || !load()) return false;
    int ok = 0;
    if (D.attr(&ok, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, device) != CUDA_SUCCESS || !ok)
        return false;
    CUmemAllocationProp p = prop_of(device);
    size_t g = 0;
    if (D.gran(&g, &p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED) != CUDA_SUCCESS || !g) return false;
    const size_t chunk = (CU_VMM_CHUNK + g - 1) / g * g;
    const size_t vsize = (size + chunk - 1) / chunk * chunk;
    CUdeviceptr b = 0;
    if (D.reserve(&b, vsize, 0, 0, 0) != CUDA_SUCCESS) return false;
    V.base = b, V.size = vsize, V.mapped = 0, V.chunk = chunk, V.device = device;
    V.cap = (int)(vsize / chunk), V.nh = 0;
    V.h = (CUmemGenericAllocationHandle *)calloc((size_t)V.cap, sizeof *V.h);
    if (!V.h) {
        D.addr_free(b, vsize);
        memset(&V, 0, sizeof V);
        return false;
    }
    *base = (char *)b;
    return true;
}

hpt_status cu_vmm_ensure(size_t end) {
    if (!V.base || end <= V.mapped) return HPT_OK;
    if (end > V.size) return hpt_fail(HPT_ERR_OOM, "device region: %zu bytes past its %zu", end, V.size);
    CUmemAllocationProp p = prop_of(V.device);
    CUmemAccessDesc a;
    memset(&a, 0, sizeof a);
    a.location = p.location;
    a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    while (V.mapped < end) {
        CUmemGenericAllocationHandle h = 0;
        const CUdeviceptr at = V.base + V.mapped;
        if (D.create(&h, V.chunk, &p, 0) != CUDA_SUCCESS)
            return hpt_fail(HPT_ERR_OOM, "the device region: no GPU memory for %zu more MiB (%zu MiB "
                            "mapped)", V.chunk >> 20, V.mapped >> 20);
        if (D.map(at, V.chunk, 0, h, 0) != CUDA_SUCCESS) {
            D.release(h);
            return hpt_fail(HPT_ERR_OOM, "the device region: cuMemMap at %zu MiB failed", V.mapped >> 20);
        }
        if (D.access(at, V.chunk, &a, 1) != CUDA_SUCCESS) {
            D.unmap(at, V.chunk);
            D.release(h);
            return hpt_fail(HPT_ERR_OOM, "the device region: cuMemSetAccess at %zu MiB failed", V.mapped >> 20);
        }
        V.h[V.nh++] = h;
        V.mapped += V.chunk;
    }
    return HPT_OK;
}

size_t cu_vmm_mapped(void) { return V.mapped; }
int cu_vmm_active(void) { return V.base != 0; }

void cu_vmm_close(void) {
    if (!V.base) return;
    for (int i = V.nh - 1; i >= 0; i--) {
        D.unmap(V.base + (size_t)i * V.chunk, V.chunk);
        D.release(V.h[i]);
    }
    D.addr_free(V.base, V.size);
    free(V.h);
    memset(&V, 0, sizeof V);
}
