/* report.h: the one reporter of every diagnostic kforge prints on stderr, in
 * git's shape: the place first, then the level word, then the problem,
 * lowercase and without a trailing full stop:
 *   models/x.json:3:5: error: expected ',' after member      (syntax)
 *   models/x.json: layers[3].head_dim: error: must be ...    (meaning)
 *   kforge: warning: qwen3-0.6b/o_proj/w1/sm_90a: ...        (no file)
 * Progress lines and command output are not diagnostics and do not come
 * here. */
#ifndef KF_REPORT_H
#define KF_REPORT_H

typedef enum { KF_ERROR, KF_WARNING, KF_NOTE } kf_level;

/* Prints "<file>: <path>: <level>: <message>". file NULL means the command
 * itself ("kforge"); path NULL or "" leaves that part out. */
void kf_diag(kf_level level, const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void kf_error(const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kf_warning(const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void kf_note(const char *file, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prints "<file>:<line>:<col>: error: <message>" (a syntax error). */
void kf_error_pos(const char *file, int line, int col, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* A usage error: "kforge: error: <message>", then the command's usage text. */
void kf_usage_error(const char *usage, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* At most KF_REPORT_MAX_ERRORS errors are printed per file between
 * kf_report_cap_begin and kf_report_cap_end (a description with a million
 * bad widths must not print a million lines); kf_report_cap_end then prints
 * "<file>: error: and K more errors" for each file that had more. Calls
 * nest; only the outermost end prints. Errors are still counted by their
 * callers: only the printing stops. */
#define KF_REPORT_MAX_ERRORS 20
void kf_report_cap_begin(void);
void kf_report_cap_end(void);

#endif /* KF_REPORT_H */
