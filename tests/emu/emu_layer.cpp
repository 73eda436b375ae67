// emu_layer.cpp: kernels as kforge generated them for an arch (their .hip or
// .cu sources), run on the host by emu.h, so that a test can compare a layer
// kernel with the chain of its kinds bit for bit where no GPU of that arch
// is (tests/cli/test_layer_emu.py). That test writes emu_layer_gen.h, which
// includes the generated sources and gives
//   kNumBufs, kBufBytes[i], kBufPersist[i]  the buffers, in the input file's
//                                           order; persistent ones (sync
//                                           areas, zeroed once) carry over
//                                           from one launch to the next
//   launch_all(b, rows)                     the launches of one step
// Usage: emu_layer ROWS STEPS IN OUT. Every step starts from IN's buffers
// (persistent ones from the step before); OUT receives every buffer after
// the last step. Exit 0 when no shuffle read a missing lane.
#include "emu.h"

#include "emu_layer_gen.h"

#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: emu_layer ROWS STEPS IN OUT\n");
    return 2;
  }
  const int rows = atoi(argv[1]), steps = atoi(argv[2]);
  std::vector<std::vector<unsigned char>> given(kNumBufs), mem(kNumBufs);
  FILE *in = fopen(argv[3], "rb");
  if (!in) {
    perror(argv[3]);
    return 2;
  }
  for (int i = 0; i < kNumBufs; ++i) {
    given[i].resize(kBufBytes[i]);
    if (fread(given[i].data(), 1, kBufBytes[i], in) != kBufBytes[i]) {
      fprintf(stderr, "%s: too short for buffer %d\n", argv[3], i);
      return 2;
    }
    mem[i] = given[i];
  }
  fclose(in);
  std::vector<unsigned char *> ptr(kNumBufs);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < kNumBufs; ++i) {
      if (!kBufPersist[i])
        mem[i] = given[i];
      ptr[i] = mem[i].data();
    }
    launch_all(ptr.data(), rows);
  }
  FILE *out = fopen(argv[4], "wb");
  if (!out) {
    perror(argv[4]);
    return 2;
  }
  for (int i = 0; i < kNumBufs; ++i)
    fwrite(mem[i].data(), 1, mem[i].size(), out);
  if (fclose(out) != 0) {
    perror(argv[4]);
    return 2;
  }
  if (emu::errors) {
    fprintf(stderr, "emu_layer: %ld shuffles read a missing lane\n", emu::errors);
    return 1;
  }
  return 0;
}
