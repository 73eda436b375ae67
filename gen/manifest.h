/* manifest.h: the manifest of one (model, arch), <cache>/v1/manifests/
 * <model>/<arch>.json (docs/contracts.md): the one owner of its format for the
 * writer (`build`) and every generator-side reader (`ls`, `verify`,
 * `explain`). Callers see typed structs, never the JSON. */
#ifndef KF_MANIFEST_H
#define KF_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#include "util.h"

typedef struct {
  char *name;
  char *type; /* C spelling */
  int size;   /* bytes */
} kf_manifest_param;

/* The parameter list shared by every kernel of one kind. */
typedef struct {
  char *kind;
  kf_manifest_param *params;
  size_t nparams;
} kf_manifest_signature;

typedef struct {
  int has_dims; /* grid and block were read (always set when writing) */
  int64_t grid[3], block[3];
  int64_t shared_bytes;
  int programmatic;
  int one_wave;
  int64_t max_blocks_per_sm; /* 0: no cap (not written) */
  int64_t cluster[3];        /* {1, 1, 1}: no cluster (not written) */
  int cooperative;           /* every block resident at once (not written when 0) */
  int persistent;            /* grid[0] is a cap: the runtime launches as many blocks as the
                                device holds at once, at most grid[0] (not written when 0) */
} kf_manifest_launch;

/* A buffer the kernel takes besides its operands (the schema's "buffers",
 * sized for the kernel's width). */
typedef struct {
  char *arg; /* the parameter it is passed as */
  int64_t bytes;
  int zero_once; /* zeroed once when allocated ("init": "zero_once"), else "none" */
} kf_manifest_buffer;

/* One kernel. A loaded manifest keeps every record of its "kernels" array in
 * order; a string member that is absent or not a string is NULL. */
typedef struct {
  char *id; /* <model>/<kind>/w<W>[p<P>]/<arch> */
  char *kind;
  int width;
  int page_size;  /* the KV-cache page size it was built for; 0: any (not written) */
  char *key;      /* 32 hex digits (a loaded one is not checked) */
  char *object;   /* objects/<k[0:2]>/<key>/object.cubin|hsaco, relative to v1 */
  char *meta;     /* objects/<k[0:2]>/<key>/meta.json */
  char *checksum; /* of the object */
  char *sha256;   /* of the object, what a signature binds (NULL: not written) */
  int has_size;
  int64_t size; /* the object's bytes */
  char *symbol;
  kf_manifest_launch launch;
  kf_manifest_buffer *buffers; /* "buffers" (not written when there are none) */
  size_t nbuffers;
} kf_manifest_kernel;

/* "layer_types": count consecutive layers that run kinds, in order (the
 * family's, model.h). */
typedef struct {
  char *name;
  int64_t count;
  kf_strv kinds;
  char *layer; /* the layer kind whose phases are kinds, in order, where the
                  arch has one; NULL: none (not written) */
} kf_manifest_layer_type;

typedef struct {
  char *generator; /* "kforge <version>" */
  char *model;
  char *arch;
  char *backend;     /* "cuda" or "hip" */
  char *description; /* the description's absolute path, for the runtime's hint of the build
                        command; NULL: not recorded */
  int page_size;     /* a description of several page sizes: the one served when the caller names
                        none (the shape's); 0: one page size (not written) */
  kf_manifest_signature *signatures;
  size_t nsignatures;
  kf_manifest_kernel *kernels;
  size_t nkernels;
  kf_manifest_layer_type *layer_types; /* written only where there are some */
  size_t nlayer_types;
} kf_manifest;

/* Building one for writing: every string is copied. */
void kf_manifest_init(kf_manifest *m, const char *model, const char *arch, const char *backend);
/* The signature of kind, or NULL. */
kf_manifest_signature *kf_manifest_signature_of(const kf_manifest *m, const char *kind);
/* Adds an empty signature for kind (which must not have one yet). */
kf_manifest_signature *kf_manifest_add_signature(kf_manifest *m, const char *kind);
void kf_manifest_add_param(kf_manifest_signature *s, const char *name, const char *type, int size);
/* Appends a kernel with copies of the given strings; object and meta paths
 * are derived from key and object_name. Returns it for the launch fields. */
kf_manifest_kernel *kf_manifest_add_kernel(kf_manifest *m, const char *id, const char *kind,
                                           int width, const char *key, const char *object_name,
                                           const char *checksum, int64_t size, const char *symbol);

/* Appends a layer type (strings copied; layer may be NULL). */
void kf_manifest_add_layer_type(kf_manifest *m, const char *name, int64_t count,
                                const kf_strv *kinds, const char *layer);

/* Appends a buffer to k (arg copied). */
void kf_manifest_add_buffer(kf_manifest_kernel *k, const char *arg, int64_t bytes, int zero_once);

/* m as the bytes kf_manifest_write writes (caller frees). */
char *kf_manifest_text(const kf_manifest *m);
/* Writes m to path (creating its directory), replacing the old file
 * atomically and only when the bytes differ (*changed, may be NULL, says
 * whether it wrote). Returns 0, or -1 with errno set (the old file stays). */
int kf_manifest_write(const char *path, const kf_manifest *m, int *changed);
/* Reads the manifest at path. Returns 0, or -1 with *err (caller frees) when
 * it cannot be read, is not JSON or has no "kernels" array; m is then empty
 * and still to be freed. */
int kf_manifest_load(const char *path, kf_manifest *m, char **err);
/* The same from len bytes of text (a remote's copy), with the same
 * results. */
int kf_manifest_parse(const char *text, size_t len, kf_manifest *m, char **err);
void kf_manifest_free(kf_manifest *m);

#endif /* KF_MANIFEST_H */
