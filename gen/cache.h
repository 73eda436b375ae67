/* cache.h: the content-addressed cache under <dir>/v1 (layout in
 * docs/contracts.md). Entries are published whole or not at all: written in
 * tmp/, fsynced, renamed into objects/. Builders of one key serialise on an
 * flock, which the kernel drops when a holder dies, so no lock outlives a
 * crashed builder. */
#ifndef KF_CACHE_H
#define KF_CACHE_H

#include "util.h"

#include <cjson/cJSON.h>

typedef struct {
  char *root; /* as given, absolute */
  char *v1;   /* root/v1 */
} kf_cache;

/* Where the cache is: --cache, else $KFORGE_CACHE_DIR, else ./cache. No
 * file-system access. */
void kf_cache_init(kf_cache *c, const char *dir);
void kf_cache_free(kf_cache *c);

/* Creates the layout and checks that the cache can be written; removes
 * leftovers of dead builders. Returns 0, or -1 with a reason in *err. */
int kf_cache_prepare(kf_cache *c, char **err);

char *kf_cache_entry_dir(const kf_cache *c, const char *key);
char *kf_cache_manifest_path(const kf_cache *c, const char *model, const char *arch);

/* Entry state after checking the object against meta.json's checksum. */
enum { KF_ENTRY_MISSING = 0, KF_ENTRY_OK = 1, KF_ENTRY_DAMAGED = -1 };
/* Checks an entry. On OK, *meta (if non-NULL) gets meta.json's tree (caller
 * frees). On DAMAGED, *why (if non-NULL) says what is wrong (caller frees). */
int kf_cache_check_entry(const kf_cache *c, const char *key, cJSON **meta, char **why);

/* Takes the key's lock (blocking). Returns an fd to pass to kf_cache_unlock,
 * or -1 with errno set. */
int kf_cache_lock(const kf_cache *c, const char *key);
/* Non-blocking variant: -1 with errno EWOULDBLOCK when another holds it. */
int kf_cache_trylock(const kf_cache *c, const char *key);
void kf_cache_unlock(int fd);

/* A fresh private directory under tmp/ for building key (caller frees). */
char *kf_cache_tmpdir(const kf_cache *c, const char *key);
/* Moves a finished tmp directory into place (replacing a damaged entry).
 * Call with the key's lock held. Returns 0 or -1 with errno set. */
int kf_cache_publish(const kf_cache *c, const char *key, const char *tmpdir);
/* Removes an entry so that it vanishes at once (rename, then delete). */
int kf_cache_remove_entry(const kf_cache *c, const char *key);
/* Records a use of an entry for LRU eviction (best effort). */
void kf_cache_touch(const kf_cache *c, const char *key);

/* Calls fn for every entry key under objects/ (sorted). */
void kf_cache_each_entry(const kf_cache *c, void (*fn)(const char *key, void *ctx), void *ctx);
/* Calls fn for every manifest path (sorted). */
void kf_cache_each_manifest(const kf_cache *c, void (*fn)(const char *path, void *ctx), void *ctx);

#endif /* KF_CACHE_H */
