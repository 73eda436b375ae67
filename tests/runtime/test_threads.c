/* Thread-safety of find and launch (runtime.h: after open, any number of
 * threads may find and launch at once, and lazy loading loads each kernel
 * exactly once). Stress tests against the fake CUDA driver, which records
 * per stream how many launches it saw and the sum of their rows argument:
 * a lost, doubled or mixed-up launch changes those numbers. */
#define _GNU_SOURCE
#include "fake_query.h"
#include "kf_test.h"
#include "kforge/runtime.h"
#include "rt_fixture.h"

#include <pthread.h>
#include <stdint.h>

#define THREADS 8
#define ITERS 3000
#define NORM_PARAMS "const float* x; float* y; float eps; int rows"

static const fx_spec SPECS[] = {
    {"norm", 1, NORM_PARAMS, 0, NULL, 0, 0},  {"norm", 2, NORM_PARAMS, 0, NULL, 0, 0},
    {"norm", 4, NORM_PARAMS, 0, NULL, 0, 0},  {"norm", 8, NORM_PARAMS, 0, NULL, 0, 0},
    {"mlp", 2, NORM_PARAMS, 0, NULL, 0, 0},   {"mlp", 8, NORM_PARAMS, 0, NULL, 0, 0},
    {"attn", 16, NORM_PARAMS, 0, NULL, 0, 0},
};
#define NSPECS ((int)(sizeof SPECS / sizeof SPECS[0]))

typedef struct worker {
  kf_runtime *rt;
  int id;
  pthread_barrier_t *start;
  int failures;
  long long rows_sum;
  int no_width;
} worker;

static void *work(void *arg) {
  worker *w = arg;
  static const char *kinds[] = {"norm", "mlp", "attn"};
  uintptr_t x = 0x1000 + (uintptr_t)w->id;
  float eps = 1e-6f;
  pthread_barrier_wait(w->start);
  for (int i = 0; i < ITERS; i++) {
    const char *kind = kinds[(i + w->id) % 3];
    int rows = (i * 7 + w->id) % 17 + 1;
    kf_kernel *k = NULL;
    kf_arg args[4] = {{&x, 8}, {&x, 8}, {&eps, 4}, {&rows, 4}};
    kf_status st = kf_kernel_find(w->rt, kind, rows, &k);
    if (st == KF_ERR_NO_WIDTH) {
      w->no_width++;
      continue;
    }
    if (st != KF_OK || kf_kernel_width(k) < rows || strcmp(kf_kernel_kind(k), kind) != 0 ||
        kf_kernel_launch(k, (void *)(uintptr_t)(w->id + 1), args, 4) != KF_OK) {
      w->failures++;
      continue;
    }
    w->rows_sum += rows;
  }
  return NULL;
}

static void stress(int lazy) {
  char *cache = fx_tmpdir();
  kf_runtime_options o;
  kf_runtime *rt = NULL;
  pthread_t threads[THREADS];
  worker workers[THREADS];
  pthread_barrier_t start;
  long expected_launches = 0;
  setenv("FAKE_CUDA_CC", "90", 1);
  fq_reset(FAKE_CUDA_PATH);
  KF_CHECK(fx_cache_add(cache, "m", "sm_90a", SPECS, NSPECS, 1) == 0);
  kf_runtime_options_init(&o);
  o.cache_dir = cache;
  o.model = "m";
  o.lazy = lazy;
  o.driver_path = FAKE_CUDA_PATH;
  KF_CHECK(kf_runtime_open(&o, &rt) == KF_OK);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == (lazy ? 0 : NSPECS));
  pthread_barrier_init(&start, NULL, THREADS);
  for (int t = 0; t < THREADS; t++) {
    workers[t] = (worker){rt, t, &start, 0, 0, 0};
    KF_CHECK(pthread_create(&threads[t], NULL, work, &workers[t]) == 0);
  }
  for (int t = 0; t < THREADS; t++)
    pthread_join(threads[t], NULL);
  pthread_barrier_destroy(&start);
  for (int t = 0; t < THREADS; t++) {
    KF_CHECK(workers[t].failures == 0);
    /* mlp tops out at 8 rows; some draws must have fallen back. */
    KF_CHECK(workers[t].no_width > 0);
    KF_CHECK(fq_stream(FAKE_CUDA_PATH, t + 1, 0) == ITERS - workers[t].no_width);
    KF_CHECK(fq_stream(FAKE_CUDA_PATH, t + 1, 1) == workers[t].rows_sum);
    expected_launches += ITERS - workers[t].no_width;
  }
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launches") == expected_launches);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "launch_failures") == 0);
  /* Every kernel loaded exactly once, however many threads raced for it. */
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "loads") == NSPECS);
  kf_runtime_close(rt);
  KF_CHECK(fq_stat(FAKE_CUDA_PATH, "live_modules") == 0);
  fx_remove_tree(cache);
  free(cache);
}

KF_TEST(threads__find_and_launch_from_many_threads_eager) { stress(0); }

KF_TEST(threads__find_and_launch_from_many_threads_lazy) { stress(1); }

KF_TEST_MAIN()
