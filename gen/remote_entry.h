/* remote_entry.h: what kforge keeps on a remote, and the one reader and
 * writer of it (docs/contracts.md, "Remote layout"). The layout is Bazel's
 * HTTP cache layout, so that one store also serves bazel-remote and its
 * S3/GCS proxies:
 *   cas/<sha256>   content: an entry's object and meta.json, a manifest;
 *   ac/<sha256>    a record that names content: sha256 of
 *                  "kforge/v1/entry/<key>" for an entry,
 *                  "kforge/v1/manifest/<model>/<arch>" for a manifest;
 *                  "kforge/v1/shared/<name>" holds what keying shares
 *                  (digest.h's kf_closure_share) in the record itself.
 * Content goes up before the record that names it, write-once (a manifest's
 * record is replaced). Nothing read back is trusted: every blob is checked
 * against the SHA-256 its record names, the record against the key computed
 * locally, the meta against the record, the object against the meta's
 * checksum and, when trusted keys are configured, the record's signature.
 * Only then does an entry reach the local cache, through its atomic
 * publication. */
#ifndef KF_REMOTE_ENTRY_H
#define KF_REMOTE_ENTRY_H

#include "cache.h"
#include "remote.h"
#include "sign.h"

/* A remote entry that failed verification. */
#define KF_REMOTE_BAD (-2)

/* The remotes of a command with its signing key and trusted keys. */
typedef struct {
  kf_remote *remote;
  int signing; /* signer holds a key */
  kf_signer signer;
  kf_trust trust;
} kf_tier;

/* Opens the remotes (urls, else $KFORGE_REMOTE), the signing key and the
 * trusted keys. Returns 1 with t ready, 0 when no remote is configured (t is
 * still to be freed), or -1 with *err (caller frees). */
int kf_tier_open(kf_tier *t, const kf_strv *urls, int read_only, const char *signing_key,
                 const char *trusted_keys, char **err);
void kf_tier_free(kf_tier *t);

/* An entry's record on the remote. */
typedef struct {
  char key[33];
  char object[16]; /* object.cubin or object.hsaco */
  char object_sha256[65];
  long long object_size;
  char checksum[33]; /* the object's XXH3-128, as meta.json says */
  char meta_sha256[65];
  long long meta_size;
} kf_remote_record;

/* Checks len bytes of text as key's record (signature included), filling
 * *rec. Returns NULL, or why it is refused (caller frees). */
char *kf_remote_record_check(const kf_tier *t, const char *key, const char *text, size_t len,
                             kf_remote_record *rec);
/* Checks len bytes of text as the record of (model, arch)'s manifest,
 * giving the SHA-256 and size it names. Returns NULL, or why it is refused
 * (caller frees). */
char *kf_remote_manifest_record_check(const kf_tier *t, const char *model, const char *arch,
                                      const char *text, size_t len, char sha[65], long long *size);
/* Reads and checks key's record (signature included). Returns KF_REMOTE_OK,
 * KF_REMOTE_MISSING, or KF_REMOTE_BAD with *why (caller frees). */
int kf_remote_entry_record(kf_tier *t, const char *key, kf_remote_record *rec, char **why);
/* A verified entry written into a private tmp directory of the cache, its
 * key's lock held, not yet published. */
typedef struct {
  char key[33];
  char *dir;
  int lock;
  char checksum[33]; /* the object's, as its verified record and meta say */
  long long size;
} kf_staged;

/* Fetches n keys' entries and verifies each into staged[i] (publish or
 * drop it), asking the remote for every record at once, then for their
 * contents a chunk of entries at a time. sts[i]: KF_REMOTE_OK,
 * KF_REMOTE_MISSING, or KF_REMOTE_BAD with whys[i] (caller frees; nothing
 * staged then). */
void kf_remote_entries_stage(kf_tier *t, const kf_cache *c, const char *const *keys, size_t n,
                             kf_staged *staged, int *sts, char **whys);
/* Publishes a staged entry (unless a good one appeared meanwhile) and
 * releases it; synced: the caller made its files durable with
 * kf_cache_sync (kf_cache_publish_synced). Returns 0, or -1 with *why. */
int kf_staged_publish(const kf_cache *c, kf_staged *s, int synced, char **why);
/* Publishes n staged entries with one file-system sync (kf_cache_sync) of
 * the staged files before their renames. The renames are durable after the
 * caller's next kf_cache_sync, which must come before a manifest naming the
 * entries is written (a crash before it loses entries, never half of one).
 * Returns 0, or -1 with *why (caller frees); every entry is released either
 * way, and what was published before a failure stays. */
int kf_staged_publish_all(const kf_cache *c, kf_staged *v, size_t n, char **why);
/* Removes a staged entry and releases its lock. */
void kf_staged_drop(kf_staged *s);
/* Uploads c's good entry of key (object, meta, then the record; what is
 * there already is left). Returns KF_REMOTE_OK or KF_REMOTE_FAILED. */
int kf_remote_entry_upload(kf_tier *t, const kf_cache *c, const char *key);

/* A manifest's record for its text (signed when t signs): what goes to the
 * remote, and beside a local manifest as <arch>.json.sig (caller frees). */
char *kf_manifest_record_text(const kf_tier *t, const char *model, const char *arch,
                              const char *text);
/* Stores a manifest's text (content, then its record). Returns KF_REMOTE_OK
 * or KF_REMOTE_FAILED. */
int kf_remote_manifest_put(kf_tier *t, const char *model, const char *arch, const char *text);
/* Reads and checks a manifest's text into *out, and its record into
 * *record (may be NULL). Returns KF_REMOTE_OK, KF_REMOTE_MISSING or
 * KF_REMOTE_BAD with *why. */
int kf_remote_manifest_get(kf_tier *t, const char *model, const char *arch, kf_buf *out,
                           kf_buf *record, char **why);

/* What keying shares (digest.h's kf_closure_share), under ac/<sha256 of
 * "kforge/v1/shared/<id>"> as a record with the text in "body", signed
 * like an entry's. get returns the body of a record that names id and
 * passes the trusted keys, else NULL (caller frees); put replaces the
 * record (a closure class's headers change) on writable remotes. */
char *kf_remote_shared_get(kf_tier *t, const char *id, size_t *len);
void kf_remote_shared_put(kf_tier *t, const char *id, const char *text);

#endif /* KF_REMOTE_ENTRY_H */
