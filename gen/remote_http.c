/* remote_http.c: the HTTP(S) backend (see remote.h), through libcurl. A blob
 * called name is <base URL>/<name>: GET reads it (404: missing), HEAD asks
 * for it, PUT stores it. One easy handle per server keeps its connection.
 * Credentials: user:password in the URL (basic, or the access key pair for
 * SigV4), bearer-token=, aws-sigv4= (S3-compatible stores). */
#define _GNU_SOURCE
#include "remote.h"
#include "sign.h"

#include <curl/curl.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  kf_remote_backend base;
  char *base_url; /* without a trailing '/' */
  char *bearer_token;
  char *aws_sigv4;
  long connect_ms, operation_ms;
  CURL *curl;
  CURLM *multi; /* get_many's transfers, kept with their connections */
  CURL *parallel[8];
  char *sha_header;           /* SigV4: "x-<provider>-content-sha256", else NULL */
  struct curl_slist *no_body; /* SigV4: that header for a request without a body */
} http_backend;

typedef struct {
  const char *data;
  size_t len, pos;
} upload;

static size_t on_body(char *p, size_t size, size_t n, void *ctx) {
  kf_buf *b = ctx;
  if (b->len + size * n > KF_READ_MAX)
    return 0; /* a body past kforge's read limit: abort the transfer */
  kf_buf_add(b, p, size * n);
  return size * n;
}

static size_t on_read(char *p, size_t size, size_t n, void *ctx) {
  upload *u = ctx;
  size_t k = u->len - u->pos < size * n ? u->len - u->pos : size * n;
  memcpy(p, u->data + u->pos, k);
  u->pos += k;
  return k;
}

static size_t on_discard(char *p, size_t size, size_t n, void *ctx) {
  (void)p;
  (void)ctx;
  return size * n;
}

/* Sets up one request on c. */
static void setup(http_backend *h, CURL *c, const char *name) {
  curl_easy_reset(c);
  char *url = kf_xasprintf("%s/%s", h->base_url, name);
  curl_easy_setopt(c, CURLOPT_URL, url);
  free(url);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, h->connect_ms);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->operation_ms);
  curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_discard);
  if (h->bearer_token) {
    curl_easy_setopt(c, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
    curl_easy_setopt(c, CURLOPT_XOAUTH2_BEARER, h->bearer_token);
  }
  if (h->aws_sigv4) {
    curl_easy_setopt(c, CURLOPT_AWS_SIGV4, h->aws_sigv4);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h->no_body);
  }
}

/* SigV4 signs the payload's SHA-256, which S3 and its look-alikes require
 * in a header of its own (a request without it is taken as unsigned and its
 * signature then fails); curl uses the header's value when it signs. The
 * header is named after the second provider of CURLOPT_AWS_SIGV4
 * ("aws:amz:…" gives x-amz-content-sha256). */
static char *sha_header_name(const char *sigv4) {
  const char *p = strchr(sigv4, ':');
  const char *name = p ? p + 1 : sigv4;
  size_t n = strcspn(name, ":");
  char *out = kf_xasprintf("x-%.*s-content-sha256", (int)n, name);
  for (char *q = out; *q; q++)
    if (*q >= 'A' && *q <= 'Z')
      *q = (char)(*q - 'A' + 'a');
  return out;
}

/* Adds the payload hash header of data to hdrs (SigV4 only). */
static struct curl_slist *add_payload_hash(const http_backend *h, struct curl_slist *hdrs,
                                           const void *data, size_t len) {
  if (!h->sha_header)
    return hdrs;
  char sha[65];
  kf_sha256_hex(data, len, sha);
  char *line = kf_xasprintf("%s: %s", h->sha_header, sha);
  hdrs = curl_slist_append(hdrs, line);
  free(line);
  return hdrs;
}

/* Sets up one request on the kept handle. */
static CURL *request(http_backend *h, const char *name) {
  if (!h->curl)
    h->curl = curl_easy_init();
  setup(h, h->curl, name);
  return h->curl;
}

/* Performs the request. Returns the HTTP status, or -1 with *err. */
static long perform(http_backend *h, const char *method, const char *name, char **err) {
  h->base.requests++;
  CURLcode rc = curl_easy_perform(h->curl);
  if (rc != CURLE_OK) {
    *err = kf_xasprintf("%s %s: %s", method, name, curl_easy_strerror(rc));
    return -1;
  }
  long status = 0;
  curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, &status);
  return status;
}

static int status_error(long status, const char *method, const char *name, char **err) {
  *err = kf_xasprintf("%s %s: HTTP %ld", method, name, status);
  return KF_REMOTE_FAILED;
}

/* GET name into out, or HEAD it when out is NULL. */
static int fetch(http_backend *h, const char *name, kf_buf *out, char **err) {
  const char *method = out ? "GET" : "HEAD";
  CURL *c = request(h, name);
  if (out) {
    out->len = 0;
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
  } else {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  }
  long st = perform(h, method, name, err);
  if (st < 0)
    return KF_REMOTE_FAILED;
  if (st == 404)
    return KF_REMOTE_MISSING;
  if (st != 200)
    return status_error(st, method, name, err);
  return KF_REMOTE_OK;
}

static int http_get(kf_remote_backend *b, const char *name, kf_buf *out, char **err) {
  return fetch((http_backend *)b, name, out, err);
}

/* Starts GET names[i] on c, its body into outs[i]. */
static void start_get(http_backend *h, CURL *c, const char *const *names, kf_buf *outs, size_t i) {
  setup(h, c, names[i]);
  outs[i].len = 0;
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &outs[i]);
  curl_easy_setopt(c, CURLOPT_PRIVATE, (void *)(uintptr_t)i);
  curl_multi_add_handle(h->multi, c);
}

/* GETs on up to 8 connections at once (curl's multi interface). */
static int http_get_many(kf_remote_backend *b, const char *const *names, size_t n, kf_buf *outs,
                         int *sts, char **err) {
  http_backend *h = (http_backend *)b;
  enum { WIDTH = sizeof h->parallel / sizeof h->parallel[0] };
  if (!h->multi)
    h->multi = curl_multi_init();
  size_t next = 0, done = 0, running_handles = 0;
  for (size_t k = 0; k < WIDTH && next < n; k++, next++) {
    if (!h->parallel[k])
      h->parallel[k] = curl_easy_init();
    start_get(h, h->parallel[k], names, outs, next);
    running_handles++;
  }
  int rc = KF_REMOTE_OK;
  while (done < n && rc == KF_REMOTE_OK) {
    int still = 0;
    if (curl_multi_perform(h->multi, &still) != CURLM_OK) {
      *err = kf_xstrdup("the transfers failed");
      rc = KF_REMOTE_FAILED;
      break;
    }
    CURLMsg *msg;
    int left;
    while (rc == KF_REMOTE_OK && (msg = curl_multi_info_read(h->multi, &left))) {
      if (msg->msg != CURLMSG_DONE)
        continue;
      CURL *c = msg->easy_handle;
      void *priv = NULL;
      curl_easy_getinfo(c, CURLINFO_PRIVATE, &priv);
      size_t i = (size_t)(uintptr_t)priv;
      long status = 0;
      curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
      CURLcode res = msg->data.result;
      curl_multi_remove_handle(h->multi, c);
      running_handles--;
      done++;
      if (res != CURLE_OK) {
        *err = kf_xasprintf("GET %s: %s", names[i], curl_easy_strerror(res));
        rc = KF_REMOTE_FAILED;
      } else if (status == 200 || status == 404) {
        sts[i] = status == 200 ? KF_REMOTE_OK : KF_REMOTE_MISSING;
        if (next < n) {
          start_get(h, c, names, outs, next++);
          running_handles++;
        }
      } else {
        rc = status_error(status, "GET", names[i], err);
      }
    }
    if (rc == KF_REMOTE_OK && done < n &&
        curl_multi_poll(h->multi, NULL, 0, 1000, NULL) != CURLM_OK) {
      *err = kf_xstrdup("the transfers failed");
      rc = KF_REMOTE_FAILED;
    }
  }
  for (size_t k = 0; k < WIDTH && running_handles; k++) /* after a failure */
    if (h->parallel[k])
      curl_multi_remove_handle(h->multi, h->parallel[k]);
  return rc;
}

static int http_exists(kf_remote_backend *b, const char *name, char **err) {
  return fetch((http_backend *)b, name, NULL, err);
}

static int http_put(kf_remote_backend *b, const char *name, const void *data, size_t len,
                    int overwrite, char **err) {
  http_backend *h = (http_backend *)b;
  if (!overwrite) {
    int st = http_exists(b, name, err);
    if (st != KF_REMOTE_MISSING)
      return st; /* there already (write-once), or the server failed */
  }
  CURL *c = request(h, name);
  upload u = {data, len, 0};
  curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(c, CURLOPT_READFUNCTION, on_read);
  curl_easy_setopt(c, CURLOPT_READDATA, &u);
  curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)len);
  /* "Expect:" (no 100-continue round trip) removes a header, which SigV4
   * would still sign: a SigV4 store then refuses the signature */
  struct curl_slist *hdrs = h->sha_header ? NULL : curl_slist_append(NULL, "Expect:");
  hdrs = curl_slist_append(hdrs, "Content-Type: application/octet-stream");
  hdrs = add_payload_hash(h, hdrs, data, len);
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
  long st = perform(h, "PUT", name, err);
  curl_slist_free_all(hdrs);
  if (st < 0)
    return KF_REMOTE_FAILED;
  if (st != 200 && st != 201 && st != 204)
    return status_error(st, "PUT", name, err);
  return KF_REMOTE_OK;
}

static void http_close(kf_remote_backend *b) {
  http_backend *h = (http_backend *)b;
  if (h->curl)
    curl_easy_cleanup(h->curl);
  for (size_t k = 0; k < sizeof h->parallel / sizeof h->parallel[0]; k++)
    if (h->parallel[k]) {
      if (h->multi)
        curl_multi_remove_handle(h->multi, h->parallel[k]);
      curl_easy_cleanup(h->parallel[k]);
    }
  if (h->multi)
    curl_multi_cleanup(h->multi);
  curl_slist_free_all(h->no_body);
  free(h->sha_header);
  free(h->base_url);
  free(h->bearer_token);
  free(h->aws_sigv4);
  free(h);
}

kf_remote_backend *kf_remote_http_open(const kf_remote_options *o, char **err) {
  static int curl_ready;
  if (!curl_ready) { /* the generator is one process; remotes open on the main thread */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
      *err = kf_xstrdup("libcurl cannot start");
      return NULL;
    }
    curl_ready = 1;
  }
  const char *host = strstr(o->url, "://") + 3;
  if (!*host || *host == '/') {
    *err = kf_xstrdup("expected http[s]://[USER:PASSWORD@]HOST[:PORT][/PATH]");
    return NULL;
  }
  http_backend *h = kf_xcalloc(1, sizeof *h);
  h->base.get = http_get;
  h->base.put = http_put;
  h->base.exists = http_exists;
  h->base.get_many = http_get_many;
  h->base.close = http_close;
  h->base.display = kf_xstrdup(o->url);
  h->base_url = kf_xstrdup(o->url);
  for (size_t n = strlen(h->base_url); n > 0 && h->base_url[n - 1] == '/'; n--)
    h->base_url[n - 1] = '\0';
  h->bearer_token = o->bearer_token ? kf_xstrdup(o->bearer_token) : NULL;
  h->aws_sigv4 = o->aws_sigv4 ? kf_xstrdup(o->aws_sigv4) : NULL;
  if (h->aws_sigv4) {
    h->sha_header = sha_header_name(h->aws_sigv4);
    h->no_body = add_payload_hash(h, NULL, "", 0);
  }
  h->connect_ms = o->connect_ms;
  h->operation_ms = o->operation_ms;
  return &h->base;
}
