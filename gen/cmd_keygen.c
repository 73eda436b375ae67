/* cmd_keygen.c: `kforge keygen FILE`: a new ed25519 key pair for signing
 * remote entries and manifests (sign.h). */
#include "commands.h"
#include "report.h"
#include "sign.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: kforge keygen FILE\n"
    "Writes a new ed25519 key pair: FILE holds the secret key (mode 0600; give it to\n"
    "builders as --signing-key FILE or $KFORGE_SIGNING_KEY), FILE.pub the public key\n"
    "(give it to pullers and servers in --trusted-keys or $KFORGE_TRUSTED_KEYS). Prints\n"
    "the public key. Never replaces an existing file.\n";

int kf_cmd_keygen(int argc, char **argv) {
  if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
    fputs(usage, stdout);
    return 0;
  }
  if (argc != 2 || argv[1][0] == '-') {
    kf_usage_error(usage, "expected one FILE");
    return 2;
  }
  char *err = NULL;
  if (kf_sign_keygen(argv[1], &err) != 0) {
    kf_error(NULL, NULL, "%s", err);
    free(err);
    return 2;
  }
  kf_signer s;
  if (kf_signer_load(argv[1], &s, &err) != 1) {
    kf_error(NULL, NULL, "%s", err ? err : "cannot read the new key");
    free(err);
    return 2;
  }
  printf("%s\n", s.public_hex);
  return 0;
}
