/* Private declarations shared by the runtime's source files.
 *
 * The runtime is split by job: rt_error.c (reasons, the driver check),
 * rt_file.c (read-only file access), rt_trust.c (what may be read from a
 * cache: no links, trusted owners and modes; shared with kforge verify),
 * rt_arch.c (arch names and which
 * manifest a device can run), rt_json.c (finding a manifest's parts without
 * parsing them), rt_manifest.c (manifest parsing), rt_meta.c
 * (meta.json), rt_cuda.c and rt_hip.c (the two driver backends behind
 * rt_driver), rt_runtime.c (open/close) and rt_kernel.c (find, load, launch,
 * introspection). Names shared between files carry the rt_ prefix; nothing
 * here is exported from the shared library. */
#ifndef KFORGE_RT_INTERNAL_H
#define KFORGE_RT_INTERNAL_H

#include "kforge/runtime.h"
#include "rt_arch.h"

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <sys/stat.h>

#define RT_REASON_MAX 1024 /* one reason line, truncated past this */
#define RT_MAX_PARAMS 64   /* a manifest listing more is refused */

#if defined(__GNUC__)
#define RT_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define RT_PRINTF(f, a)
#endif

/* ---- reasons (rt_error.c) ---------------------------------------------- */

/* A failure being built up: the status and its one-line reason. */
typedef struct rt_err {
  kf_status status;
  int code; /* the driver's error code when a driver call failed, else 0 */
  char text[RT_REASON_MAX];
} rt_err;

/* Sets e to (status, formatted text) and returns status. */
kf_status rt_err_set(rt_err *e, kf_status status, const char *fmt, ...) RT_PRINTF(3, 4);
/* Puts formatted context before e's text ("kernel x: " + text). */
kf_status rt_err_prefix(rt_err *e, const char *fmt, ...) RT_PRINTF(2, 3);
/* Appends to e's text the kforge command that builds what is missing:
 * " (build it with: kforge build --arch ARCH --cache DIR DESCRIPTION)", each
 * word quoted for a POSIX shell where it needs it; a NULL description is
 * written as <the description of model 'MODEL'>. */
void rt_err_build_hint(rt_err *e, const char *arch, const char *cache_dir, const char *model,
                       const char *description);

/* The last-error slot of a handle: written by any thread, so locked. */
typedef struct rt_slot {
  pthread_mutex_t mu;
  kf_status status;
  char text[RT_REASON_MAX];
} rt_slot;

void rt_slot_init(rt_slot *s);
void rt_slot_destroy(rt_slot *s);
/* Copies e into s (s may be NULL) and into this thread's last error;
 * returns e->status. */
kf_status rt_slot_record(rt_slot *s, const rt_err *e);
kf_status rt_slot_copy(rt_slot *s, char *buf, size_t size);
/* Records e only as this thread's last error; returns e->status. */
kf_status rt_tls_record(const rt_err *e);

/* ---- drivers (rt_cuda.c, rt_hip.c) ------------------------------------- */

typedef struct rt_driver rt_driver;

enum {
  RT_LAUNCH_PROGRAMMATIC = 1u, /* launch.programmatic */
  RT_LAUNCH_COOPERATIVE = 2u   /* launch.cooperative */
};

struct rt_driver {
  kf_backend backend;
  const char *api;               /* "CUDA driver" / "HIP runtime" */
  char lib_path[256];            /* what was dlopened */
  void *lib;                     /* dlopen handle; never dlclosed */
  void *fns;                     /* the backend's function table */
  int device;                    /* ordinal (CUDA: the CUdevice) */
  int cc_major, cc_minor;        /* CUDA compute capability */
  char device_arch[RT_ARCH_MAX]; /* "sm_90", "gfx942:sramecc+:xnack-" */
  size_t shared_limit;           /* most dynamic shared memory per block */
  int sm_count;                  /* SMs (CUDA) or CUs (HIP); 0: unknown */
  int sm_shared;                 /* CUDA: shared memory per SM (0: unknown) */
  int block_reserved_shared;     /* CUDA: shared memory the system keeps per block */
  void *ctx;                     /* CUDA primary context */
  /* The driver's own name and text for an error code. */
  void (*error_text)(const rt_driver *d, int code, char *buf, size_t size);
  /* Loads image and resolves symbol; opts the function into shared bytes of
   * dynamic shared memory when that needs it, or into more when max_blocks
   * (the cap from launch.max_blocks_per_sm and one_wave, 0: none) asks for
   * it: *launch_shared is what its launches then pass. KF_ERR_SYMBOL when the symbol is missing,
   * KF_ERR_DRIVER otherwise; nothing stays loaded on failure. */
  kf_status (*load)(rt_driver *d, const void *image, const char *symbol, unsigned shared,
                    unsigned max_blocks, void **module, void **function, unsigned *launch_shared,
                    rt_err *err);
  /* For a cooperative kernel, at load: into *per_sm, how many blocks of
   * function (threads each, shared bytes of dynamic shared memory) one SM
   * (CU) holds at once. KF_ERR_CORESIDENCY, with the reason, when the driver
   * lacks the occupancy query or the cooperative launch; KF_ERR_DRIVER when
   * the query fails. */
  kf_status (*occupancy)(rt_driver *d, void *function, unsigned threads, unsigned shared,
                         int *per_sm, rt_err *err);
  /* Launches; flags (RT_LAUNCH_*): RT_LAUNCH_PROGRAMMATIC with programmatic
   * stream serialisation where the driver has it (an ordinary launch
   * elsewhere), RT_LAUNCH_COOPERATIVE as a cooperative launch (every block
   * resident at once, which occupancy checked). */
  kf_status (*launch)(rt_driver *d, void *function, const unsigned grid[3], const unsigned block[3],
                      unsigned shared, unsigned flags, void *stream, void **params, rt_err *err);
  void (*unload)(rt_driver *d, void *module);
  void (*close)(rt_driver *d);
};

/* Open the driver library (path NULL: environment, then default names),
 * initialise it and find the device's arch. On failure nothing stays
 * retained. KF_ERR_NO_DRIVER when the library can't be opened or lacks an
 * entry point. */
kf_status rt_cuda_open(rt_driver *d, const char *path, int device, rt_err *err);
kf_status rt_hip_open(rt_driver *d, const char *path, int device, rt_err *err);

/* The one check every driver call goes through: on a nonzero code it records
 * the statement, file:line and the driver's own name and text for the code,
 * and returns KF_ERR_DRIVER; KF_OK otherwise. */
kf_status rt_driver_check(const rt_driver *d, rt_err *err, int code, const char *stmt,
                          const char *file, int line);
#define RT_CHECK(d, err, call) rt_driver_check((d), (err), (int)(call), #call, __FILE__, __LINE__)

/* ---- architectures (rt_arch.c, declared in rt_arch.h) ------------------ */

_Static_assert((int)RT_ARCH_CUDA == (int)KF_BACKEND_CUDA && (int)RT_ARCH_HIP == (int)KF_BACKEND_HIP,
               "an arch's kind is its backend");

/* True when name is a well-formed arch name of the backend. */
static inline int rt_arch_valid(kf_backend backend, const char *name) {
  rt_arch a;
  return rt_arch_parse(name, &a) == 0 && (int)a.kind == (int)backend;
}

/* ---- manifests (rt_manifest.c) ----------------------------------------- */

typedef struct rt_root rt_root; /* rt_trust.c */

typedef struct rt_param {
  char *name;
  char *type; /* one of the contract's C spellings */
  size_t size;
} rt_param;

/* A buffer a kernel takes besides its operands ("buffers"). */
typedef struct rt_buffer {
  char *arg;                /* the parameter it is passed as */
  unsigned long long bytes; /* at least 1 */
  int zero_once;            /* "init": "zero_once" (else "none") */
} rt_buffer;

typedef struct rt_kdesc {
  char *id, *kind, *key, *symbol;
  char *object; /* relative to <cache>/v1 */
  char *meta;   /* relative to <cache>/v1 */
  int width;
  int page_size;              /* "page_size": the KV-cache page size it serves; 0: any */
  unsigned char checksum[16]; /* XXH3-128, canonical (big-endian) */
  unsigned char sha256[32];   /* the object's, where has_sha256 */
  int has_sha256;             /* "sha256" given: what a signed manifest binds */
  unsigned long long size;    /* object bytes */
  int nparams;
  rt_param *params;  /* the kernel's own, or its kind's signature's */
  int params_shared; /* params belong to a signature: not freed here; NULL
                        while they wait for rt_manifest_signatures */
  unsigned grid[3], block[3], shared;
  int programmatic;    /* launch.programmatic: launch with programmatic stream serialisation */
  unsigned max_blocks; /* launch.max_blocks_per_sm, 0 when absent */
  int one_wave;        /* launch.one_wave: at most ceil(blocks / SMs) blocks per SM */
  int cooperative;     /* launch.cooperative: every block resident at once, checked at load */
  int persistent;      /* launch.persistent: grid[0] is a cap; the launch has as many blocks as
                          the device holds at once (kf_kernel.grid), at most grid[0] */
  int nbuffers;
  rt_buffer *buffers; /* "buffers", each arg checked against params at rt_manifest_finish */
} rt_kdesc;

/* A parameter list shared by every kernel of a kind ("signatures"). */
typedef struct rt_sig {
  char *kind;
  int nparams;
  rt_param *params;
} rt_sig;

/* One of "layer_types": count consecutive layers that run kinds, in order. */
typedef struct rt_layer_type {
  char *name;
  int count;
  int nkinds;
  char **kinds;
  char *layer; /* the layer kind that runs kinds in one launch; NULL: none */
} rt_layer_type;

typedef struct rt_manifest {
  int format;
  char *model, *arch;
  char *description; /* the description it was built from (absolute); NULL: not recorded */
  int page_size;     /* built for several page sizes: the one served when the caller names
                        none (the manifest's "page_size"); 0: one page size */
  kf_backend backend;
  int nlayer_types; /* "layer_types"; 0: every layer runs the same kinds */
  rt_layer_type *layer_types;
  int nsigs;
  rt_sig *sigs;
  int nkernels;      /* entries in "kernels" */
  int nparsed;       /* kernels[0..nparsed) are parsed; the rest are zero */
  rt_kdesc *kernels; /* in manifest order */
  /* what parsing the remaining entries needs, until rt_manifest_finish */
  char *path;        /* names the file in reasons */
  char *text;        /* the whole text */
  size_t next;       /* where entry nparsed starts (whitespace before it) */
  size_t end;        /* the "kernels" array's closing bracket */
  size_t sigs_start; /* "signatures" in text, not parsed yet; */
  size_t sigs_end;   /* both 0 once parsed (or when there is none) */
  int sig_hint;      /* the signature that served the last kernel */
} rt_manifest;

/* A manifest is parsed in steps, so that an eager open can load kernel i
 * while entry i+1 is parsed: rt_manifest_open parses the header (format,
 * model, arch, backend) and sizes kernels[]; rt_manifest_kernel parses
 * entry i; rt_manifest_signatures parses "signatures" and gives their
 * parameter lists to the entries parsed so far; rt_manifest_finish parses
 * what is left and checks what spans entries (ids are unique). Until then
 * an entry without "params" may have none yet (params_shared, params NULL). The steps may
 * run on any thread, one at a time. A step refuses the manifest with the
 * reason a parse of the whole text would give first (a bad signature
 * before any entry's problem). On failure they return KF_ERR_FORMAT for a
 * newer format, KF_ERR_BAD_MANIFEST otherwise, naming the file and the
 * offending field or line:column, and the caller must still
 * rt_manifest_free(m) (always safe); a refused manifest takes no further
 * steps. */
kf_status rt_manifest_open(const char *path, rt_manifest *m, rt_err *err);
/* Parses kernels[i]; i is nparsed (entries go in order) or below (done). */
kf_status rt_manifest_kernel(rt_manifest *m, int i, rt_err *err);
kf_status rt_manifest_signatures(rt_manifest *m, rt_err *err);
kf_status rt_manifest_finish(rt_manifest *m, rt_err *err);
/* All three steps on a text (path only names it in reasons) or a file. On
 * failure m is left empty. */
kf_status rt_manifest_parse(const char *path, const char *text, size_t len, rt_manifest *m,
                            rt_err *err);
kf_status rt_manifest_load(const char *path, rt_manifest *m, rt_err *err);
/* rt_sign.c: the text a manifest's signature covers (malloc'd; NULL when
 * out of memory), shared with the generator's signer. */
char *rt_manifest_signed_text(const char *model, const char *arch, const char *sha256,
                              long long size);
/* When KFORGE_TRUSTED_KEYS is set (the manifest's signature was checked):
 * KF_OK only when d names its object's SHA-256 and image[0..len) has it,
 * else KF_ERR_UNTRUSTED with the reason. KF_OK when it is not set. */
kf_status rt_object_check_signed(const rt_kdesc *d, const char *image, size_t len, rt_err *err);
/* When KFORGE_TRUSTED_KEYS is set: KF_OK only when rel's signed record
 * (rel.sig below r) covers these bytes and is signed by a trusted key, else
 * KF_ERR_UNTRUSTED with the reason. KF_OK when it is not set. */
kf_status rt_manifest_check_signature(const rt_root *r, const char *rel, const char *text,
                                      size_t len, rt_err *err);
/* rt_manifest_open of rel below r (the trust rules apply: KF_ERR_UNTRUSTED;
 * so does the signature, rt_manifest_check_signature). */
kf_status rt_manifest_open_at(const rt_root *r, const char *rel, rt_manifest *m, rt_err *err);
/* The parsed header agrees with the file's place, path being
 * <...>/manifests/<model>/<arch>.json: its model is model, its arch the
 * file's name. KF_ERR_BAD_MANIFEST naming the field otherwise. */
kf_status rt_manifest_check_place(const rt_manifest *m, const char *model, const char *path,
                                  rt_err *err);
/* Everything the runtime checks of the manifest rel below r, for kforge
 * verify: the header, the place, the signatures, every entry (each bad one
 * reported to bad_entry(ctx, i, reason), then skipped: its kernels[i] has no
 * id) and the ids (each repeat reported). Returns KF_OK when the entries
 * could be walked (even with bad ones), else the status and reason that
 * refuse the whole manifest; m is to be freed either way. */
kf_status rt_manifest_verify(const rt_root *r, const char *rel, const char *model, rt_manifest *m,
                             void (*bad_entry)(void *ctx, int i, const rt_err *e), void *ctx,
                             rt_err *err);
void rt_manifest_free(rt_manifest *m);
/* Size in bytes of a contract arg type, 0 if it is not one. */
size_t rt_type_size(const char *type);
/* The index of k's parameter called name, or -1. */
int rt_kdesc_param_index(const rt_kdesc *k, const char *name);

/* ---- JSON scanning (rt_json.c) ----------------------------------------- */

/* Offset just past the JSON value at text[at] (after whitespace), or 0 when
 * there is no well-formed value there. */
size_t rt_json_skip(const char *text, size_t len, size_t at);

typedef struct rt_json_layout {
  size_t kernels_start; /* the first "kernels" member's array, brackets */
  size_t kernels_end;   /* included; both 0 when it is absent or no array */
  int nkernels;         /* entries in it */
  size_t sigs_start;    /* the first "signatures" member's value, of any */
  size_t sigs_end;      /* type; both 0 when it is absent */
} rt_json_layout;

/* Checks that text is one well-formed JSON object and finds its "kernels"
 * array and its "signatures". 0 on success; -1 when the text is malformed or is one that only a
 * full parse reads right (a member name with escapes, trailing text): the
 * caller then parses it whole. */
int rt_json_scan_manifest(const char *text, size_t len, rt_json_layout *out);

/* ---- meta.json (rt_meta.c) --------------------------------------------- */

kf_status rt_meta_load(const char *path, kf_resources *res, rt_err *err);

/* ---- files (rt_file.c) ------------------------------------------------- */

/* Reads a whole file, opened read-only, into a malloc'd NUL-terminated
 * buffer the caller frees. KF_ERR_IO naming path on failure. */
kf_status rt_file_read(const char *path, char **data, size_t *len, rt_err *err);
/* malloc'd a + "/" + b; NULL when out of memory. */
char *rt_path_join(const char *a, const char *b);
/* Hex of 16 bytes into out[33]; parses 32 hex digits (0 on success). */
void rt_hex16(const unsigned char in[16], char out[33]);
int rt_unhex16(const char *hex, unsigned char out[16]);
/* Exactly 2n hex digits into n bytes. Returns 0 or -1. */
int rt_unhex(const char *hex, unsigned char *out, size_t n);
/* XXH3-128 of data in canonical byte order. */
void rt_xxh128(const void *data, size_t len, unsigned char out[16]);

/* ---- the cache's trust rules (rt_trust.c) ----------------------------- */

/* <cache>/v1, opened once: every file the runtime (and kforge verify) reads
 * is reached below it without following a link (docs/contracts.md,
 * "Trust"). */
struct rt_root {
  int fd;       /* <cache>/v1, a directory; -1 when not open */
  char *v1;     /* its path, for reasons */
  char *dir;    /* the cache directory as given, for the hint of a build command */
  int lax;      /* 1: owners and modes are not checked (links still refused) */
  unsigned uid; /* the caller's effective uid */
};

/* 1 when KFORGE_LAX_PERMISSIONS=1 is set in the environment. */
int rt_lax_from_env(void);
/* Opens <cache_dir>/v1 (which may not be a link; cache_dir may) and checks
 * that the root and v1/ are trusted. KF_ERR_IO when it cannot be opened (r
 * not open), KF_ERR_UNTRUSTED when v1 is a link (not open) or one of them is
 * owned by another user or writable by group or others: r is open then,
 * for verify to go on reporting. rt_root_close(r) is always safe. */
kf_status rt_root_open(rt_root *r, const char *cache_dir, int lax, rt_err *err);
void rt_root_close(rt_root *r);
/* KF_ERR_UNTRUSTED, naming what, when st is owned by neither the caller nor
 * root or is writable by group or others (unless r->lax). */
kf_status rt_trusted(const rt_root *r, const struct stat *st, const char *what, rt_err *err);
/* Opens rel (relative to v1) read-only and non-blocking, following no link:
 * it must be a regular file, trusted, and so must its directory when
 * check_dir. *fd is the
 * caller's to close, *size its bytes. KF_ERR_UNTRUSTED for a link on the
 * way or an untrusted file or directory, KF_ERR_IO otherwise; the reason
 * names the full path. */
kf_status rt_root_open_file(const rt_root *r, const char *rel, int check_dir, int *fd, size_t *size,
                            rt_err *err);
/* rt_root_open_file, then the whole file into a malloc'd NUL-terminated
 * buffer the caller frees. */
kf_status rt_root_read(const rt_root *r, const char *rel, int check_dir, char **data, size_t *len,
                       rt_err *err);
/* Opens the directory rel (trusted, reached without links) for listing. */
kf_status rt_root_opendir(const rt_root *r, const char *rel, DIR **dp, rt_err *err);
/* Reads the object of m's kernel d and checks its size and checksum against
 * the manifest's; *image (caller frees) is NULL on failure: KF_ERR_CHECKSUM
 * for a damaged object, else rt_root_read's status, the reason starting
 * "kernel <id>: " and, when a build would replace the object (missing or
 * damaged), ending with the command (rt_err_build_hint). */
kf_status rt_object_read(const rt_root *r, const rt_manifest *m, const rt_kdesc *d, char **image,
                         rt_err *err);
/* meta.json at rel below r (rt_meta_load's reasons and statuses, and
 * KF_ERR_UNTRUSTED). */
kf_status rt_meta_load_at(const rt_root *r, const char *rel, kf_resources *res, rt_err *err);

/* ---- handles (rt_runtime.c, rt_kernel.c) ------------------------------- */

enum { RT_UNLOADED = 0, RT_LOADED = 1, RT_FAILED = 2 };

struct kf_kernel {
  kf_runtime *rt;
  const rt_kdesc *d;  /* owned by rt->manifest */
  char *object_path;  /* <cache>/v1/<object> */
  int rows_param;     /* index of a trailing "int rows", else -1 */
  atomic_int state;   /* RT_UNLOADED, RT_LOADED or RT_FAILED */
  pthread_mutex_t mu; /* guards loading and meta reading */
  void *module;       /* valid once state is RT_LOADED */
  void *function;
  unsigned shared;  /* a launch's dynamic shared memory (d->shared, or more to
                       keep max_blocks_per_sm / one_wave), once RT_LOADED */
  unsigned grid[3]; /* a launch's grid: d->grid, or a persistent kernel's, once RT_LOADED */
  rt_err load_err;  /* why loading failed, when RT_FAILED */
  int meta_read;    /* res valid (under mu) */
  kf_resources res;
  rt_slot err;
};

typedef struct rt_kind {
  const char *kind;
  int n;
  kf_kernel **by_width; /* ascending width */
} rt_kind;

struct kf_runtime {
  rt_driver drv;
  rt_manifest manifest;
  rt_root root; /* <cache>/v1 */
  int lazy;
  int nkernels;
  kf_kernel *kernels; /* manifest order; [0, nkernels) set up */
  int nkinds;
  rt_kind *kinds;
  rt_slot err;
};

/* Loads k (object read, size and checksum checked, symbol resolved) unless
 * already loaded; safe from many threads. The failure is sticky. */
kf_status rt_kernel_load(kf_kernel *k, rt_err *err);
/* Reads a kernel's object and checks its size and checksum against the
 * manifest; *image (caller frees) is NULL on failure. Touches no driver and
 * no kernel state, so it may run on any thread. */
kf_status rt_kernel_read(const kf_kernel *k, char **image, rt_err *err);
/* Loads a kernel from an image rt_kernel_read produced (read_status and
 * read_err are its outcome), once, like rt_kernel_load. Frees image. */
kf_status rt_kernel_load_read(kf_kernel *k, char *image, kf_status read_status,
                              const rt_err *read_err, rt_err *err);
void rt_kernel_unload(kf_kernel *k);

#endif /* KFORGE_RT_INTERNAL_H */
