// Host stand-in for <cuda_bf16.h> (tests/emu): the templates use the bf16
// type only as 2-byte storage.
#pragma once
struct __nv_bfloat16 {
  unsigned short x;
};
