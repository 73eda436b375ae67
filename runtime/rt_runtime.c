/* Opening and closing a runtime: choose the driver, detect the device's
 * arch, pick the manifest that serves it best, index its kernels by kind and
 * width, and (unless lazy) load and verify every object. Open either
 * succeeds whole or leaves nothing behind: every failure path goes through
 * runtime_free, which undoes exactly what was done. */
#include "rt_internal.h"

#include <pthread.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void kf_runtime_options_init(kf_runtime_options *opts) {
  if (opts)
    memset(opts, 0, sizeof *opts);
}

/* The contract's model names: [a-z0-9][a-z0-9._-]*, so no "/" or "..". */
static int valid_model(const char *s) {
  if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9')))
    return 0;
  for (const char *p = s; *p; p++)
    if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '.' || *p == '_' ||
          *p == '-'))
      return 0;
  return strstr(s, "..") == NULL;
}

static kf_status open_driver(rt_driver *d, const kf_runtime_options *o, rt_err *err) {
  rt_err cuda_err, hip_err;
  kf_status st;
  if (o->backend == KF_BACKEND_CUDA)
    return rt_cuda_open(d, o->driver_path, o->device, err);
  if (o->backend == KF_BACKEND_HIP)
    return rt_hip_open(d, o->driver_path, o->device, err);
  if (rt_cuda_open(d, o->driver_path, o->device, &cuda_err) == KF_OK)
    return KF_OK;
  /* A CUDA driver that is there but fails for another reason than having no
   * device is the error to report: HIP would only hide it. */
  if (cuda_err.status != KF_ERR_NO_DRIVER && cuda_err.status != KF_ERR_NO_DEVICE) {
    *err = cuda_err;
    return err->status;
  }
  if (rt_hip_open(d, o->driver_path, o->device, &hip_err) == KF_OK)
    return KF_OK;
  st = cuda_err.status != KF_ERR_NO_DRIVER  ? cuda_err.status
       : hip_err.status != KF_ERR_NO_DRIVER ? hip_err.status
                                            : KF_ERR_NO_DRIVER;
  return rt_err_set(err, st, "no usable GPU driver: %.480s; %.480s", cuda_err.text, hip_err.text);
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "<dir>/<arch>.json", malloc'd; NULL when out of memory. */
static char *manifest_file(const char *dir, const char *arch) {
  size_t len = strlen(dir) + strlen(arch) + 7;
  char *path = malloc(len);
  if (path)
    snprintf(path, len, "%s/%s.json", dir, arch);
  return path;
}

/* The arch a build for this device names in a hint: the one it ranks
 * first on NVIDIA (sm_90a on an H100), the plain name on AMD (gfx942, which
 * runs whatever the device's xnack and sramecc settings). */
static void build_arch(const rt_driver *drv, char *buf, size_t size) {
  char wanted[256];
  if (drv->backend == KF_BACKEND_CUDA) {
    rt_arch_cuda_wanted(drv->cc_major, drv->cc_minor, wanted, sizeof wanted);
    snprintf(buf, size, "%.*s", (int)strcspn(wanted, ","), wanted);
  } else {
    rt_arch_hip_wanted(drv->device_arch, wanted, sizeof wanted);
    const char *last = strrchr(wanted, ' '), *plain = last ? last + 1 : wanted;
    snprintf(buf, size, "%.*s", (int)strlen(plain), plain);
  }
}

/* Chooses manifests/<model>/<arch>.json with the best rank for the device;
 * *path (relative to v1) is malloc'd. The reason for no match names what the device runs and what
 * the cache has. A CUDA device's sm_XYa ranks above every other name, and
 * no other name ranks with it: when that file is there, it is the choice
 * without listing the directory. */
static kf_status pick_manifest(kf_runtime *rt, const char *model, char **path, rt_err *err) {
  char *dir = NULL, *sub = NULL, **names = NULL;
  int n = 0, cap = 0, best = -1, best_rank = -1;
  DIR *dp;
  struct dirent *de;
  kf_status st = KF_OK;

  *path = NULL;
  sub = rt_path_join("manifests", model);
  dir = sub ? rt_path_join(rt->root.v1, sub) : NULL;
  if (!dir) {
    free(sub);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  }
  if (rt->drv.backend == KF_BACKEND_CUDA) {
    char exact[RT_ARCH_MAX];
    snprintf(exact, sizeof exact, "sm_%d%da", rt->drv.cc_major, rt->drv.cc_minor);
    if (rt_arch_cuda_rank(exact, rt->drv.cc_major, rt->drv.cc_minor) == 0) {
      struct stat st_exact;
      if (!(*path = manifest_file(sub, exact))) {
        free(dir);
        free(sub);
        return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
      }
      /* there as anything: reading it says what is wrong with it */
      if (fstatat(rt->root.fd, *path, &st_exact, AT_SYMLINK_NOFOLLOW) == 0) {
        free(dir);
        free(sub);
        return KF_OK;
      }
      free(*path);
      *path = NULL;
    }
  }
  if ((st = rt_root_opendir(&rt->root, sub, &dp, err)) != KF_OK) {
    if (st != KF_ERR_UNTRUSTED) {
      char why[RT_REASON_MAX];
      memcpy(why, err->text, sizeof why);
      st = rt_err_set(err, KF_ERR_NO_MANIFEST, "no manifests for model '%s': %.900s", model, why);
      char arch[RT_ARCH_MAX];
      build_arch(&rt->drv, arch, sizeof arch);
      rt_err_build_hint(err, arch, rt->root.dir, model, NULL);
    }
    free(dir);
    free(sub);
    return st;
  }
  while ((de = readdir(dp)) != NULL) {
    size_t len = strlen(de->d_name);
    if (len <= 5 || strcmp(de->d_name + len - 5, ".json") != 0 || de->d_name[0] == '.')
      continue;
    if (n == cap) {
      char **grown = realloc(names, (size_t)(cap = cap ? cap * 2 : 8) * sizeof *names);
      if (!grown) {
        st = rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
        break;
      }
      names = grown;
    }
    if (!(names[n] = malloc(len - 4))) {
      st = rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
      break;
    }
    memcpy(names[n], de->d_name, len - 5);
    names[n][len - 5] = '\0';
    n++;
  }
  closedir(dp);
  if (st == KF_OK && n > 0)
    qsort(names, (size_t)n, sizeof *names, cmp_str);
  for (int i = 0; st == KF_OK && i < n; i++) {
    int rank = rt->drv.backend == KF_BACKEND_CUDA
                   ? rt_arch_cuda_rank(names[i], rt->drv.cc_major, rt->drv.cc_minor)
                   : rt_arch_hip_rank(names[i], rt->drv.device_arch);
    if (rank >= 0 && (best < 0 || rank < best_rank)) {
      best = i;
      best_rank = rank;
    }
  }
  if (st == KF_OK && best < 0) {
    char wanted[256], have[512];
    size_t used = 0;
    have[0] = '\0';
    for (int i = 0; i < n && used < sizeof have; i++)
      used += (size_t)snprintf(have + used, sizeof have - used, "%s%s", i ? ", " : "", names[i]);
    if (rt->drv.backend == KF_BACKEND_CUDA) {
      rt_arch_cuda_wanted(rt->drv.cc_major, rt->drv.cc_minor, wanted, sizeof wanted);
      st = rt_err_set(err, KF_ERR_NO_MANIFEST,
                      "no manifest for this device in %s: device %d is "
                      "%s (compute capability %d.%d), which runs %s; the "
                      "cache has %s",
                      dir, rt->drv.device, rt->drv.device_arch, rt->drv.cc_major, rt->drv.cc_minor,
                      wanted, n ? have : "none");
    } else {
      rt_arch_hip_wanted(rt->drv.device_arch, wanted, sizeof wanted);
      st = rt_err_set(err, KF_ERR_NO_MANIFEST,
                      "no manifest for this device in %s: device %d is %s, "
                      "which runs %s; the cache has %s",
                      dir, rt->drv.device, rt->drv.device_arch, wanted, n ? have : "none");
    }
    /* the description another arch's manifest was built from, if it says */
    rt_manifest other = {0};
    rt_err ignored;
    char *first = n ? manifest_file(sub, names[0]) : NULL;
    int known = first && rt_manifest_open_at(&rt->root, first, &other, &ignored) == KF_OK;
    char arch[RT_ARCH_MAX];
    build_arch(&rt->drv, arch, sizeof arch);
    rt_err_build_hint(err, arch, rt->root.dir, model, known ? other.description : NULL);
    rt_manifest_free(&other);
    free(first);
  }
  if (st == KF_OK && !(*path = manifest_file(sub, names[best])))
    st = rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  for (int i = 0; i < n; i++)
    free(names[i]);
  free(names);
  free(dir);
  free(sub);
  return st;
}

static int cmp_kernel(const void *a, const void *b) {
  const kf_kernel *x = *(kf_kernel *const *)a, *y = *(kf_kernel *const *)b;
  int c = strcmp(x->d->kind, y->d->kind);
  if (!c)
    c = (x->d->width > y->d->width) - (x->d->width < y->d->width);
  return c ? c : (x->d->page_size > y->d->page_size) - (x->d->page_size < y->d->page_size);
}

/* Sets up the handle of manifest entry i, which is parsed (its parameters
 * may wait for the signatures: index_kinds looks at them). */
static kf_status kernel_init(kf_runtime *rt, int i, rt_err *err) {
  kf_kernel *k = &rt->kernels[i];
  const rt_kdesc *d = &rt->manifest.kernels[i];
  memset(k, 0, sizeof *k);
  k->rt = rt;
  k->d = d;
  k->rows_param = -1;
  atomic_init(&k->state, RT_UNLOADED);
  pthread_mutex_init(&k->mu, NULL);
  rt_slot_init(&k->err);
  rt->nkernels = i + 1;
  if (!(k->object_path = rt_path_join(rt->root.v1, d->object)))
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  return KF_OK;
}

/* Groups the kernels by kind, ascending width, and finds each one's
 * trailing "int rows", once all are set up and have their parameters. */
static kf_status index_kinds(kf_runtime *rt, rt_err *err) {
  int n = rt->nkernels;
  kf_kernel **sorted;
  for (int i = 0; i < n; i++) {
    const rt_kdesc *d = rt->kernels[i].d;
    if (d->nparams > 0 && strcmp(d->params[d->nparams - 1].name, "rows") == 0 &&
        strcmp(d->params[d->nparams - 1].type, "int") == 0)
      rt->kernels[i].rows_param = d->nparams - 1;
  }
  sorted = calloc((size_t)(n ? n : 1), sizeof *sorted);
  rt->kinds = calloc((size_t)(n ? n : 1), sizeof *rt->kinds);
  if (!sorted || !rt->kinds) {
    free(sorted);
    return rt_err_set(err, KF_ERR_NO_MEMORY, "out of memory");
  }
  for (int i = 0; i < n; i++)
    sorted[i] = &rt->kernels[i];
  qsort(sorted, (size_t)n, sizeof *sorted, cmp_kernel);
  /* Kinds own runs of the sorted array; the first run keeps the block. */
  for (int i = 0; i < n; i++) {
    if (i == 0 || strcmp(sorted[i]->d->kind, sorted[i - 1]->d->kind) != 0) {
      rt->kinds[rt->nkinds].kind = sorted[i]->d->kind;
      rt->kinds[rt->nkinds].by_width = &sorted[i];
      rt->nkinds++;
    }
    rt->kinds[rt->nkinds - 1].n++;
  }
  if (n == 0)
    free(sorted);
  return KF_OK;
}

/* Parses the manifest's remaining entries and sets up their handles, in
 * order, then checks what spans them and indexes them: a lazy open, and an
 * eager one that has no thread to spare. */
static kf_status parse_all(kf_runtime *rt, rt_err *err) {
  kf_status st = KF_OK;
  for (int i = rt->nkernels; i < rt->manifest.nkernels && st == KF_OK; i++)
    if ((st = rt_manifest_kernel(&rt->manifest, i, err)) == KF_OK)
      st = kernel_init(rt, i, err);
  if (st == KF_OK && (st = rt_manifest_finish(&rt->manifest, err)) == KF_OK)
    st = index_kinds(rt, err);
  return st;
}

static void runtime_free(kf_runtime *rt) {
  for (int i = 0; i < rt->nkernels; i++) {
    kf_kernel *k = &rt->kernels[i];
    rt_kernel_unload(k);
    pthread_mutex_destroy(&k->mu);
    rt_slot_destroy(&k->err);
    free(k->object_path);
  }
  if (rt->nkinds > 0)
    free(rt->kinds[0].by_width);
  free(rt->kinds);
  free(rt->kernels);
  rt_manifest_free(&rt->manifest);
  if (rt->drv.close)
    rt->drv.close(&rt->drv);
  rt_root_close(&rt->root);
  rt_slot_destroy(&rt->err);
  free(rt);
}

/* Eager loading: each kernel's manifest entry is parsed, its handle set up
 * and its object read and checksummed (a step), in manifest order, while
 * this thread hands each object to the driver as soon as it is ready.
 * Steps run on a reader thread, and on this thread whenever it needs the
 * next entry and no thread is on it (until the reader has started, that is
 * the first): parsing, reading and hashing thus hide behind module loading
 * (the driver's part is the floor of any loader), and only the manifest's
 * header is parsed before the first load. The signatures, the id check and
 * the kind index follow the last step on the reader, while the driver
 * loads. */
typedef struct {
  kf_runtime *rt;
  int n;              /* entries */
  char **images;      /* objects read, until the loader takes them */
  kf_status *status;  /* how reading each went */
  rt_err read_err;    /* why the one object that failed to read did */
  kf_status manifest; /* the verdict on the manifest (final once done) */
  rt_err manifest_err;
  int ready;   /* entries parsed, set up and read so far */
  int busy;    /* a thread is on entry ready */
  int refused; /* an entry was refused: manifest says why */
  int unread;  /* a read failed or the loader gave up: parse on, read no more */
  pthread_mutex_t mu;
  pthread_cond_t cv;
} prefetch;

/* Takes entry p->ready unless a thread is on it or none is left: parses it,
 * sets up its handle and reads its object, with p->mu released meanwhile.
 * Called, and returns, with p->mu held; 0 when there was nothing to take. */
static int step(prefetch *p) {
  kf_runtime *rt = p->rt;
  int i = p->ready, unread = p->unread;
  kf_status st, read_st = KF_OK;
  char *image = NULL;
  rt_err e, read_err;
  if (p->busy || p->refused || i == p->n)
    return 0;
  p->busy = 1;
  pthread_mutex_unlock(&p->mu);
  if ((st = rt_manifest_kernel(&rt->manifest, i, &e)) == KF_OK &&
      (st = kernel_init(rt, i, &e)) == KF_OK && !unread)
    read_st = rt_kernel_read(&rt->kernels[i], &image, &read_err);
  pthread_mutex_lock(&p->mu);
  p->busy = 0;
  if (st != KF_OK) {
    p->refused = 1;
    p->manifest = st;
    p->manifest_err = e;
  } else {
    p->images[i] = image;
    p->status[i] = read_st;
    if (read_st != KF_OK) {
      p->read_err = read_err;
      p->unread = 1; /* the loader stops at this kernel */
    }
    p->ready = i + 1;
  }
  pthread_cond_broadcast(&p->cv);
  return 1;
}

static void *prefetch_main(void *arg) {
  prefetch *p = arg;
  kf_runtime *rt = p->rt;
  kf_status st = KF_OK;
  rt_err e;
  int refused;
  pthread_mutex_lock(&p->mu);
  while (p->ready < p->n && !p->refused)
    if (!step(p))
      pthread_cond_wait(&p->cv, &p->mu);
  refused = p->refused;
  pthread_mutex_unlock(&p->mu);
  /* while the driver is still loading: the signatures, the ids, the index
   * by kind; the manifest's text is freed */
  if (!refused && (st = rt_manifest_finish(&rt->manifest, &e)) == KF_OK)
    st = index_kinds(rt, &e);
  pthread_mutex_lock(&p->mu);
  if (!refused) {
    p->manifest = st;
    if (st != KF_OK)
      p->manifest_err = e;
  }
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

static kf_status load_all(kf_runtime *rt, rt_err *err) {
  int n = rt->manifest.nkernels;
  kf_status st = KF_OK;
  prefetch p;
  pthread_t reader;
  memset(&p, 0, sizeof p);
  p.rt = rt;
  p.n = n;
  p.images = calloc((size_t)(n ? n : 1), sizeof *p.images);
  p.status = calloc((size_t)(n ? n : 1), sizeof *p.status);
  pthread_mutex_init(&p.mu, NULL);
  pthread_cond_init(&p.cv, NULL);
  if (n == 0 || !p.images || !p.status || pthread_create(&reader, NULL, prefetch_main, &p) != 0) {
    /* nothing to overlap, or no memory or thread to spare: step by step */
    if ((st = parse_all(rt, err)) == KF_OK)
      for (int i = 0; i < n && st == KF_OK; i++)
        st = rt_kernel_load(&rt->kernels[i], err);
  } else {
    for (int i = 0; i < n; i++) {
      char *image;
      kf_status read_st;
      pthread_mutex_lock(&p.mu);
      while (p.ready <= i && !p.refused)
        if (!step(&p))
          pthread_cond_wait(&p.cv, &p.mu);
      if (p.ready <= i) { /* the manifest was refused; it says why */
        pthread_mutex_unlock(&p.mu);
        break;
      }
      image = p.images[i];
      p.images[i] = NULL;
      read_st = p.status[i];
      pthread_mutex_unlock(&p.mu);
      st = rt_kernel_load_read(&rt->kernels[i], image, read_st, &p.read_err, err);
      if (st != KF_OK) {
        pthread_mutex_lock(&p.mu);
        p.unread = 1;
        pthread_mutex_unlock(&p.mu);
        break;
      }
    }
    pthread_join(reader, NULL);
    /* A refused manifest is the reason even when a load failed first, as
     * when the whole manifest was parsed before any load. */
    if (p.manifest != KF_OK) {
      *err = p.manifest_err;
      st = p.manifest;
    }
    for (int i = 0; i < n; i++)
      free(p.images[i]);
  }
  free(p.images);
  free(p.status);
  pthread_mutex_destroy(&p.mu);
  pthread_cond_destroy(&p.cv);
  return st;
}

/* The parsed header agrees with the file's place and the device. A whole
 * parse would have refused bad signatures before these checks: so does
 * this. */
static kf_status check_header(kf_runtime *rt, const char *model, rt_err *err) {
  const rt_manifest *m = &rt->manifest;
  kf_status st = rt_manifest_check_place(m, model, m->path, err);
  if (st == KF_OK && m->backend != rt->drv.backend)
    st = rt_err_set(err, KF_ERR_BAD_MANIFEST, "%s: backend: error: the manifest is not for '%s'",
                    m->path, rt->drv.backend == KF_BACKEND_CUDA ? "cuda" : "hip");
  if (st != KF_OK) {
    rt_err sig_err;
    if (rt_manifest_signatures(&rt->manifest, &sig_err) != KF_OK)
      *err = sig_err;
    st = err->status;
  }
  return st;
}

kf_status kf_runtime_open(const kf_runtime_options *opts, kf_runtime **out) {
  rt_err err;
  kf_runtime *rt;
  char *path = NULL;
  kf_status st;

  if (!out) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_runtime_open: rt is NULL");
    return rt_tls_record(&err);
  }
  *out = NULL;
  if (!opts || !opts->cache_dir || !*opts->cache_dir || !opts->model) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_runtime_open: options need cache_dir and model");
    return rt_tls_record(&err);
  }
  if (!valid_model(opts->model)) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT,
               "kf_runtime_open: '%s' is not a model name "
               "([a-z0-9][a-z0-9._-]*)",
               opts->model);
    return rt_tls_record(&err);
  }
  if (opts->backend != KF_BACKEND_AUTO && opts->backend != KF_BACKEND_CUDA &&
      opts->backend != KF_BACKEND_HIP) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_runtime_open: unknown backend %d",
               (int)opts->backend);
    return rt_tls_record(&err);
  }
  if (!(rt = calloc(1, sizeof *rt))) {
    rt_err_set(&err, KF_ERR_NO_MEMORY, "out of memory");
    return rt_tls_record(&err);
  }
  rt_slot_init(&rt->err);
  rt->lazy = opts->lazy != 0;
  rt->root.fd = -1;
  if ((st = open_driver(&rt->drv, opts, &err)) != KF_OK) {
    rt->drv.close = NULL; /* nothing is held on failure */
    goto fail;
  }
  /* the cache's trust rules (docs/contracts.md, "Trust") */
  if ((st = rt_root_open(&rt->root, opts->cache_dir,
                         opts->lax_permissions != 0 || rt_lax_from_env(), &err)) != KF_OK) {
    if (st == KF_ERR_IO) {
      char why[RT_REASON_MAX];
      memcpy(why, err.text, sizeof why);
      rt_err_set(&err, KF_ERR_NO_MANIFEST, "no manifests for model '%s': %.900s", opts->model, why);
      char arch[RT_ARCH_MAX];
      build_arch(&rt->drv, arch, sizeof arch);
      rt_err_build_hint(&err, arch, opts->cache_dir, opts->model, NULL);
    }
    goto fail;
  }
  /* the header only: the kernels' entries are parsed as they are loaded */
  if ((st = pick_manifest(rt, opts->model, &path, &err)) != KF_OK ||
      (st = rt_manifest_open_at(&rt->root, path, &rt->manifest, &err)) != KF_OK)
    goto fail;
  if ((st = check_header(rt, opts->model, &err)) != KF_OK)
    goto fail;
  /* handles [0, nkernels) are set up, the rest untouched: a steps' page
   * faults, not a zeroing before the first load */
  rt->kernels =
      malloc((size_t)(rt->manifest.nkernels ? rt->manifest.nkernels : 1) * sizeof *rt->kernels);
  if (!rt->kernels) {
    rt_err_set(&err, KF_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  if ((st = rt->lazy ? parse_all(rt, &err) : load_all(rt, &err)) != KF_OK)
    goto fail;
  free(path);
  *out = rt;
  return KF_OK;
fail:
  free(path);
  runtime_free(rt);
  return rt_tls_record(&err);
}

void kf_runtime_close(kf_runtime *rt) {
  if (rt)
    runtime_free(rt);
}

kf_status kf_runtime_error(kf_runtime *rt, char *buf, size_t size) {
  if (!rt) {
    if (buf && size)
      snprintf(buf, size, "kf_runtime_error: rt is NULL");
    return KF_ERR_INVALID_ARGUMENT;
  }
  return rt_slot_copy(&rt->err, buf, size);
}

const char *kf_runtime_arch(const kf_runtime *rt) { return rt ? rt->manifest.arch : NULL; }

const char *kf_runtime_device_arch(const kf_runtime *rt) { return rt ? rt->drv.device_arch : NULL; }

kf_backend kf_runtime_backend(const kf_runtime *rt) {
  return rt ? rt->drv.backend : KF_BACKEND_AUTO;
}

const char *kf_runtime_model(const kf_runtime *rt) { return rt ? rt->manifest.model : NULL; }

int kf_runtime_kernel_count(const kf_runtime *rt) { return rt ? rt->nkernels : 0; }

int kf_runtime_page_sizes(const kf_runtime *rt, int *sizes, int max) {
  if (!rt)
    return 0;
  int n = 0, first = rt->manifest.page_size;
  if (first) { /* the default, which the generator always builds */
    if (sizes && max > 0)
      sizes[0] = first;
    n = 1;
  }
  for (int lo = 0;;) { /* the others, ascending */
    int next = 0;
    for (int i = 0; i < rt->nkernels; i++) {
      int p = rt->kernels[i].d->page_size;
      if (p > lo && p != first && (!next || p < next))
        next = p;
    }
    if (!next)
      return n;
    if (sizes && n < max)
      sizes[n] = next;
    n++;
    lo = next;
  }
}

int kf_runtime_layer_type_count(const kf_runtime *rt) { return rt ? rt->manifest.nlayer_types : 0; }

kf_status kf_runtime_layer_type(kf_runtime *rt, int i, const char **name, int *count,
                                const char *const **kinds, int *nkinds) {
  rt_err err;
  if (!rt) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_runtime_layer_type: rt must not be NULL");
    return rt_tls_record(&err);
  }
  if (i < 0 || i >= rt->manifest.nlayer_types) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT,
               "kf_runtime_layer_type: index %d out of range: %d layer types", i,
               rt->manifest.nlayer_types);
    return rt_slot_record(&rt->err, &err);
  }
  const rt_layer_type *t = &rt->manifest.layer_types[i];
  if (name)
    *name = t->name;
  if (count)
    *count = t->count;
  if (kinds)
    *kinds = (const char *const *)t->kinds;
  if (nkinds)
    *nkinds = t->nkinds;
  return KF_OK;
}

kf_status kf_runtime_layer_type_layer(kf_runtime *rt, int i, const char **kind) {
  if (kind)
    *kind = NULL;
  kf_status st = kf_runtime_layer_type(rt, i, NULL, NULL, NULL, NULL);
  if (st == KF_OK && kind)
    *kind = rt->manifest.layer_types[i].layer;
  return st;
}

kf_status kf_runtime_kernel(kf_runtime *rt, int i, kf_kernel **kernel) {
  rt_err err;
  if (kernel)
    *kernel = NULL;
  if (!rt || !kernel) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_runtime_kernel: rt and kernel must not be NULL");
    return rt ? rt_slot_record(&rt->err, &err) : rt_tls_record(&err);
  }
  if (i < 0 || i >= rt->nkernels) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT,
               "kf_runtime_kernel: index %d out of range: %d kernels", i, rt->nkernels);
    return rt_slot_record(&rt->err, &err);
  }
  *kernel = &rt->kernels[i];
  return KF_OK;
}
