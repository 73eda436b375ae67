/* cmd_stats.c: `kforge stats`: the cache's running statistics (stats.h). */
#include "cmd_cache.h"
#include "commands.h"
#include "report.h"
#include "stats.h"

#include <stdio.h>

static const char usage[] =
    "usage: kforge stats [--cache DIR] [--json]\n"
    "Shows what build, warm and pull found and moved since the cache was made: local\n"
    "hits, compiles, remote hits, misses, refused entries, errors, uploads, requests and\n"
    "bytes in and out. Exit 2 when the cache directory does not exist.\n";

int kf_cmd_stats(int argc, char **argv) {
  kf_cache c;
  int json = 0;
  int rc = kf_cache_cli(argc, argv, usage, &c, &json, NULL);
  if (rc)
    return rc == 1 ? 0 : rc;
  if (!kf_path_exists(c.root)) {
    kf_error(NULL, NULL, "cache %s does not exist", c.root);
    kf_cache_free(&c);
    return 2;
  }
  kf_stats s;
  kf_stats_load(&c, &s);
  if (json)
    printf("{\"local_hits\": %lld, \"compiled\": %lld, \"remote_hits\": %lld, "
           "\"remote_misses\": %lld, \"remote_refused\": %lld, \"remote_errors\": %lld, "
           "\"uploads\": %lld, \"requests\": %lld, \"bytes_in\": %lld, \"bytes_out\": %lld}\n",
           s.local_hits, s.compiled, s.remote_hits, s.remote_misses, s.remote_refused,
           s.remote_errors, s.uploads, s.requests, s.bytes_in, s.bytes_out);
  else
    printf("local hits      %lld\ncompiled        %lld\nremote hits     %lld\n"
           "remote misses   %lld\nremote refused  %lld\nremote errors   %lld\n"
           "uploads         %lld\nrequests        %lld\nbytes in        %lld\n"
           "bytes out       %lld\n",
           s.local_hits, s.compiled, s.remote_hits, s.remote_misses, s.remote_refused,
           s.remote_errors, s.uploads, s.requests, s.bytes_in, s.bytes_out);
  kf_cache_free(&c);
  return 0;
}
