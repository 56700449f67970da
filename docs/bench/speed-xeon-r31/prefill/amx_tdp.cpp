#include <immintrin.h>
#include <x86intrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <sys/syscall.h>
#include <unistd.h>
struct alignas(64) Cfg { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; };
static void cfg() { Cfg c; memset(&c, 0, sizeof c); c.palette = 1; for (int i = 0; i < 8; ++i) { c.colsb[i] = 64; c.rows[i] = 16; } _tile_loadconfig(&c); }
alignas(64) static char A[64 * 1024], B[64 * 1024], C[256 * 1024];
#define N 20000
template <class F> double run(const char* name, int tdps, F f) {
  for (int i = 0; i < 100; ++i) f();
  uint64_t t0 = __rdtsc();
  for (int i = 0; i < N; ++i) f();
  uint64_t t = __rdtsc() - t0;
  printf("%-40s %7.1f ticks/iter  %6.1f ticks/tdp\n", name, (double)t / N, (double)t / N / tdps);
  return 0;
}
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  cfg();
  { uint32_t x = 12345; for (size_t i = 0; i < sizeof A / 2; ++i) { x = x * 1664525u + 1013904223u; float f = ((x >> 8) & 0xFFFF) / 32768.0f - 1.0f; uint32_t u; memcpy(&u, &f, 4); ((uint16_t*)A)[i] = LOADV ? (uint16_t)(u >> 16) : 0; ((uint16_t*)B)[i] = LOADV ? (uint16_t)(u >> 16) : 0; } }
  memset(C, 0, sizeof C);
  if (LOADT) { _tile_loadd(4, A, 64); _tile_loadd(5, A + 1024, 64); _tile_loadd(6, B, 64); _tile_loadd(7, B + 1024, 64); _tile_loadd(0, C, 64); _tile_loadd(1, C, 64); _tile_loadd(2, C, 64); _tile_loadd(3, C, 64);}
  run("4 indep tdp", 4, [] { _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7); });
  run("1 chain tdp", 1, [] { _tile_dpbf16ps(0, 4, 6); });
  run("2 chains tdp", 2, [] { _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); });
  run("4 indep + 4 loads (A4,A5,B6,B7)", 4, [] { _tile_loadd(4, A, 64); _tile_loadd(5, A + 1024, 64); _tile_loadd(6, B, 64); _tile_loadd(7, B + 1024, 64);
     _tile_dpbf16ps(0, 4, 6); _tile_dpbf16ps(1, 4, 7); _tile_dpbf16ps(2, 5, 6); _tile_dpbf16ps(3, 5, 7); });
  run("qk_amx-like (zero, 10 loads, 8 tdp, 4 st)", 8, [] {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    for (int u = 0; u < 2; ++u) {
      _tile_loadd(4, A + u * 64, 128);
      _tile_loadd(5, B + u * 4096, 256); _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, B + u * 4096 + 64, 256); _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(5, B + u * 4096 + 128, 256); _tile_dpbf16ps(2, 4, 5);
      _tile_loadd(6, B + u * 4096 + 192, 256); _tile_dpbf16ps(3, 4, 6);
    }
    _tile_stored(0, C, 256); _tile_stored(1, C + 64, 256); _tile_stored(2, C + 128, 256); _tile_stored(3, C + 192, 256);
  });
  run("qk held Q(4,5), B 6/7, 4 C, 4 st", 8, [] {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(6, B, 256); _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, B + 64, 256); _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(6, B + 128, 256); _tile_dpbf16ps(2, 4, 6);
    _tile_loadd(7, B + 192, 256); _tile_dpbf16ps(3, 4, 7);
    _tile_loadd(6, B + 4096, 256); _tile_dpbf16ps(0, 5, 6);
    _tile_loadd(7, B + 4096 + 64, 256); _tile_dpbf16ps(1, 5, 7);
    _tile_loadd(6, B + 4096 + 128, 256); _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(7, B + 4096 + 192, 256); _tile_dpbf16ps(3, 5, 7);
    _tile_stored(0, C, 256); _tile_stored(1, C + 64, 256); _tile_stored(2, C + 128, 256); _tile_stored(3, C + 192, 256);
  });
  run("same, no stores", 8, [] {
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(6, B, 256); _tile_dpbf16ps(0, 4, 6);
    _tile_loadd(7, B + 64, 256); _tile_dpbf16ps(1, 4, 7);
    _tile_loadd(6, B + 128, 256); _tile_dpbf16ps(2, 4, 6);
    _tile_loadd(7, B + 192, 256); _tile_dpbf16ps(3, 4, 7);
    _tile_loadd(6, B + 4096, 256); _tile_dpbf16ps(0, 5, 6);
    _tile_loadd(7, B + 4096 + 64, 256); _tile_dpbf16ps(1, 5, 7);
    _tile_loadd(6, B + 4096 + 128, 256); _tile_dpbf16ps(2, 5, 6);
    _tile_loadd(7, B + 4096 + 192, 256); _tile_dpbf16ps(3, 5, 7);
  });
  run("pv_amx-like", 8, [] {
    for (int j = 0; j < 64; j += 32) {
      _tile_loadd(0, C + j * 4, 256); _tile_loadd(1, C + j * 4 + 64, 256);
      for (int np = 0; np < 32; np += 16) {
        _tile_loadd(4, A + np * 4, 128);
        _tile_loadd(5, B + np * 256 + j * 4, 256); _tile_dpbf16ps(0, 4, 5);
        _tile_loadd(6, B + np * 256 + j * 4 + 64, 256); _tile_dpbf16ps(1, 4, 6);
      }
      _tile_stored(0, C + j * 4, 256); _tile_stored(1, C + j * 4 + 64, 256);
    }
  });
  run("pv O held 0-3, P 4, V 5/6 (64 keys)", 8, [] {
    for (int s = 0; s < 2; ++s) {
      _tile_loadd(4, A + s * 64, 128);
      _tile_loadd(5, B + s * 4096, 256); _tile_dpbf16ps(0, 4, 5);
      _tile_loadd(6, B + s * 4096 + 64, 256); _tile_dpbf16ps(1, 4, 6);
      _tile_loadd(5, B + s * 4096 + 128, 256); _tile_dpbf16ps(2, 4, 5);
      _tile_loadd(6, B + s * 4096 + 192, 256); _tile_dpbf16ps(3, 4, 6);
    }
  });
  run("pv O held, P 4/5 V 6/7 alt", 8, [] {
      _tile_loadd(4, A, 128);
      _tile_loadd(6, B, 256); _tile_dpbf16ps(0, 4, 6);
      _tile_loadd(7, B + 64, 256); _tile_dpbf16ps(1, 4, 7);
      _tile_loadd(6, B + 128, 256); _tile_dpbf16ps(2, 4, 6);
      _tile_loadd(7, B + 192, 256); _tile_dpbf16ps(3, 4, 7);
      _tile_loadd(5, A + 64, 128);
      _tile_loadd(6, B + 4096, 256); _tile_dpbf16ps(0, 5, 6);
      _tile_loadd(7, B + 4096 + 64, 256); _tile_dpbf16ps(1, 5, 7);
      _tile_loadd(6, B + 4096 + 128, 256); _tile_dpbf16ps(2, 5, 6);
      _tile_loadd(7, B + 4096 + 192, 256); _tile_dpbf16ps(3, 5, 7);
  });
  run("store only 4", 4, [] { _tile_stored(0, C, 256); _tile_stored(1, C + 64, 256); _tile_stored(2, C + 128, 256); _tile_stored(3, C + 192, 256); });
  run("load only 4", 4, [] { _tile_loadd(4, A, 64); _tile_loadd(5, A + 1024, 64); _tile_loadd(6, B, 64); _tile_loadd(7, B + 1024, 64); });
  _tile_release();
}
