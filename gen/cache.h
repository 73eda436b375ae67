/* cache.h: the content-addressed cache under <dir>/v1 (layout in
 * docs/contracts.md). Entries are published whole or not at all: written in
 * tmp/, fsynced, renamed into objects/. Builders of one key serialise on an
 * flock, which the kernel drops when a holder dies, so no lock outlives a
 * crashed builder. */
#ifndef KF_CACHE_H
#define KF_CACHE_H

#include "util.h"

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

/* One input of a key as meta.json keeps it, for `explain`. */
typedef struct {
  char *tag;
  char *name;
  char *hash;  /* 16 hex digits */
  char *value; /* NULL for file and source records (their tokens are not kept) */
} kf_meta_input;

/* What the compiler reported about the code object; -1: not reported. The
 * first five are every backend's (AMD: registers are VGPRs, stack_bytes the
 * scratch per lane, shared_bytes the LDS); the rest are AMD's only. */
typedef struct {
  long registers, stack_bytes, spill_stores, spill_loads, shared_bytes;
  long sgprs, agprs, spilled_registers, waves_per_eu;
} kf_meta_resources;

/* Every figure unreported. */
#define KF_META_RESOURCES_NONE                                                                     \
  { -1, -1, -1, -1, -1, -1, -1, -1, -1 }

/* An entry's meta.json. A loaded one may be incomplete: a string member that
 * is absent or not a string is NULL, a number that is absent is marked. */
typedef struct {
  char *key;
  char *kernel_id;
  char *object;   /* file name of the code object inside the entry */
  char *checksum; /* of the object, 32 hex digits when well formed */
  char *sha256;   /* of the object, 64 hex digits (NULL: an entry of an older kforge) */
  int has_size;
  long long size;  /* the object's bytes */
  kf_strv command; /* the compile command, output path included */
  char *compiler_output;
  int has_seconds;
  double compile_seconds;
  int has_resources;
  kf_meta_resources resources;
  kf_meta_input *inputs;
  size_t ninputs;
} kf_entry_meta;

/* Writes m as dir/meta.json (atomically). Returns 0 or -1 with errno set. */
int kf_entry_meta_write(const char *dir, const kf_entry_meta *m);
/* Reads key's meta.json, however incomplete. Returns 0, or -1 when it cannot
 * be read or is not a JSON object (m is then empty). Free m either way. */
int kf_entry_meta_load(const kf_cache *c, const char *key, kf_entry_meta *m);
/* Appends an input (strings copied; value may be NULL). */
void kf_entry_meta_add_input(kf_entry_meta *m, const char *tag, const char *name, const char *hash,
                             const char *value);
void kf_entry_meta_free(kf_entry_meta *m);

/* Entry state after checking the object against meta.json's checksum. */
enum { KF_ENTRY_MISSING = 0, KF_ENTRY_OK = 1, KF_ENTRY_DAMAGED = -1 };
/* Checks an entry. On OK, *meta (if non-NULL) gets its meta.json (free with
 * kf_entry_meta_free); otherwise *meta is left empty. On DAMAGED, *why (if
 * non-NULL) says what is wrong (caller frees). */
int kf_cache_check_entry(const kf_cache *c, const char *key, kf_entry_meta *meta, char **why);

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
/* kf_cache_publish for many entries at once (pull, a build's fetches): the
 * caller has made the tmp directory's files durable with kf_cache_sync, and
 * makes the renames durable with another kf_cache_sync before anything
 * names the entries: two syncs for a whole command instead of four per
 * entry. Same contract otherwise. */
int kf_cache_publish_synced(const kf_cache *c, const char *key, const char *tmpdir);
/* syncfs(2) of the cache's file system. Returns 0 or -1 with errno set. */
int kf_cache_sync(const kf_cache *c);
/* Removes an entry so that it vanishes at once (rename, then delete). */
int kf_cache_remove_entry(const kf_cache *c, const char *key);
/* Records a use of an entry for LRU eviction (best effort). */
void kf_cache_touch(const kf_cache *c, const char *key);

/* Calls fn for every entry key under objects/ (sorted). */
void kf_cache_each_entry(const kf_cache *c, void (*fn)(const char *key, void *ctx), void *ctx);
/* Calls fn for every manifest path (sorted). */
void kf_cache_each_manifest(const kf_cache *c, void (*fn)(const char *path, void *ctx), void *ctx);

#endif /* KF_CACHE_H */
