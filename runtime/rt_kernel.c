/* Kernels: finding the one for a step's rows, loading and verifying its
 * object (eagerly at open or lazily at first use, once, under the kernel's
 * lock), checking launch arguments against the manifest's parameter list,
 * launching, and introspection. find and launch take no lock once a kernel
 * is loaded; only failures touch the (locked) last-error slots. */
#include "rt_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

kf_status rt_kernel_read(const kf_kernel *k, char **image, rt_err *err) {
  const rt_kdesc *d = k->d;
  return rt_object_read(&k->rt->root, &k->rt->manifest, d, image, err);
}

/* The most blocks of d per SM its launches should leave room for: the
 * manifest's max_blocks_per_sm, and with one_wave no more than the grid's
 * share of the device's SMs (0: no cap). */
static unsigned blocks_per_sm_cap(const rt_driver *drv, const rt_kdesc *d) {
  unsigned cap = d->max_blocks;
  if (d->one_wave && drv->sm_count > 0) {
    const unsigned long long blocks = (unsigned long long)d->grid[0] * d->grid[1] * d->grid[2];
    const unsigned wave =
        (unsigned)((blocks + (unsigned)drv->sm_count - 1) / (unsigned)drv->sm_count);
    cap = cap && cap < wave ? cap : wave;
  }
  return cap;
}

/* A cooperative kernel's blocks wait for each other (templates/kf_sync.cuh):
 * unless the device holds its whole grid at once, with the dynamic shared
 * memory its launches pass, a launch would hang, so it is refused here,
 * where the server can still fall back. */
static kf_status check_coresident(kf_kernel *k, rt_err *err) {
  rt_driver *drv = &k->rt->drv;
  const rt_kdesc *d = k->d;
  const unsigned threads = d->block[0] * d->block[1] * d->block[2];
  int per_sm = 0;
  kf_status st = drv->occupancy(drv, k->function, threads, k->shared, &per_sm, err);
  if (st != KF_OK)
    return rt_err_prefix(err, "kernel %s: cooperative, cannot check co-residency: ", d->id);
  if (drv->sm_count <= 0)
    return rt_err_set(err, KF_ERR_CORESIDENCY,
                      "kernel %s: cooperative, cannot check co-residency: the %s did not give "
                      "the device's multiprocessor count",
                      d->id, drv->api);
  /* a persistent kernel takes what the device holds, up to its cap */
  if (d->persistent && per_sm > 0) {
    const unsigned long long fit = (unsigned long long)per_sm * (unsigned)drv->sm_count;
    k->grid[0] = fit < d->grid[0] ? (unsigned)fit : d->grid[0];
  }
  const unsigned long long blocks = (unsigned long long)k->grid[0] * k->grid[1] * k->grid[2];
  if ((unsigned long long)per_sm * (unsigned)drv->sm_count < blocks)
    return rt_err_set(err, KF_ERR_CORESIDENCY,
                      "kernel %s: cooperative, its grid of %llu blocks cannot be resident at once: "
                      "%d blocks per SM (%u threads, %u bytes of dynamic shared memory each) on "
                      "%d SMs hold %llu (a launch would hang)",
                      d->id, blocks, per_sm, threads, k->shared, drv->sm_count,
                      (unsigned long long)per_sm * (unsigned)drv->sm_count);
  return KF_OK;
}

/* Hands a checked image to the driver; takes ownership of image. */
static kf_status load_image(kf_kernel *k, char *image, rt_err *err) {
  kf_runtime *rt = k->rt;
  const rt_kdesc *d = k->d;
  memcpy(k->grid, d->grid, sizeof k->grid);
  kf_status st = rt->drv.load(&rt->drv, image, d->symbol, d->shared, blocks_per_sm_cap(&rt->drv, d),
                              &k->module, &k->function, &k->shared, err);
  free(image);
  if (st == KF_ERR_SYMBOL)
    return rt_err_prefix(err, "kernel %s: entry symbol %s is missing from %s: ", d->id, d->symbol,
                         k->object_path);
  if (st != KF_OK)
    return rt_err_prefix(err, "kernel %s: cannot load %s: ", d->id, k->object_path);
  if (d->cooperative && (st = check_coresident(k, err)) != KF_OK) {
    rt->drv.unload(&rt->drv, k->module);
    k->module = k->function = NULL;
    return st;
  }
  return KF_OK;
}

static kf_status load_object(kf_kernel *k, rt_err *err) {
  char *image;
  kf_status st = rt_kernel_read(k, &image, err);
  return st == KF_OK ? load_image(k, image, err) : st;
}

kf_status rt_kernel_load_read(kf_kernel *k, char *image, kf_status read_status,
                              const rt_err *read_err, rt_err *err) {
  kf_status st = KF_OK;
  pthread_mutex_lock(&k->mu);
  if (atomic_load_explicit(&k->state, memory_order_relaxed) == RT_UNLOADED) {
    if (read_status == KF_OK) {
      st = load_image(k, image, &k->load_err);
      image = NULL;
    } else {
      k->load_err = *read_err;
      st = read_status;
    }
    atomic_store_explicit(&k->state, st == KF_OK ? RT_LOADED : RT_FAILED, memory_order_release);
  }
  free(image);
  if (atomic_load_explicit(&k->state, memory_order_relaxed) == RT_FAILED) {
    *err = k->load_err;
    st = err->status;
  }
  pthread_mutex_unlock(&k->mu);
  return st;
}

kf_status rt_kernel_load(kf_kernel *k, rt_err *err) {
  kf_status st = KF_OK;
  if (atomic_load_explicit(&k->state, memory_order_acquire) == RT_LOADED)
    return KF_OK;
  pthread_mutex_lock(&k->mu);
  if (atomic_load_explicit(&k->state, memory_order_relaxed) == RT_UNLOADED) {
    st = load_object(k, &k->load_err);
    atomic_store_explicit(&k->state, st == KF_OK ? RT_LOADED : RT_FAILED, memory_order_release);
  }
  if (atomic_load_explicit(&k->state, memory_order_relaxed) == RT_FAILED) {
    *err = k->load_err;
    st = err->status;
  }
  pthread_mutex_unlock(&k->mu);
  return st;
}

void rt_kernel_unload(kf_kernel *k) {
  if (atomic_load_explicit(&k->state, memory_order_acquire) == RT_LOADED)
    k->rt->drv.unload(&k->rt->drv, k->module);
  k->module = k->function = NULL;
  atomic_store_explicit(&k->state, RT_UNLOADED, memory_order_release);
}

kf_status kf_kernel_find(kf_runtime *rt, const char *kind, int rows, kf_kernel **kernel) {
  return kf_kernel_find_ex(rt, kind, rows, NULL, kernel);
}

/* The page size variant v asks of rt (NULL or 0: any, which is the
 * manifest's default where it holds several; 0 where it holds one). */
static int wanted_page_size(const kf_runtime *rt, const kf_variant *v) {
  return v && v->page_size > 0 ? v->page_size : rt->manifest.page_size;
}

/* Whether kernel k serves page size want (0: any). */
static int serves(const kf_kernel *k, int want) {
  return want == 0 || k->d->page_size == 0 || k->d->page_size == want;
}

/* KF_ERR_NO_PAGE_SIZE for kind group g, which has no kernel for page size
 * want: the reason names the page sizes it was built for. */
static kf_status no_page_size(kf_runtime *rt, const rt_kind *g, int want) {
  rt_err err;
  char sizes[128];
  size_t used = 0;
  sizes[0] = '\0';
  for (int j = 0; j < g->n && used < sizeof sizes; j++) {
    int p = g->by_width[j]->d->page_size, seen = 0;
    for (int q = 0; q < j; q++)
      seen |= g->by_width[q]->d->page_size == p;
    if (!seen)
      used += (size_t)snprintf(sizes + used, sizeof sizes - used, "%s%d", used ? ", " : "", p);
  }
  rt_err_set(&err, KF_ERR_NO_PAGE_SIZE,
             "kind '%s' of model '%s' is built for KV-cache pages of %s tokens, not %d: list %d "
             "in the description's page_sizes (kforge import-hf --page-size %d)",
             g->kind, rt->manifest.model, sizes, want, want, want);
  return rt_slot_record(&rt->err, &err);
}

kf_status kf_kernel_find_ex(kf_runtime *rt, const char *kind, int rows, const kf_variant *variant,
                            kf_kernel **kernel) {
  rt_err err;
  if (kernel)
    *kernel = NULL;
  if (!rt || !kind || !kernel) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT,
               "kf_kernel_find: rt, kind and kernel must not be NULL");
    return rt ? rt_slot_record(&rt->err, &err) : rt_tls_record(&err);
  }
  if (rows < 1) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_kernel_find: rows must be at least 1, got %d",
               rows);
    return rt_slot_record(&rt->err, &err);
  }
  if (variant && variant->page_size < 0) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT,
               "kf_kernel_find_ex: page_size must be 0 (any) or positive, got %d",
               variant->page_size);
    return rt_slot_record(&rt->err, &err);
  }
  for (int i = 0; i < rt->nkinds; i++) {
    const rt_kind *g = &rt->kinds[i];
    if (strcmp(g->kind, kind) != 0)
      continue;
    const int want = wanted_page_size(rt, variant);
    int widest = 0; /* the widest kernel of the kind that serves the page size (0: none) */
    for (int j = 0; j < g->n; j++) {
      kf_kernel *k = g->by_width[j];
      if (!serves(k, want))
        continue;
      widest = k->d->width;
      if (k->d->width < rows)
        continue;
      if (rt_kernel_load(k, &err) != KF_OK) {
        rt_slot_record(&k->err, &err);
        return rt_slot_record(&rt->err, &err);
      }
      *kernel = k;
      return KF_OK;
    }
    if (!widest)
      return no_page_size(rt, g, want);
    rt_err_set(&err, KF_ERR_NO_WIDTH,
               "%d rows exceed the largest width of kind '%s' (%d) in model "
               "'%s': use the fallback path",
               rows, kind, widest, rt->manifest.model);
    return rt_slot_record(&rt->err, &err);
  }
  {
    char kinds[512];
    size_t used = 0;
    kinds[0] = '\0';
    for (int i = 0; i < rt->nkinds && used < sizeof kinds; i++)
      used += (size_t)snprintf(kinds + used, sizeof kinds - used, "%s%s", i ? ", " : "",
                               rt->kinds[i].kind);
    rt_err_set(&err, KF_ERR_NO_KIND, "no kernel of kind '%s' in model '%s' for %s (kinds: %s)",
               kind, rt->manifest.model, rt->manifest.arch, rt->nkinds ? kinds : "none");
  }
  return rt_slot_record(&rt->err, &err);
}

static void describe_params(const rt_kdesc *d, char *buf, size_t size) {
  size_t used = 0;
  buf[0] = '\0';
  for (int i = 0; i < d->nparams && used < size; i++)
    used += (size_t)snprintf(buf + used, size - used, "%s%s %s", i ? ", " : "", d->params[i].type,
                             d->params[i].name);
}

kf_status kf_kernel_launch(kf_kernel *k, void *stream, const kf_arg *args, size_t nargs) {
  void *params[RT_MAX_PARAMS];
  const rt_kdesc *d;
  rt_err err;

  if (!k) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_kernel_launch: kernel is NULL");
    return rt_tls_record(&err);
  }
  d = k->d;
  if (nargs != (size_t)d->nparams || (nargs > 0 && !args)) {
    char list[512];
    describe_params(d, list, sizeof list);
    rt_err_set(&err, KF_ERR_ARGS,
               "kernel %s: %zu arguments given, its parameters are %d: (%s); "
               "not launched",
               d->id, args || nargs == 0 ? nargs : 0, d->nparams, list);
    return rt_slot_record(&k->err, &err);
  }
  for (int i = 0; i < d->nparams; i++) {
    if (!args[i].value || args[i].size != d->params[i].size) {
      rt_err_set(&err, KF_ERR_ARGS,
                 "kernel %s: argument %d (%s %s) is %zu bytes%s, expected "
                 "%zu; not launched",
                 d->id, i, d->params[i].type, d->params[i].name, args[i].size,
                 args[i].value ? "" : " at NULL", d->params[i].size);
      return rt_slot_record(&k->err, &err);
    }
    params[i] = (void *)args[i].value;
  }
  if (k->rows_param >= 0) {
    int rows;
    memcpy(&rows, args[k->rows_param].value, sizeof rows);
    if (rows < 1 || rows > d->width) {
      rt_err_set(&err, KF_ERR_ARGS,
                 "kernel %s: rows is %d, must be 1..%d (its width); not "
                 "launched",
                 d->id, rows, d->width);
      return rt_slot_record(&k->err, &err);
    }
  }
  if (rt_kernel_load(k, &err) != KF_OK ||
      k->rt->drv.launch(&k->rt->drv, k->function, k->grid, d->block, k->shared,
                        (d->programmatic ? RT_LAUNCH_PROGRAMMATIC : 0u) |
                            (d->cooperative ? RT_LAUNCH_COOPERATIVE : 0u),
                        stream, params, &err) != KF_OK) {
    if (err.status == KF_ERR_DRIVER)
      rt_err_prefix(&err, "kernel %s: ", d->id);
    return rt_slot_record(&k->err, &err);
  }
  return KF_OK;
}

kf_status kf_kernel_error(kf_kernel *k, char *buf, size_t size) {
  if (!k) {
    if (buf && size)
      snprintf(buf, size, "kf_kernel_error: kernel is NULL");
    return KF_ERR_INVALID_ARGUMENT;
  }
  return rt_slot_copy(&k->err, buf, size);
}

const char *kf_kernel_id(const kf_kernel *k) { return k ? k->d->id : NULL; }

const char *kf_kernel_kind(const kf_kernel *k) { return k ? k->d->kind : NULL; }

const char *kf_kernel_symbol(const kf_kernel *k) { return k ? k->d->symbol : NULL; }

int kf_kernel_width(const kf_kernel *k) { return k ? k->d->width : 0; }

int kf_kernel_page_size(const kf_kernel *k) { return k ? k->d->page_size : 0; }

int kf_kernel_param_count(const kf_kernel *k) { return k ? k->d->nparams : 0; }

kf_status kf_kernel_param(const kf_kernel *k, int i, const char **name, const char **type,
                          size_t *size) {
  rt_err err;
  if (!k || i < 0 || i >= k->d->nparams) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_kernel_param: no parameter %d (%d parameters)", i,
               k ? k->d->nparams : 0);
    return rt_tls_record(&err);
  }
  if (name)
    *name = k->d->params[i].name;
  if (type)
    *type = k->d->params[i].type;
  if (size)
    *size = k->d->params[i].size;
  return KF_OK;
}

int kf_kernel_buffer_count(const kf_kernel *k) { return k ? k->d->nbuffers : 0; }

kf_status kf_kernel_buffer(const kf_kernel *k, int i, kf_buffer *out) {
  rt_err err;
  if (!k || !out || i < 0 || i >= k->d->nbuffers) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_kernel_buffer: no buffer %d (%d buffers)", i,
               k ? k->d->nbuffers : 0);
    return rt_tls_record(&err);
  }
  const rt_buffer *b = &k->d->buffers[i];
  out->arg = b->arg;
  out->param = rt_kdesc_param_index(k->d, b->arg); /* checked at open: >= 0 */
  out->bytes = (size_t)b->bytes;
  out->zero_once = b->zero_once;
  return KF_OK;
}

kf_status kf_kernel_launch_config(const kf_kernel *k, unsigned grid[3], unsigned block[3],
                                  unsigned *shared_bytes) {
  rt_err err;
  if (!k) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT, "kf_kernel_launch_config: kernel is NULL");
    return rt_tls_record(&err);
  }
  const int loaded = atomic_load_explicit(&k->state, memory_order_acquire) == RT_LOADED;
  if (grid) /* a persistent kernel's, once loaded: the blocks its launches have */
    memcpy(grid, loaded ? k->grid : k->d->grid, sizeof k->grid);
  if (block)
    memcpy(block, k->d->block, sizeof k->d->block);
  /* loaded: what the launches pass (max_blocks_per_sm and one_wave may add to
   * the manifest's); before, the manifest's, which launches correctly too */
  if (shared_bytes)
    *shared_bytes = loaded ? k->shared : k->d->shared;
  return KF_OK;
}

kf_status kf_kernel_resources(kf_kernel *k, kf_resources *out) {
  rt_err err;
  kf_status st = KF_OK;
  if (!k || !out) {
    rt_err_set(&err, KF_ERR_INVALID_ARGUMENT,
               "kf_kernel_resources: kernel and out must not be NULL");
    return k ? rt_slot_record(&k->err, &err) : rt_tls_record(&err);
  }
  pthread_mutex_lock(&k->mu);
  if (!k->meta_read) {
    /* read here, not at open: few servers ever ask */
    if ((st = rt_meta_load_at(&k->rt->root, k->d->meta, &k->res, &err)) == KF_OK)
      k->meta_read = 1;
  }
  if (st == KF_OK)
    *out = k->res;
  pthread_mutex_unlock(&k->mu);
  if (st != KF_OK) {
    rt_err_prefix(&err, "kernel %s: ", k->d->id);
    return rt_slot_record(&k->err, &err);
  }
  return KF_OK;
}
