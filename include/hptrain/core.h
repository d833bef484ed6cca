/* hptrain/core.h: status codes, the last-error text, threads, clocks, sizes. Part of hptrain.h
 * (include that).
 *
 * Every function of the library that can fail returns an hpt_status; hpt_status_str names it and
 * hpt_last_error() gives the detail of the last failure on the calling thread. The rest are the
 * small services every part uses: the kernels' thread count, the process's resident memory
 * (the independent reading that confirms the accounted peaks) and the parser of sizes that
 * every budget flag takes. */
#ifndef HPTRAIN_CORE_H
#define HPTRAIN_CORE_H
#ifndef HPTRAIN_H
#error "include hptrain.h, which includes this part"
#endif

typedef enum {
    HPT_OK = 0,
    HPT_ERR_OOM,         /* a tier's budget (or the operating system) refused memory */
    HPT_ERR_IO,          /* open, read, write, sync or rename failed */
    HPT_ERR_FORMAT,      /* wrong magic, version, truncated or malformed file */
    HPT_ERR_CHECKSUM,    /* a file's checksum does not match its contents */
    HPT_ERR_SHAPE,       /* shapes disagree (file vs model, T > maxT, ...) */
    HPT_ERR_INVALID,     /* an argument is out of range */
    HPT_ERR_UNSUPPORTED, /* valid, but not implemented for this configuration */
    HPT_ERR_MISMATCH     /* a verification found values outside tolerance */
} hpt_status;

const char *hpt_status_str(hpt_status s);
/* The detail of the last failure on this thread; "" when none. */
const char *hpt_last_error(void);
/* Sets the OpenMP thread count for kernels and GEMM (n >= 1). */
void hpt_set_threads(int n);
int hpt_get_threads(void);
/* The process's peak resident set size so far, in bytes (0 if unknown). */
uint64_t hpt_rss_peak_bytes(void);
/* The process's resident set size now, in bytes (0 if unknown). */
uint64_t hpt_rss_bytes(void);
/* Monotonic clock in seconds. */
double hpt_now(void);

/* Parses "512MB", "4GB", "1.5GiB", "123" (bytes). KB/MB/GB are powers of 1000, KiB/MiB/GiB
 * powers of 1024. */
hpt_status hpt_parse_size(const char *text, uint64_t *bytes_out);

#endif /* HPTRAIN_CORE_H */
