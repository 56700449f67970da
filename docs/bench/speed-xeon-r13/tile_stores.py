"""Round 13 (docs/BENCHMARKS.md): do AMX tile stores stall a core's memory stream?

A loop shaped like the attention kernel's: 2 threads, each over its (kv head, chunk of 1,024
keys) items of 30 layers of bf16 K/V [1, 3, S, 64]; per 64-key block every row is loaded (with a
T2 prefetch 128 rows ahead), interleaved and stored to an L1 buffer (the packing), then tile work:
  none         no tile instructions
  products     12 tile loads + 16 tdpbf16ps (3-row tiles), no tile stores
  burst        the same, then 4 tile stores straight after the products
  burst-late   4 tile stores of the previous block's (finished) tiles before the products
  one          1 tile store of the previous block's tiles before the products
  spread       the previous block's 4 tiles stored one per 16 rows of the packing
Prints ms per 30 layers with K/V streamed from memory and with one resident row (stride 0).
usage: python tile_stores.py [S]   (needs a CPU with AMX-BF16 and Linux)
"""
import statistics
import sys
import time

import torch
from torch.utils.cpp_extension import load_inline

SRC = r'''
#include <torch/extension.h>
#include <immintrin.h>
#include <omp.h>
#include <sys/syscall.h>
#include <unistd.h>
struct alignas(64) Config { uint8_t palette, start_row, reserved[14]; uint16_t colsb[16]; uint8_t rows[16]; };
enum Mode { NONE, PRODUCTS, BURST, BURST_LATE, ONE, SPREAD };
double stream(std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs, int64_t mode, bool resident) {
  double total = 0;
  for (size_t l = 0; l < ks.size(); ++l) {
    const uint16_t* k = (const uint16_t*)ks[l].data_ptr(); const uint16_t* v = (const uint16_t*)vs[l].data_ptr();
    const int64_t H = ks[l].size(1), S = ks[l].size(2) - 256, chunk = 1024, chunks = (S + chunk - 1) / chunk, items = H * chunks;
    float res[2] = {0, 0};
    #pragma omp parallel num_threads(2)
    {
      syscall(SYS_arch_prctl, 0x1023, 18);
      Config c{}; c.palette = 1;
      for (int i = 0; i < 8; ++i) c.colsb[i] = 64, c.rows[i] = i < 5 ? 3 : 16;
      _tile_loadconfig(&c);
      alignas(64) static thread_local uint16_t buf[64 * 64];
      alignas(64) static thread_local uint16_t cbuf[64 * 64 * 2];
      alignas(64) static thread_local float out[16 * 64 * 4];
      const int t = omp_get_thread_num();
      __m512i acc = _mm512_setzero_si512();
      for (int64_t i = items * t / 2; i < items * (t + 1) / 2; ++i) {
        const int64_t h = i / chunks, n0 = (i % chunks) * chunk, n1 = std::min(S, n0 + chunk);
        for (const uint16_t* base : {k + h * (S + 256) * 64, v + h * (S + 256) * 64})
          for (int64_t b = n0; b < n1; b += 64) {
            for (int64_t n = b; n < std::min(n1, b + 64); ++n) {
              const uint16_t* row = resident ? base : base + n * 64;
              if (!resident) { _mm_prefetch((const char*)(row + 128 * 64), _MM_HINT_T2); _mm_prefetch((const char*)(row + 128 * 64 + 32), _MM_HINT_T2); }
              if (mode == SPREAD && (n - b) % 16 == 15)
                switch ((n - b) / 16) { case 0: _tile_stored(0, out, 64); break; case 1: _tile_stored(1, out + 256, 64); break;
                                        case 2: _tile_stored(2, out + 512, 64); break; default: _tile_stored(3, out + 768, 64); }
              __m512i a = _mm512_loadu_si512(row), bb = _mm512_loadu_si512(row + 32);
              a = _mm512_unpacklo_epi16(a, bb); bb = _mm512_unpackhi_epi16(a, bb);
              _mm512_store_si512(buf + (n - b) * 64, a); _mm512_store_si512(buf + (n - b) * 64 + 32, bb);
            }
            if (mode == BURST_LATE) { _tile_stored(0, out, 64); _tile_stored(1, out + 256, 64); _tile_stored(2, out + 512, 64); _tile_stored(3, out + 768, 64); }
            if (mode == ONE) _tile_stored(0, out, 64);
            if (mode != NONE) {
              for (int j = 0; j < 4; ++j) { _tile_loadd(5, buf + j * 1024, 64); _tile_loadd(6, buf + j * 1024 + 512, 64); _tile_loadd(4, cbuf, 128); }
              for (int j = 0; j < 4; ++j) { _tile_dpbf16ps(0, 4, 5); _tile_dpbf16ps(1, 4, 6); _tile_dpbf16ps(2, 4, 5); _tile_dpbf16ps(3, 4, 6); }
            }
            if (mode == BURST) { _tile_stored(0, out, 64); _tile_stored(1, out + 256, 64); _tile_stored(2, out + 512, 64); _tile_stored(3, out + 768, 64); }
            acc = _mm512_add_epi32(acc, _mm512_load_si512(buf + 7 * 64));
          }
      }
      _tile_release();
      res[t] = (float)_mm512_reduce_add_epi32(acc);
    }
    total += res[0] + res[1];
  }
  return total;
}
'''

if __name__ == "__main__":
    torch.set_num_threads(2)
    m = load_inline("tf_tile_stores", cpp_sources=SRC, functions=["stream"], extra_cflags=["-O3", "-march=native", "-fopenmp"],
                    extra_ldflags=["-fopenmp"])
    S = int(sys.argv[1]) if len(sys.argv) > 1 else 32000
    ks = [torch.randn(1, 3, S + 256, 64).bfloat16() for _ in range(30)]
    vs = [torch.randn(1, 3, S + 256, 64).bfloat16() for _ in range(30)]

    def ms(mode, resident):
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            m.stream(ks, vs, mode, resident)
            times.append(time.perf_counter() - t0)
        return 1e3 * statistics.median(times)

    for mode, name in enumerate(("none", "products", "burst", "burst-late", "one", "spread")):
        print(f"{name:>11}: streamed {ms(mode, False):6.1f} ms, resident {ms(mode, True):5.1f} ms", flush=True)
