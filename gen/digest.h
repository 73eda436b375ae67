/* digest.h: the key of an instance — XXH3-128 over tagged, length-delimited
 * records: key scheme, the generated source's tokens, every file of its
 * include closure (named relative to its include root, with its comment- and
 * whitespace-free tokens), the compile arguments, the toolchain identity and
 * the template parameters. The closure comes from libclang replaying the
 * compiler's device preprocessing pass. A dependency record per source keeps
 * no-op builds from re-parsing anything. */
#ifndef KF_DIGEST_H
#define KF_DIGEST_H

#include "plan.h"
#include "toolchain.h"

typedef struct {
  char *tag;   /* scheme, source, file, arg, tool, param */
  char *name;  /* what within the tag: a file's rooted name, an arg's index */
  char *value; /* the bytes hashed (for files: their token hash) */
} kf_record;

typedef struct {
  kf_record *v;
  size_t n;
} kf_records;

void kf_records_add(kf_records *r, const char *tag, const char *name, const char *value);
void kf_records_free(kf_records *r);
/* The key over all records, as 32 hex digits. */
void kf_records_key(const kf_records *r, char out[33]);
/* XXH3-64 of one record's value, as 16 hex digits (what `explain` shows). */
void kf_record_hash(const kf_record *rec, char out[17]);

typedef struct kf_digest kf_digest;

/* deps_dir: where dependency records live (NULL: none); write_deps: whether
 * to update them (off for read-only commands). */
kf_digest *kf_digest_new(const char *deps_dir, int write_deps);
void kf_digest_free(kf_digest *d);

/* What keying shares between machines (the remote tier), so that a fresh
 * builder need not parse: the include closure of a closure class
 * ("closure-<hex>") and the token hash of a generated source
 * ("source-<hex>"). get returns the text stored under name, or NULL (caller
 * frees); put stores it. digest.c checks a closure against this machine's
 * files before it uses it. */
typedef struct {
  char *(*get)(void *ctx, const char *id, size_t *len);
  void (*put)(void *ctx, const char *id, const char *text);
  void *ctx;
} kf_closure_share;
void kf_digest_set_share(kf_digest *d, const kf_closure_share *share);

/* What one instance is compiled with. */
typedef struct {
  kf_strv roots;        /* absolute include directories, in -I order */
  kf_strv labels;       /* their names in keys: @tdir0, @templates, @inc0 … */
  kf_strv compile_args; /* real compile arguments (absolute -I), I/O excluded */
  kf_strv key_args;     /* the same with include roots as labels */
  char *source_path;    /* absolute path where the source is written */
} kf_compile_setup;

/* defines: "NAME" or "NAME=VALUE" (from `--define`), passed to the compiler as
 * -D after the toolchain's own arguments, so they enter the key as ordinary
 * argument records and the include closure is replayed with them. */
void kf_compile_setup_init(kf_compile_setup *cs, const kf_instance *in, const kf_toolchain *tc,
                           const char *out_dir, const char *templates_dir,
                           const kf_strv *extra_template_dirs, const kf_strv *defines);
void kf_compile_setup_free(kf_compile_setup *cs);

/* Computes the records and key of an instance. Returns 0, or -1 with *err
 * (caller frees). *reparsed says whether libclang ran (for tests/benchmarks). */
int kf_digest_instance(kf_digest *d, const kf_instance *in, kf_toolchain *tc,
                       const kf_compile_setup *cs, kf_records *out, char key[33], int *reparsed,
                       char **err);

/* Reads the dependency record at path as a no-op build does, for a source
 * whose raw hash is source_raw (32 hex digits), and checks it against the
 * file system. Returns 1 when it still holds, 0 when the source would be
 * re-parsed (unreadable, malformed or stale record). For the fuzzer. */
int kf_digest_deps_check(const char *path, const char *source_raw);

/* Takes len bytes of text as another machine's shared closure (the body of
 * a "closure-" record) for a setup whose one include root, "@templates", is
 * root, as a build does. Returns 1 when it holds here, else 0. For the
 * fuzzer. */
int kf_digest_shared_check(const char *root, const char *text, size_t len);

#endif /* KF_DIGEST_H */
