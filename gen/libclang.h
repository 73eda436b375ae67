/* libclang.h: libclang, opened with dlopen at the first parse. Linking it
 * would load libclang and LLVM (tens of MB, their static constructors) into
 * every kforge command: about 20 ms before main on a fast machine, which is
 * most of a `kforge pull`, a no-op build or `kforge ls`, none of which
 * parses anything. The table's types are the header's own declarations. */
#ifndef KF_LIBCLANG_H
#define KF_LIBCLANG_H

#include <clang-c/Index.h>

#define KF_LIBCLANG_FUNCTIONS(X)                                                                   \
  X(createIndex)                                                                                   \
  X(disposeIndex)                                                                                  \
  X(parseTranslationUnit2)                                                                         \
  X(disposeTranslationUnit)                                                                        \
  X(getFile)                                                                                       \
  X(getFileName)                                                                                   \
  X(getFileContents)                                                                               \
  X(getInclusions)                                                                                 \
  X(getLocationForOffset)                                                                          \
  X(getSpellingLocation)                                                                           \
  X(getRange)                                                                                      \
  X(getRangeStart)                                                                                 \
  X(getRangeEnd)                                                                                   \
  X(tokenize)                                                                                      \
  X(disposeTokens)                                                                                 \
  X(getTokenKind)                                                                                  \
  X(getTokenSpelling)                                                                              \
  X(getTokenExtent)                                                                                \
  X(getCString)                                                                                    \
  X(disposeString)                                                                                 \
  X(getClangVersion)

typedef struct {
#define KF_LIBCLANG_FIELD(name) __typeof__(clang_##name) *name;
  KF_LIBCLANG_FUNCTIONS(KF_LIBCLANG_FIELD)
#undef KF_LIBCLANG_FIELD
} kf_libclang;

/* The library, loaded once per process (thread-safe). Returns NULL with
 * *err (caller frees) when it cannot be loaded; the reason is kept, so a
 * later call fails the same way. */
const kf_libclang *kf_libclang_get(char **err);
/* The file name kforge opens it by (its soname on Debian, with the full
 * version), without loading it: its identity in what keying shares. */
const char *kf_libclang_name(void);

#endif /* KF_LIBCLANG_H */
