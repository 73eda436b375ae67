/* Failure reasons: building them, keeping the last one on a handle and on
 * the calling thread, the status texts, and the one check that every driver
 * call goes through (statement, file:line, the driver's own error text). */
#include "rt_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local rt_err rt_tls_last;

kf_status rt_err_set(rt_err *e, kf_status status, const char *fmt, ...) {
  va_list ap;
  e->status = status;
  e->code = 0;
  va_start(ap, fmt);
  vsnprintf(e->text, sizeof e->text, fmt, ap);
  va_end(ap);
  return status;
}

kf_status rt_err_prefix(rt_err *e, const char *fmt, ...) {
  char head[RT_REASON_MAX];
  size_t hlen, tlen;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(head, sizeof head, fmt, ap);
  va_end(ap);
  hlen = strlen(head);
  tlen = strnlen(e->text, sizeof e->text - 1);
  if (hlen + tlen >= sizeof e->text)
    tlen = sizeof e->text - 1 - hlen;
  memmove(e->text + hlen, e->text, tlen);
  memcpy(e->text, head, hlen);
  e->text[hlen + tlen] = '\0';
  return e->status;
}

/* Appends formatted text to buf (size bytes, *used of them taken). */
static void add(char *buf, size_t size, size_t *used, const char *fmt, ...) RT_PRINTF(4, 5);
static void add(char *buf, size_t size, size_t *used, const char *fmt, ...) {
  va_list ap;
  if (*used >= size)
    return;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *used, size - *used, fmt, ap);
  va_end(ap);
  if (n > 0)
    *used += (size_t)n;
}

/* " word", in single quotes unless no shell treats any of its characters
 * specially. */
static void add_word(char *buf, size_t size, size_t *used, const char *word) {
  static const char plain[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                              "_./+-=:,@%";
  if (word[0] && strspn(word, plain) == strlen(word)) {
    add(buf, size, used, " %s", word);
    return;
  }
  add(buf, size, used, " '");
  for (const char *p = word; *p; p++) {
    if (*p == '\'')
      add(buf, size, used, "'\\''"); /* close, an escaped quote, reopen */
    else
      add(buf, size, used, "%c", *p);
  }
  add(buf, size, used, "'");
}

void rt_err_build_hint(rt_err *e, const char *arch, const char *cache_dir, const char *model,
                       const char *description) {
  size_t used = strnlen(e->text, sizeof e->text - 1);
  add(e->text, sizeof e->text, &used, " (build it with: kforge build --arch");
  add_word(e->text, sizeof e->text, &used, arch);
  add(e->text, sizeof e->text, &used, " --cache");
  add_word(e->text, sizeof e->text, &used, cache_dir);
  if (description)
    add_word(e->text, sizeof e->text, &used, description);
  else
    add(e->text, sizeof e->text, &used, " <the description of model '%s'>", model);
  add(e->text, sizeof e->text, &used, ")");
}

void rt_slot_init(rt_slot *s) {
  pthread_mutex_init(&s->mu, NULL);
  s->status = KF_OK;
  s->text[0] = '\0';
}

void rt_slot_destroy(rt_slot *s) { pthread_mutex_destroy(&s->mu); }

kf_status rt_tls_record(const rt_err *e) {
  if (e != &rt_tls_last)
    rt_tls_last = *e;
  return e->status;
}

kf_status rt_slot_record(rt_slot *s, const rt_err *e) {
  if (s) {
    pthread_mutex_lock(&s->mu);
    s->status = e->status;
    memcpy(s->text, e->text, sizeof s->text);
    pthread_mutex_unlock(&s->mu);
  }
  return rt_tls_record(e);
}

kf_status rt_slot_copy(rt_slot *s, char *buf, size_t size) {
  kf_status st;
  pthread_mutex_lock(&s->mu);
  st = s->status;
  if (buf && size > 0)
    snprintf(buf, size, "%s", s->text);
  pthread_mutex_unlock(&s->mu);
  return st;
}

const char *kf_last_error(void) { return rt_tls_last.text; }

const char *kf_strerror(kf_status status) {
  switch (status) {
  case KF_OK:
    return "success";
  case KF_ERR_INVALID_ARGUMENT:
    return "invalid argument";
  case KF_ERR_NO_MEMORY:
    return "out of memory";
  case KF_ERR_NO_DRIVER:
    return "no GPU driver";
  case KF_ERR_DRIVER:
    return "driver call failed";
  case KF_ERR_NO_DEVICE:
    return "no such device";
  case KF_ERR_NO_MANIFEST:
    return "no manifest for this device's architecture";
  case KF_ERR_BAD_MANIFEST:
    return "malformed manifest";
  case KF_ERR_FORMAT:
    return "manifest format newer than this runtime";
  case KF_ERR_IO:
    return "cannot read a cache file";
  case KF_ERR_CHECKSUM:
    return "damaged code object";
  case KF_ERR_SYMBOL:
    return "entry symbol missing from code object";
  case KF_ERR_NO_KIND:
    return "no kernel of this kind";
  case KF_ERR_NO_WIDTH:
    return "rows exceed the largest width";
  case KF_ERR_ARGS:
    return "arguments do not match the kernel's parameters";
  case KF_ERR_BAD_META:
    return "missing or malformed meta.json";
  case KF_ERR_CORESIDENCY:
    return "a cooperative kernel's blocks cannot all be resident at once";
  case KF_ERR_UNTRUSTED:
    return "a cache file others could have changed, or a link inside the cache";
  case KF_ERR_NO_PAGE_SIZE:
    return "no kernel of this kind for that page size";
  }
  return "unknown status";
}

kf_status rt_driver_check(const rt_driver *d, rt_err *err, int code, const char *stmt,
                          const char *file, int line) {
  char text[256];
  const char *base;
  if (code == 0)
    return KF_OK;
  base = strrchr(file, '/');
  base = base ? base + 1 : file;
  d->error_text(d, code, text, sizeof text);
  rt_err_set(err, KF_ERR_DRIVER, "%s:%d: %s failed: %s", base, line, stmt, text);
  err->code = code;
  return KF_ERR_DRIVER;
}
