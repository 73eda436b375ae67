/* paths.c: the built-in template and family directories (see paths.h).
 *
 * The executable's own path decides, not a directory compiled in: a kforge
 * built in one checkout and run from an install, or from another checkout,
 * must not read the first checkout's templates. The source tree is used only
 * by a binary that still lies inside the build tree it was built in, which
 * is how the tests and a developer run it. */
#define _GNU_SOURCE
#include "paths.h"

#include "util.h"

#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>

#ifndef KFORGE_SOURCE_DIR
#define KFORGE_SOURCE_DIR "."
#endif
#ifndef KFORGE_BINARY_DIR
#define KFORGE_BINARY_DIR "."
#endif
/* <datadir>/kforge relative to <bindir>, as installed (GNUInstallDirs). */
#ifndef KFORGE_DATA_FROM_BIN
#define KFORGE_DATA_FROM_BIN "../share/kforge"
#endif

static pthread_once_t located = PTHREAD_ONCE_INIT;
static char *templates_dir; /* built-in defaults, never freed */
static char *families_dir;

static int is_dir(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static void locate(void) {
  char *exe = realpath("/proc/self/exe", NULL);
  char *bin = exe ? kf_path_dirname(exe) : kf_xstrdup(".");
  char *rel = kf_path_join(bin, KFORGE_DATA_FROM_BIN);
  char *share = kf_path_absolute(rel);
  char *build = realpath(KFORGE_BINARY_DIR, NULL);
  templates_dir = kf_path_join(share, "templates");
  families_dir = kf_path_join(share, "families");
  if (!is_dir(templates_dir) && exe && build && kf_path_under(exe, build)) {
    free(templates_dir);
    free(families_dir);
    templates_dir = kf_xstrdup(KFORGE_SOURCE_DIR "/templates");
    families_dir = kf_xstrdup(KFORGE_SOURCE_DIR "/models/families");
  }
  free(exe);
  free(bin);
  free(rel);
  free(share);
  free(build);
}

const char *kf_default_templates_dir(void) {
  const char *e = getenv("KFORGE_TEMPLATES");
  if (e && *e)
    return e;
  pthread_once(&located, locate);
  return templates_dir;
}

const char *kf_default_families_dir(void) {
  const char *e = getenv("KFORGE_FAMILIES");
  if (e && *e)
    return e;
  pthread_once(&located, locate);
  return families_dir;
}
