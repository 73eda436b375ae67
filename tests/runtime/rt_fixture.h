/* Test caches for the runtime's tests: writes, per docs/contracts.md, the
 * manifest, code objects and meta.json of a (model, arch) into a cache
 * directory. Objects are in the fake drivers' format (fake_driver.h), so the
 * fakes resolve exactly the symbols an object declares. */
#ifndef KF_RT_FIXTURE_H
#define KF_RT_FIXTURE_H

#include <stddef.h>

typedef struct fx_spec {
  const char *kind;
  int width;
  const char *params;        /* "const float* x; float* y; int rows" */
  unsigned shared;           /* launch.shared_bytes */
  const char *object_symbol; /* symbol the object holds; NULL: the real one */
  unsigned max_blocks;       /* launch.max_blocks_per_sm; 0: left out */
  int one_wave;              /* launch.one_wave: true; 0: left out */
} fx_spec;

/* A fresh directory under $TMPDIR (or /tmp); malloc'd. */
char *fx_tmpdir(void);
/* Writes objects, meta.json and manifests/<model>/<arch>.json into cache.
 * format is the manifest's "format" (1 normally). 0 on success. */
int fx_cache_add(const char *cache, const char *model, const char *arch, const fx_spec *specs,
                 int n, int format);
/* malloc'd path of a kernel's object / meta.json / the manifest. */
char *fx_object_path(const char *cache, const char *model, const char *arch, const char *kind,
                     int width);
char *fx_meta_path(const char *cache, const char *model, const char *arch, const char *kind,
                   int width);
char *fx_manifest_path(const char *cache, const char *model, const char *arch);
/* The contract's symbol for a kernel id, into out. */
void fx_symbol(const char *id, char *out, size_t size);
int fx_write_file(const char *path, const void *data, size_t len);
/* Flips one byte at offset in path. 0 on success. */
int fx_flip_byte(const char *path, long offset);
/* rm -rf; chmod -R u+w first so read-only trees go too. */
void fx_remove_tree(const char *path);

#endif /* KF_RT_FIXTURE_H */
