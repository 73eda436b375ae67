/* sign.c: key files, signing and trust checks (see sign.h). */
#define _GNU_SOURCE
#include "sign.h"

#include <openssl/evp.h>
#include <sodium.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int kf_sign_init(void) { return sodium_init() < 0 ? -1 : 0; }

static int start(char **err) {
  if (kf_sign_init() == 0)
    return 0;
  *err = kf_xstrdup("libsodium cannot start");
  return -1;
}

/* The option's value, else the environment variable's; NULL when neither
 * is set. */
static const char *configured(const char *given, const char *env) {
  if (given && *given)
    return given;
  const char *v = getenv(env);
  return v && *v ? v : NULL;
}

/* SHA-256 through libcrypto: it uses the CPU's SHA instructions (about
 * 10x libsodium's portable code here, which was a quarter of a pull). */
void kf_sha256_hex(const void *data, size_t len, char out[65]) {
  unsigned char h[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(data, len, h, &n, EVP_sha256(), NULL) != 1 || n != 32)
    abort(); /* libcrypto without SHA-256: nothing here can be checked */
  sodium_bin2hex(out, 65, h, 32);
}

/* Decodes exactly n bytes of hex (surrounding whitespace allowed). Returns 0
 * or -1. */
static int from_hex(const char *text, unsigned char *out, size_t n) {
  size_t got = 0;
  const char *end = NULL;
  while (*text == ' ' || *text == '\n' || *text == '\t')
    text++;
  if (sodium_hex2bin(out, n, text, strlen(text), NULL, &got, &end) != 0 || got != n)
    return -1;
  while (*end == ' ' || *end == '\n' || *end == '\t')
    end++;
  return *end ? -1 : 0;
}

static int write_new(const char *path, const char *text, mode_t mode) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0)
    return -1;
  size_t n = strlen(text);
  int ok = write(fd, text, n) == (ssize_t)n && fsync(fd) == 0;
  int e = errno;
  close(fd);
  errno = e;
  return ok ? 0 : -1;
}

int kf_sign_keygen(const char *path, char **err) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
  if (start(err) != 0)
    return -1;
  crypto_sign_keypair(pk, sk);
  char skhex[2 * sizeof sk + 2], pkhex[2 * sizeof pk + 2];
  sodium_bin2hex(skhex, sizeof skhex - 1, sk, sizeof sk);
  sodium_bin2hex(pkhex, sizeof pkhex - 1, pk, sizeof pk);
  sodium_memzero(sk, sizeof sk);
  strcat(skhex, "\n");
  strcat(pkhex, "\n");
  char *pub = kf_xasprintf("%s.pub", path);
  int rc = 0;
  if (write_new(path, skhex, 0600) != 0) {
    *err = kf_xasprintf("cannot create %s: %s", path, strerror(errno));
    rc = -1;
  } else if (write_new(pub, pkhex, 0644) != 0) {
    *err = kf_xasprintf("cannot create %s: %s", pub, strerror(errno));
    unlink(path);
    rc = -1;
  }
  sodium_memzero(skhex, sizeof skhex);
  free(pub);
  return rc;
}

int kf_signer_load(const char *path, kf_signer *s, char **err) {
  memset(s, 0, sizeof *s);
  if (!(path = configured(path, "KFORGE_SIGNING_KEY")))
    return 0;
  if (start(err) != 0)
    return -1;
  size_t len;
  char *text = kf_read_file(path, &len);
  if (!text) {
    *err = kf_xasprintf("signing key %s: %s", path, kf_read_error(errno));
    return -1;
  }
  int bad = from_hex(text, s->secret, sizeof s->secret);
  sodium_memzero(text, len);
  free(text);
  if (bad) {
    *err =
        kf_xasprintf("signing key %s: not a secret key (128 hex digits, from kforge keygen)", path);
    return -1;
  }
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  crypto_sign_ed25519_sk_to_pk(pk, s->secret);
  sodium_bin2hex(s->public_hex, sizeof s->public_hex, pk, sizeof pk);
  return 1;
}

void kf_signer_sign(const kf_signer *s, const char *msg, char out[129]) {
  unsigned char sig[crypto_sign_BYTES];
  crypto_sign_detached(sig, NULL, (const unsigned char *)msg, strlen(msg), s->secret);
  sodium_bin2hex(out, 129, sig, sizeof sig);
}

/* One item of the trusted list: a hex key, or a file holding one. */
static int add_trusted(kf_trust *t, const char *item, char **err) {
  unsigned char pk[crypto_sign_PUBLICKEYBYTES];
  char hex[65];
  if (from_hex(item, pk, sizeof pk) != 0) {
    size_t len;
    char *text = kf_read_file(item, &len);
    if (!text) {
      *err = kf_xasprintf("trusted key '%s': neither 64 hex digits nor a readable file (%s)", item,
                          kf_read_error(errno));
      return -1;
    }
    int bad = from_hex(text, pk, sizeof pk);
    free(text);
    if (bad) {
      *err = kf_xasprintf("trusted key file %s: not a public key (64 hex digits, the .pub file "
                          "of kforge keygen)",
                          item);
      return -1;
    }
  }
  sodium_bin2hex(hex, sizeof hex, pk, sizeof pk);
  if (!kf_strv_contains(&t->keys, hex))
    kf_strv_push(&t->keys, hex);
  return 0;
}

int kf_trust_load(const char *list, kf_trust *t, char **err) {
  memset(t, 0, sizeof *t);
  if (!(list = configured(list, "KFORGE_TRUSTED_KEYS")))
    return 0;
  if (start(err) != 0)
    return -1;
  char *copy = kf_xstrdup(list), *save = NULL;
  int rc = 0;
  for (char *item = strtok_r(copy, ", \t\n", &save); item && rc == 0;
       item = strtok_r(NULL, ", \t\n", &save))
    rc = add_trusted(t, item, err);
  free(copy);
  if (rc)
    kf_trust_free(t);
  return rc;
}

void kf_trust_free(kf_trust *t) { kf_strv_free(&t->keys); }

char *kf_trust_check(const kf_trust *t, const char *msg, const char *public_key,
                     const char *signature) {
  if (!t || t->keys.n == 0)
    return NULL;
  if (!public_key || !signature)
    return kf_xstrdup("unsigned, and trusted keys are required");
  unsigned char pk[crypto_sign_PUBLICKEYBYTES], sig[crypto_sign_BYTES];
  if (from_hex(public_key, pk, sizeof pk) != 0 || from_hex(signature, sig, sizeof sig) != 0)
    return kf_xstrdup("signature is malformed");
  char hex[65];
  sodium_bin2hex(hex, sizeof hex, pk, sizeof pk);
  if (!kf_strv_contains(&t->keys, hex))
    return kf_xasprintf("signed by untrusted key %s", hex);
  if (crypto_sign_verify_detached(sig, (const unsigned char *)msg, strlen(msg), pk) != 0)
    return kf_xasprintf("signature by key %s does not match the content", hex);
  return NULL;
}
