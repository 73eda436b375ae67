/* rt_sign.c: signed manifests (docs/contracts.md, "Remote layout" and
 * "Trust"). When KFORGE_TRUSTED_KEYS names public keys, a manifest is served
 * only when <manifest>.sig, its signed record, names it (model, arch, size,
 * SHA-256 of its bytes) and carries an ed25519 signature by one of those
 * keys; the manifest binds every object's checksum, which the loader checks.
 * The signed text is built here only, for the generator's signer too.
 *
 * libsodium is opened with dlopen when a signature is to be checked, as the
 * GPU libraries are: a server that requires no signature needs no libsodium,
 * and the runtime links nothing new. */
#define _GNU_SOURCE
#include "rt_internal.h"

#include <cjson/cJSON.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *rt_manifest_signed_text(const char *model, const char *arch, const char *sha256,
                              long long size) {
  char *s = NULL;
  if (asprintf(&s, "kforge-manifest-v1\nmodel=%s\narch=%s\nsha256=%s\nsize=%lld\n", model, arch,
               sha256, size) < 0)
    return NULL;
  return s;
}

/* libsodium's entry points, resolved once. */
static struct {
  int (*init)(void);
  int (*sha256)(unsigned char *out, const unsigned char *in, unsigned long long len);
  int (*verify)(const unsigned char *sig, const unsigned char *m, unsigned long long len,
                const unsigned char *pk);
  const char *why; /* NULL when loaded */
} sodium;
static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;

static void load_sodium(void) {
  const char *names[] = {getenv("KFORGE_SODIUM_LIBRARY"), "libsodium.so.23", "libsodium.so"};
  void *h = NULL;
  for (size_t i = 0; i < sizeof names / sizeof names[0] && !h; i++)
    if (names[i] && *names[i])
      h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    sodium.why = "libsodium cannot be loaded (install libsodium23 or set KFORGE_SODIUM_LIBRARY)";
    return;
  }
  *(void **)&sodium.init = dlsym(h, "sodium_init");
  *(void **)&sodium.sha256 = dlsym(h, "crypto_hash_sha256");
  *(void **)&sodium.verify = dlsym(h, "crypto_sign_verify_detached");
  if (!sodium.init || !sodium.sha256 || !sodium.verify || sodium.init() < 0)
    sodium.why = "libsodium does not start";
}

/* Decodes exactly n bytes from 2n hex digits (surrounding whitespace
 * allowed). Returns 0 or -1. */
static int from_hex(const char *s, unsigned char *out, size_t n) {
  while (*s == ' ' || *s == '\n' || *s == '\t')
    s++;
  for (size_t i = 0; i < n; i++) {
    unsigned v = 0;
    for (int k = 0; k < 2; k++) {
      char c = *s++;
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= (unsigned)(c - '0');
      else if (c >= 'a' && c <= 'f')
        v |= (unsigned)(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F')
        v |= (unsigned)(c - 'A' + 10);
      else
        return -1;
    }
    out[i] = (unsigned char)v;
  }
  while (*s == ' ' || *s == '\n' || *s == '\t')
    s++;
  return *s ? -1 : 0;
}

/* Whether pk is one of the keys the list names (hex keys or files holding
 * one); an item that is neither is an error. */
static kf_status trusted_key(const char *list, const unsigned char pk[32], int *found,
                             rt_err *err) {
  char *copy = strdup(list), *save = NULL;
  kf_status st = KF_OK;
  *found = 0;
  if (!copy)
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  for (char *t = strtok_r(copy, ", \t\n", &save); t && st == KF_OK;
       t = strtok_r(NULL, ", \t\n", &save)) {
    unsigned char k[32];
    if (from_hex(t, k, sizeof k) != 0) {
      char *text = NULL;
      size_t len;
      rt_err ignored = {0};
      int bad = rt_file_read(t, &text, &len, &ignored) != KF_OK || from_hex(text, k, sizeof k);
      free(text);
      if (bad)
        st = rt_err_set(err, KF_ERR_UNTRUSTED,
                        "KFORGE_TRUSTED_KEYS: '%.200s' is neither 64 hex digits nor a file "
                        "holding a public key",
                        t);
    }
    if (st == KF_OK && !memcmp(k, pk, sizeof k))
      *found = 1;
  }
  free(copy);
  return st;
}

static const char *str_of(const cJSON *o, const char *name) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, name);
  return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* Checks the parsed record rec of the manifest at rel against its bytes.
 * Returns KF_OK or KF_ERR_UNTRUSTED with the reason. */
static kf_status check_record(const rt_root *r, const char *rel, const cJSON *rec, const char *text,
                              size_t len, const char *keys, rt_err *err) {
  const cJSON *sig = cJSON_GetObjectItemCaseSensitive(rec, "signature");
  const char *model = str_of(rec, "model"), *arch = str_of(rec, "arch");
  const char *sha = str_of(rec, "sha256"), *pkhex = str_of(sig, "public_key");
  const char *sighex = str_of(sig, "ed25519");
  const cJSON *size = cJSON_GetObjectItemCaseSensitive(rec, "size");
  char want_rel[600];
  unsigned char digest[32], want[32], pk[32], s[64];
  if (!model || !arch || !sha || !cJSON_IsNumber(size) || from_hex(sha, want, sizeof want))
    return rt_err_set(err, KF_ERR_UNTRUSTED, "%s/%s.sig: not a manifest record", r->v1, rel);
  snprintf(want_rel, sizeof want_rel, "manifests/%s/%s.json", model, arch);
  if (strcmp(want_rel, rel) != 0)
    return rt_err_set(err, KF_ERR_UNTRUSTED, "%s/%s.sig: signs %s/%s, not this manifest", r->v1,
                      rel, model, arch);
  if (!pkhex || !sighex)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "%s/%s: unsigned, and KFORGE_TRUSTED_KEYS requires a signature", r->v1, rel);
  if (from_hex(pkhex, pk, sizeof pk) || from_hex(sighex, s, sizeof s))
    return rt_err_set(err, KF_ERR_UNTRUSTED, "%s/%s.sig: signature is malformed", r->v1, rel);
  int found;
  kf_status st = trusted_key(keys, pk, &found, err);
  if (st != KF_OK)
    return st;
  if (!found)
    return rt_err_set(err, KF_ERR_UNTRUSTED, "%s/%s: signed by untrusted key %.64s", r->v1, rel,
                      pkhex);
  sodium.sha256(digest, (const unsigned char *)text, len);
  if (size->valuedouble != (double)len || memcmp(digest, want, sizeof want) != 0)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "%s/%s: its bytes are not the ones its signature covers", r->v1, rel);
  char *msg = rt_manifest_signed_text(model, arch, sha, (long long)size->valuedouble);
  if (!msg)
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  int bad = sodium.verify(s, (const unsigned char *)msg, strlen(msg), pk) != 0;
  free(msg);
  if (bad)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "%s/%s: signature by key %.64s does not match the content", r->v1, rel,
                      pkhex);
  return KF_OK;
}

kf_status rt_manifest_check_signature(const rt_root *r, const char *rel, const char *text,
                                      size_t len, rt_err *err) {
  const char *keys = getenv("KFORGE_TRUSTED_KEYS");
  if (!keys || !*keys)
    return KF_OK;
  pthread_once(&sodium_once, load_sodium);
  if (sodium.why)
    return rt_err_set(err, KF_ERR_UNTRUSTED, "KFORGE_TRUSTED_KEYS is set but %s", sodium.why);
  char *sig_rel = NULL, *rec_text = NULL;
  size_t rec_len;
  if (asprintf(&sig_rel, "%s.sig", rel) < 0)
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  kf_status st = rt_root_read(r, sig_rel, 1, &rec_text, &rec_len, err);
  free(sig_rel);
  if (st == KF_ERR_IO)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "%s/%s: unsigned (no .sig beside it), and KFORGE_TRUSTED_KEYS requires a "
                      "signature",
                      r->v1, rel);
  if (st != KF_OK)
    return st;
  cJSON *rec = cJSON_ParseWithLength(rec_text, rec_len);
  free(rec_text);
  st = cJSON_IsObject(rec)
           ? check_record(r, rel, rec, text, len, keys, err)
           : rt_err_set(err, KF_ERR_UNTRUSTED, "%s/%s.sig: not a manifest record", r->v1, rel);
  cJSON_Delete(rec);
  return st;
}

kf_status rt_object_check_signed(const rt_kdesc *d, const char *image, size_t len, rt_err *err) {
  const char *keys = getenv("KFORGE_TRUSTED_KEYS");
  if (!keys || !*keys)
    return KF_OK;
  /* the checksum the signed manifest names is XXH3-128, which no one
   * computing a collision is stopped by: the signature binds SHA-256 */
  if (!d->has_sha256)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "kernel %s: its signed manifest names no SHA-256 for the object (written "
                      "by an older kforge), and KFORGE_TRUSTED_KEYS requires one; build or pull "
                      "it again",
                      d->id);
  pthread_once(&sodium_once, load_sodium);
  if (sodium.why)
    return rt_err_set(err, KF_ERR_UNTRUSTED, "KFORGE_TRUSTED_KEYS is set but %s", sodium.why);
  unsigned char sum[32];
  sodium.sha256(sum, (const unsigned char *)image, len);
  if (memcmp(sum, d->sha256, sizeof sum) != 0)
    return rt_err_set(err, KF_ERR_UNTRUSTED,
                      "kernel %s: object %s does not have the SHA-256 its signed manifest names",
                      d->id, d->object);
  return KF_OK;
}
