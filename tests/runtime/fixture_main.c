/* kf_rt_fixture: writes a test cache for the Python binding's tests.
 * Usage: kf_rt_fixture CACHE MODEL ARCH FORMAT KIND WIDTHS PARAMS [...]
 * where WIDTHS is comma-separated and PARAMS is "type name; type name". */
#include "rt_fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  fx_spec specs[256];
  int n = 0;
  if (argc < 8 || (argc - 5) % 3 != 0) {
    fprintf(stderr,
            "usage: %s CACHE MODEL ARCH FORMAT KIND WIDTHS PARAMS "
            "[KIND WIDTHS PARAMS ...]\n",
            argv[0]);
    return 2;
  }
  for (int a = 5; a + 2 < argc; a += 3) {
    char *widths = strdup(argv[a + 1]), *save = NULL;
    for (char *w = strtok_r(widths, ",", &save); w && n < 256; w = strtok_r(NULL, ",", &save))
      specs[n++] = (fx_spec){argv[a], atoi(w), argv[a + 2], 0, NULL, 0, 0};
    /* widths stays allocated: specs point at argv only, not at it. */
    free(widths);
  }
  if (fx_cache_add(argv[1], argv[2], argv[3], specs, n, atoi(argv[4])) != 0) {
    fprintf(stderr, "kf_rt_fixture: cannot write %s\n", argv[1]);
    return 1;
  }
  return 0;
}
