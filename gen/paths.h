/* paths.h: where `kforge` finds its built-in templates and family presets.
 *
 * In order: $KFORGE_TEMPLATES / $KFORGE_FAMILIES; beside the executable as
 * installed (<prefix>/bin/kforge reads <prefix>/share/kforge/templates and
 * .../families); the source tree, only for a kforge that lies inside the
 * build tree it was built in. A copied binary that is neither installed nor
 * in its build tree gets the install location all the same, so that the
 * error that follows names where the files were expected, instead of
 * silently reading some checkout. --templates and --families override all
 * of these (kf_cli_parse). */
#ifndef KF_PATHS_H
#define KF_PATHS_H

/* The built-in template directory. Never NULL; the string is static. */
const char *kf_default_templates_dir(void);
/* The built-in family preset directory. Never NULL; the string is static. */
const char *kf_default_families_dir(void);

#endif /* KF_PATHS_H */
