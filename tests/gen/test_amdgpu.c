/* Tests of gen/amdgpu.c: the ELF of one arch out of a clang offload bundle,
 * refused when the bundle lies about its sizes, and the figures of one
 * kernel out of llvm-readelf's rendering of the metadata note. */
#include "gen_fixture.h"

#include "amdgpu.h"

#include <stdint.h>
#include <string.h>

/* A bundle of a host entry (empty) and one entry per (id, payload). */
static size_t bundle(char *out, const char *const *ids, const char *const *payloads, int n) {
  size_t at = 0, header = 24 + 8;
  memcpy(out, "__CLANG_OFFLOAD_BUNDLE__", 24);
  uint64_t count = (uint64_t)n;
  memcpy(out + 24, &count, 8);
  for (int i = 0; i < n; i++)
    header += 24 + strlen(ids[i]);
  at = 32;
  size_t data = header;
  for (int i = 0; i < n; i++) {
    uint64_t o = data, size = strlen(payloads[i]), idlen = strlen(ids[i]);
    memcpy(out + at, &o, 8);
    memcpy(out + at + 8, &size, 8);
    memcpy(out + at + 16, &idlen, 8);
    memcpy(out + at + 24, ids[i], idlen);
    at += 24 + idlen;
    memcpy(out + data, payloads[i], size);
    data += size;
  }
  return data;
}

KF_TEST(amdgpu__the_elf_of_the_arch_comes_out_of_a_bundle) {
  char b[1024];
  const char *ids[] = {"host-x86_64-unknown-linux", "hipv4-amdgcn-amd-amdhsa--gfx908",
                       "hipv4-amdgcn-amd-amdhsa--gfx90a:xnack-"};
  const char *payloads[] = {"", "\177ELF-908", "\177ELF-90a"};
  size_t len = bundle(b, ids, payloads, 3), off = 0, n = 0;
  KF_CHECK(kf_amdgpu_elf(b, len, "gfx90a", &off, &n) == 0);
  KF_CHECK(n == 8 && !memcmp(b + off, "\177ELF-90a", 8));
  KF_CHECK(kf_amdgpu_elf(b, len, "gfx908:sramecc+", &off, &n) == 0); /* features ignored */
  KF_CHECK(n == 8 && !memcmp(b + off, "\177ELF-908", 8));
  KF_CHECK(kf_amdgpu_elf(b, len, "gfx90", &off, &n) == -1); /* a prefix is not the arch */
  KF_CHECK(kf_amdgpu_elf(b, len, "gfx942", &off, &n) == -1);
  KF_CHECK(kf_amdgpu_elf("\177ELF....", 8, "gfx942", &off, &n) == 0 && off == 0 && n == 8);
}

KF_TEST(amdgpu__a_bundle_that_lies_about_its_sizes_gives_nothing) {
  char b[1024];
  const char *ids[] = {"hipv4-amdgcn-amd-amdhsa--gfx90a"};
  const char *payloads[] = {"\177ELF-90a"};
  size_t len = bundle(b, ids, payloads, 1), off, n;
  for (size_t cut = 0; cut < len; cut++) /* every truncation */
    KF_CHECK(kf_amdgpu_elf(b, cut, "gfx90a", &off, &n) == -1 || off + n <= cut);
  uint64_t huge = UINT64_MAX - 3;
  char c[1024];
  memcpy(c, b, len);
  memcpy(c + 24, &huge, 8); /* the entry count */
  KF_CHECK(kf_amdgpu_elf(c, len, "gfx908", &off, &n) == -1);
  memcpy(c, b, len);
  memcpy(c + 40, &huge, 8); /* the entry's size */
  KF_CHECK(kf_amdgpu_elf(c, len, "gfx90a", &off, &n) == -1);
  memcpy(c, b, len);
  memcpy(c + 48, &huge, 8); /* the id's length */
  KF_CHECK(kf_amdgpu_elf(c, len, "gfx90a", &off, &n) == -1);
}

static const char notes[] = "Displaying notes found in: .note\n"
                            "    AMDGPU Metadata:\n"
                            "        ---\n"
                            "amdhsa.kernels:\n"
                            "  - .agpr_count:     4\n"
                            "    .args:\n"
                            "      - .offset:         0\n"
                            "        .size:           8\n"
                            "    .group_segment_fixed_size: 96\n"
                            "    .name:           kf_a\n"
                            "    .private_segment_fixed_size: 0\n"
                            "    .sgpr_count:     1\n"
                            "    .sgpr_spill_count: 0\n"
                            "    .vgpr_count:     1\n"
                            "    .vgpr_spill_count: 0\n"
                            "  - .group_segment_fixed_size: 512\n"
                            "    .name:           kf_ab\n"
                            "    .private_segment_fixed_size: 16\n"
                            "    .sgpr_count:     33\n"
                            "    .sgpr_spill_count: 2\n"
                            "    .vgpr_count:     77\n"
                            "    .vgpr_spill_count: 3\n"
                            "amdhsa.target:   amdgcn-amd-amdhsa--gfx90a\n";

KF_TEST(amdgpu__the_figures_are_those_of_the_kernel_named) {
  kf_meta_resources r = KF_META_RESOURCES_NONE;
  KF_CHECK(kf_amdgpu_note_figures(notes, "kf_ab", &r) == 0);
  KF_CHECK(r.registers == 77 && r.sgprs == 33 && r.agprs == 0 && r.spilled_registers == 5);
  KF_CHECK(r.stack_bytes == 16 && r.shared_bytes == 512);
  KF_CHECK(kf_amdgpu_note_figures(notes, "kf_a", &r) == 0);
  KF_CHECK(r.registers == 1 && r.agprs == 4 && r.shared_bytes == 96);
  kf_meta_resources before = r;
  KF_CHECK(kf_amdgpu_note_figures(notes, "kf", &r) == -1); /* no kernel of that name */
  KF_CHECK(kf_amdgpu_note_figures("amdhsa.kernels:\n", "kf_a", &r) == -1);
  KF_CHECK(kf_amdgpu_note_figures("", "kf_a", &r) == -1);
  KF_CHECK(!memcmp(&r, &before, sizeof r));
}

KF_TEST(amdgpu__an_entry_missing_a_figure_gives_nothing) {
  static const char partial[] = "x\n"
                                "amdhsa.kernels:\n"
                                "  - .name:           kf_a\n"
                                "    .sgpr_count:     1\n"
                                "    .vgpr_count:     1\n"
                                "amdhsa.target:   amdgcn-amd-amdhsa--gfx90a\n";
  kf_meta_resources r = KF_META_RESOURCES_NONE;
  KF_CHECK(kf_amdgpu_note_figures(partial, "kf_a", &r) == -1);
  KF_CHECK(r.registers == -1);
}

KF_TEST(amdgpu__an_entry_with_a_figure_out_of_range_gives_nothing) {
  static const char huge[] = "x\n"
                             "amdhsa.kernels:\n"
                             "  - .group_segment_fixed_size: 0\n"
                             "    .name:           kf_a\n"
                             "    .private_segment_fixed_size: 0\n"
                             "    .sgpr_count:     1\n"
                             "    .sgpr_spill_count: 2\n"
                             "    .vgpr_count:     1\n"
                             "    .vgpr_spill_count: 9223372036854775807\n"
                             "amdhsa.target:   amdgcn-amd-amdhsa--gfx90a\n";
  kf_meta_resources r = KF_META_RESOURCES_NONE;
  KF_CHECK(kf_amdgpu_note_figures(huge, "kf_a", &r) == -1);
  KF_CHECK(r.spilled_registers == -1);
}

KF_TEST_MAIN()
