/* libclang.c: opens libclang (see libclang.h). */
#define _GNU_SOURCE
#include "libclang.h"
#include "util.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

static kf_libclang table;
static char *load_error;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void load(void) {
  /* the file name is the soname on Debian (libclang-16.so.16.0.6), found on
   * the loader's path; the configured path is the fallback for a libclang
   * outside it */
  const char *names[] = {KF_LIBCLANG_NAME, KF_LIBCLANG_PATH};
  void *h = NULL;
  for (size_t i = 0; i < 2 && !h; i++)
    h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    load_error = kf_xasprintf("cannot load libclang (%s): %s", KF_LIBCLANG_PATH,
                              why ? why : "unknown reason");
    return;
  }
#define KF_LIBCLANG_LOAD(name)                                                                     \
  if (!load_error) {                                                                               \
    *(void **)&table.name = dlsym(h, "clang_" #name);                                              \
    if (!table.name)                                                                               \
      load_error = kf_xasprintf("libclang (%s) lacks clang_%s", KF_LIBCLANG_PATH, #name);          \
  }
  KF_LIBCLANG_FUNCTIONS(KF_LIBCLANG_LOAD)
#undef KF_LIBCLANG_LOAD
}

const kf_libclang *kf_libclang_get(char **err) {
  pthread_once(&once, load);
  if (load_error) {
    *err = kf_xstrdup(load_error);
    return NULL;
  }
  return &table;
}

const char *kf_libclang_name(void) { return KF_LIBCLANG_NAME; }
