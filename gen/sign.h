/* sign.h: ed25519 signatures of remote entries and manifests (libsodium).
 * A builder with a secret key (`kforge keygen`, then --signing-key FILE or
 * $KFORGE_SIGNING_KEY) signs what it uploads; a reader with trusted public
 * keys (--trusted-keys or $KFORGE_TRUSTED_KEYS: hex keys or files holding
 * them, separated by commas or spaces) refuses what is unsigned or signed by
 * another key. Key files are hex text: the secret key file holds the 64-byte
 * libsodium secret key, the public one (FILE.pub) the 32-byte public key. */
#ifndef KF_SIGN_H
#define KF_SIGN_H

#include "util.h"

/* Starts libsodium (idempotent). Returns 0 or -1. */
int kf_sign_init(void);

/* SHA-256 of data as 64 lowercase hex digits. */
void kf_sha256_hex(const void *data, size_t len, char out[65]);

typedef struct {
  unsigned char secret[64];
  char public_hex[65];
} kf_signer;

/* Writes a new key pair: path (secret, mode 0600) and path.pub. Refuses to
 * replace an existing file. Returns 0, or -1 with *err (caller frees). */
int kf_sign_keygen(const char *path, char **err);
/* Loads the signing key from path, else $KFORGE_SIGNING_KEY. Returns 1 with
 * *s filled, 0 when none is configured, -1 with *err for a bad key file. */
int kf_signer_load(const char *path, kf_signer *s, char **err);
/* The signature of msg as 128 hex digits. */
void kf_signer_sign(const kf_signer *s, const char *msg, char out[129]);

typedef struct {
  kf_strv keys; /* trusted public keys, 64 hex digits each */
} kf_trust;

/* Loads the trusted keys from list, else $KFORGE_TRUSTED_KEYS. Returns 0
 * (t->keys.n == 0: nothing required), or -1 with *err. */
int kf_trust_load(const char *list, kf_trust *t, char **err);
void kf_trust_free(kf_trust *t);
/* Checks a signature of msg by public_key (either may be NULL: unsigned).
 * Returns NULL when t requires nothing or the signature is good and the key
 * trusted, else why not (caller frees). */
char *kf_trust_check(const kf_trust *t, const char *msg, const char *public_key,
                     const char *signature);

#endif /* KF_SIGN_H */
