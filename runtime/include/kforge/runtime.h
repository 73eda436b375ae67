/* libkforge_rt: load a model's precompiled kernels from a kforge cache and
 * launch them.
 *
 * A server opens one runtime per (cache, model, device). Open detects the
 * device's architecture, picks the manifest written for it
 * (<cache>/v1/manifests/<model>/<arch>.json), checks every code object
 * against the manifest's checksum and resolves its entry symbol. After that,
 * kf_kernel_find gives the kernel specialised for the smallest width that
 * covers a step's rows, and kf_kernel_launch launches it with the manifest's
 * launch configuration after checking the arguments against its parameter
 * list.
 *
 * The library links no GPU library: the CUDA driver (libcuda.so.1) or the HIP
 * runtime (libamdhip64.so) is opened with dlopen at kf_runtime_open. It never
 * prints and never exits: every call returns a kf_status, and the one-line
 * reason of the last failure is kept on the handle it concerned and on the
 * calling thread (kf_last_error).
 *
 * Thread safety: kf_runtime_open and kf_runtime_close must not race with other
 * calls on the same runtime. Between them, every other function may be called
 * from any number of threads at once on the same runtime and kernels,
 * including with lazy loading (each kernel is loaded exactly once, under its
 * own lock). Launches need no current driver context on the calling thread:
 * the runtime makes the device's primary context current for the call and
 * restores the caller's afterwards. */
#ifndef KFORGE_RUNTIME_H
#define KFORGE_RUNTIME_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KF_API __attribute__((visibility("default")))
#else
#define KF_API
#endif

/* Version of the manifest format this runtime reads; a manifest with a
 * greater "format" is refused with KF_ERR_FORMAT. */
#define KF_MANIFEST_FORMAT 1

typedef enum kf_status {
  KF_OK = 0,
  KF_ERR_INVALID_ARGUMENT = 1, /* NULL handle, bad option, rows < 1 */
  KF_ERR_NO_MEMORY = 2,        /* an allocation failed */
  KF_ERR_NO_DRIVER = 3,        /* no GPU driver library could be opened */
  KF_ERR_DRIVER = 4,           /* a driver call failed (reason has its text) */
  KF_ERR_NO_DEVICE = 5,        /* no such device ordinal */
  KF_ERR_NO_MANIFEST = 6,      /* no manifest for this model and device arch */
  KF_ERR_BAD_MANIFEST = 7,     /* manifest unreadable or malformed */
  KF_ERR_FORMAT = 8,           /* manifest written in a newer format */
  KF_ERR_IO = 9,               /* a code object or meta.json unreadable */
  KF_ERR_CHECKSUM = 10,        /* a code object does not match its checksum */
  KF_ERR_SYMBOL = 11,          /* an entry symbol is missing from its object */
  KF_ERR_NO_KIND = 12,         /* no kernel of this kind in the manifest */
  KF_ERR_NO_WIDTH = 13,        /* rows exceed the largest width: fall back */
  KF_ERR_ARGS = 14,            /* arguments do not match the parameter list */
  KF_ERR_BAD_META = 15,        /* meta.json missing or malformed */
  KF_ERR_CORESIDENCY = 16,     /* a cooperative kernel's grid cannot be resident at once */
  KF_ERR_UNTRUSTED = 17,       /* a cache file or directory others could change, or a link
                                  inside the cache (see kf_runtime_open) */
  KF_ERR_NO_PAGE_SIZE = 18     /* the kind's kernels were built for another KV-cache page size */
} kf_status;

typedef enum kf_backend {
  KF_BACKEND_AUTO = 0, /* CUDA if its driver opens and has devices, else HIP */
  KF_BACKEND_CUDA = 1,
  KF_BACKEND_HIP = 2
} kf_backend;

typedef struct kf_runtime kf_runtime; /* one opened (cache, model, device) */
typedef struct kf_kernel kf_kernel;   /* one kernel; owned by its runtime */

typedef struct kf_runtime_options {
  const char *cache_dir;   /* the cache root, holding v1/ (required) */
  const char *model;       /* model name as in the manifest (required) */
  int device;              /* device ordinal, default 0 */
  kf_backend backend;      /* default KF_BACKEND_AUTO */
  int lazy;                /* 0 (default): load every object at open;
                              1: load each kernel at its first find/launch */
  const char *driver_path; /* driver library to dlopen; NULL: the
                              KFORGE_CUDA_DRIVER / KFORGE_HIP_RUNTIME
                              environment variables, else the usual names */
  int lax_permissions;     /* 0 (default): refuse a cache whose files others
                              could change (see kf_runtime_open); 1: load
                              them anyway. KFORGE_LAX_PERMISSIONS=1 in the
                              environment does the same. */
} kf_runtime_options;

/* One launch argument: a pointer to the value and the value's size in bytes
 * (8 for a device pointer, 4 for int and float, 8 for long long). */
typedef struct kf_arg {
  const void *value;
  size_t size;
} kf_arg;

/* A buffer a kernel takes besides its operands, as its template declares
 * it (decode attention's workspace and semaphores, a persistent kernel's
 * counters): the caller allocates it on the device and passes it as
 * parameter `param`. zero_once: zero it once after allocating it; every
 * launch leaves it as the next launch needs it, so it is never zeroed again
 * (launches that share it must not overlap). Otherwise its contents do not
 * matter. Sizes are for the kernel's width and serve any rows up to it. */
typedef struct kf_buffer {
  const char *arg; /* the parameter's name; owned by the runtime */
  int param;       /* the parameter's index */
  size_t bytes;
  int zero_once;
} kf_buffer;

/* Resource usage of a kernel's code object, from its meta.json. */
typedef struct kf_resources {
  int registers;
  int spill_stores; /* bytes */
  int spill_loads;  /* bytes */
  int stack_bytes;
  int shared_bytes; /* static shared memory */
} kf_resources;

/* A short English text for a status; never NULL, static storage. */
KF_API const char *kf_strerror(kf_status status);

/* The reason for the last failing kf_ call made by this thread, one line;
 * "" if none. Valid until the next failing call on this thread. This is how
 * to learn why kf_runtime_open failed, as no handle exists then. */
KF_API const char *kf_last_error(void);

/* Fills opts with the defaults (everything zero/NULL). */
KF_API void kf_runtime_options_init(kf_runtime_options *opts);

/* Opens the runtime for opts->model on opts->device. On success *rt is set
 * and must be closed with kf_runtime_close. On failure *rt is NULL, nothing
 * stays open or allocated, and kf_last_error() gives the reason: no manifest
 * for the arch (naming the arches the cache has), a damaged object (naming
 * the kernel id and the path), a missing symbol, a newer manifest format.
 * Never writes to the cache.
 *
 * Trust (docs/contracts.md, "Trust"): loading an object runs its code on
 * the GPU, so open refuses with KF_ERR_UNTRUSTED, naming the path, a cache
 * root, v1/, manifest, code object or meta.json, or the directory holding
 * the manifest or a meta.json, that is owned by a user other than the caller and
 * root or is writable by group or others (as ssh's StrictModes), unless
 * opts->lax_permissions or KFORGE_LAX_PERMISSIONS=1 opts out. Whatever the
 * option, no symbolic link below the cache root is followed (the root itself
 * may be one), so nothing is read from outside the cache, and every file is
 * opened non-blocking and must be a regular file (a FIFO is refused, never
 * waited on). `kforge verify` applies the same rules. */
KF_API kf_status kf_runtime_open(const kf_runtime_options *opts, kf_runtime **rt);

/* Unloads every object and frees the runtime and its kernels. NULL is a
 * no-op. Kernels of rt must not be used after. */
KF_API void kf_runtime_close(kf_runtime *rt);

/* Copies the runtime's last failure reason (one line, "" if none) into buf,
 * truncated to size, and returns that failure's status (KF_OK if none). */
KF_API kf_status kf_runtime_error(kf_runtime *rt, char *buf, size_t size);

/* The device's arch as matched ("sm_90a", "gfx942:xnack-"), the device's own
 * arch ("sm_90", "gfx942:sramecc+:xnack-"), the backend and the model name.
 * Owned by rt; NULL if rt is NULL. */
KF_API const char *kf_runtime_arch(const kf_runtime *rt);
KF_API const char *kf_runtime_device_arch(const kf_runtime *rt);
KF_API kf_backend kf_runtime_backend(const kf_runtime *rt);
KF_API const char *kf_runtime_model(const kf_runtime *rt);

/* Layers that run different kinds (the family's "layer_types": GLM-4.5's
 * first_k_dense_replace dense layers, then mixtures of experts). The count
 * is 0 when every layer runs the same kinds. Layer type i covers `count`
 * consecutive layers, after those of types 0..i-1, and each of them runs
 * kinds[0..nkinds) in that order; every kind has kernels in the manifest
 * (checked at open). Strings owned by rt. kf_runtime_layer_type fails with
 * KF_ERR_INVALID_ARGUMENT when i is out of range; any out pointer may be
 * NULL. */
KF_API int kf_runtime_layer_type_count(const kf_runtime *rt);
KF_API kf_status kf_runtime_layer_type(kf_runtime *rt, int i, const char **name, int *count,
                                       const char *const **kinds, int *nkinds);
/* The layer kind that runs layer type i's kinds in one launch (a family's
 * "layers" entry with the same kinds, in order), or NULL in *kind when the
 * build has none for this arch: run the kinds one by one. Fails as
 * kf_runtime_layer_type does. */
KF_API kf_status kf_runtime_layer_type_layer(kf_runtime *rt, int i, const char **kind);

/* The KV-cache page sizes the model's kernels were built for, the one served
 * when a caller names none first, the others ascending: writes at most max
 * of them to sizes (which may be NULL when max is 0) and returns how many
 * there are; 0 when no kernel takes a page size. */
KF_API int kf_runtime_page_sizes(const kf_runtime *rt, int *sizes, int max);

/* Number of kernels in the manifest, and the i-th in manifest (id) order.
 * kf_runtime_kernel fails with KF_ERR_INVALID_ARGUMENT when i is out of
 * range. The kernel is owned by rt; it need not be loaded yet (lazy). */
KF_API int kf_runtime_kernel_count(const kf_runtime *rt);
KF_API kf_status kf_runtime_kernel(kf_runtime *rt, int i, kf_kernel **kernel);

/* The kernel of this kind with the smallest width >= rows, loaded (a lazy
 * runtime loads it now, verifying it as open would). The kernel is owned by
 * rt. Fails with KF_ERR_NO_WIDTH when rows exceed the largest width (the
 * caller falls back to its own path), KF_ERR_NO_KIND for an unknown kind,
 * KF_ERR_INVALID_ARGUMENT for rows < 1; *kernel is NULL then. The kernel
 * is launched with the real row count as its last (rows) argument; it
 * leaves pad rows alone. */
KF_API kf_status kf_kernel_find(kf_runtime *rt, const char *kind, int rows, kf_kernel **kernel);

/* What a caller needs of a kernel besides its kind and rows. Zero a
 * kf_variant before setting fields (fields may be added; zero means "any"). */
typedef struct kf_variant {
  int page_size; /* tokens per page of the caller's KV cache; 0: any */
} kf_variant;

/* kf_kernel_find for a variant (NULL: as kf_kernel_find). A kernel built for
 * a KV-cache page size (kf_kernel_page_size > 0: attention, the KV write,
 * layer kernels) serves only that page size: another one fails with
 * KF_ERR_NO_PAGE_SIZE, whose reason names the page size it was built for;
 * kernels that take no page size serve any. */
KF_API kf_status kf_kernel_find_ex(kf_runtime *rt, const char *kind, int rows,
                                   const kf_variant *variant, kf_kernel **kernel);

/* Launches kernel on stream (a CUstream / hipStream_t; NULL is the default
 * stream) with the manifest's grid, block and dynamic shared memory. args[i]
 * must match parameter i's size, nargs the parameter count, and a trailing
 * "int rows" must hold 1..width; otherwise KF_ERR_ARGS and nothing is
 * launched. Asynchronous: errors of the kernel's execution surface later on
 * the stream. */
KF_API kf_status kf_kernel_launch(kf_kernel *kernel, void *stream, const kf_arg *args,
                                  size_t nargs);

/* Copies the kernel's last failure reason into buf; as kf_runtime_error. */
KF_API kf_status kf_kernel_error(kf_kernel *kernel, char *buf, size_t size);

/* Introspection from the manifest; strings are owned by the runtime. */
KF_API const char *kf_kernel_id(const kf_kernel *kernel);
KF_API const char *kf_kernel_kind(const kf_kernel *kernel);
KF_API const char *kf_kernel_symbol(const kf_kernel *kernel);
KF_API int kf_kernel_width(const kf_kernel *kernel);
/* The KV-cache page size the kernel was built for (the manifest's
 * "page_size"); 0: it takes none and serves any. */
KF_API int kf_kernel_page_size(const kf_kernel *kernel);
KF_API int kf_kernel_param_count(const kf_kernel *kernel);
/* Parameter i's name, C type ("const kf_bf16*") and size in bytes; any out
 * pointer may be NULL. KF_ERR_INVALID_ARGUMENT when i is out of range. */
KF_API kf_status kf_kernel_param(const kf_kernel *kernel, int i, const char **name,
                                 const char **type, size_t *size);
/* The buffers the kernel takes besides its operands (see kf_buffer), in
 * the template's order; 0 when it takes none. */
KF_API int kf_kernel_buffer_count(const kf_kernel *kernel);
/* Buffer i. KF_ERR_INVALID_ARGUMENT when i is out of range or out is NULL. */
KF_API kf_status kf_kernel_buffer(const kf_kernel *kernel, int i, kf_buffer *out);
/* grid[3], block[3] and dynamic shared memory bytes; any may be NULL. */
KF_API kf_status kf_kernel_launch_config(const kf_kernel *kernel, unsigned grid[3],
                                         unsigned block[3], unsigned *shared_bytes);
/* Resource usage from the kernel's meta.json, read on first call. Fails
 * with KF_ERR_BAD_META (reason names the path) when it is missing or
 * malformed. */
KF_API kf_status kf_kernel_resources(kf_kernel *kernel, kf_resources *out);

#ifdef __cplusplus
}
#endif

#endif /* KFORGE_RUNTIME_H */
