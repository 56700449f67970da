// Does tdpbf16ps give the same fp32 bits for P.V with P's units (p, 0) / (0, p) against V as it lies
// ("words", two products a 16-key group) as with P in pairs against V packed in pairs (one product)?
// Random P in [0, 1] (bf16), V ~ N(0, 1) (bf16), 16 rows, 64 keys, dims 0..31, starting from a random C.
#include <immintrin.h>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <cmath>
#include <random>
#include <sys/syscall.h>
#include <unistd.h>
struct alignas(64) Cfg { uint8_t palette, start; uint8_t res[14]; uint16_t colsb[16]; uint8_t rows[16]; };
static uint16_t bf(float f) { uint32_t u; memcpy(&u, &f, 4); return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16); }
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  Cfg c; memset(&c, 0, sizeof c); c.palette = 1; for (int i = 0; i < 8; ++i) { c.colsb[i] = 64; c.rows[i] = 16; } _tile_loadconfig(&c);
  std::mt19937 rng(1); std::normal_distribution<float> nd; std::uniform_real_distribution<float> ud(0, 1);
  int differ = 0, total = 0; double maxrel = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    alignas(64) uint16_t P[16][64], V[64][64];           // 16 rows x 64 keys; 64 keys x 64 dims (dims 0..31 used)
    alignas(64) float C0[16][16];
    for (auto& r : P) for (auto& x : r) x = bf(std::pow(ud(rng), 4.f) * (trial % 3 ? 1.f : 100.f));
    for (auto& r : V) for (auto& x : r) x = bf(nd(rng));
    for (auto& r : C0) for (auto& x : r) x = nd(rng) * (trial % 2 ? 1.f : 0.f);
    // words: Pw even [16 rows][16 units] = (P[r][k], 0) for the 16 keys of a group; V group rows as they lie
    alignas(64) float Cw[16][16], Cp[16][16];           // output even dims 0,2,..,30 (16 columns)
    memcpy(Cw, C0, sizeof Cw); memcpy(Cp, C0, sizeof Cp);
    _tile_loadd(0, Cw, 64);
    for (int g = 0; g < 4; ++g) {
      alignas(64) uint32_t Pw[16][16];
      for (int r = 0; r < 16; ++r) for (int k = 0; k < 16; ++k) Pw[r][k] = P[r][16 * g + k];
      _tile_loadd(4, Pw, 64);
      _tile_loadd(6, &V[16 * g][0], 128);                  // 16 keys x 32 dims: unit n = dims (2n, 2n+1)
      _tile_dpbf16ps(0, 4, 6);                             // column n gets P . V[:, 2n]  (even dims)
    }
    _tile_stored(0, Cw, 64);
    // pairs: P rows as they are (units = key pairs), V packed: Vp[j][n] = (V[2j][2n], V[2j+1][2n])
    _tile_loadd(1, Cp, 64);
    for (int h = 0; h < 2; ++h) {                          // 32 keys = 16 pairs a product
      alignas(64) uint16_t Vp[16][32];
      for (int j = 0; j < 16; ++j) for (int n = 0; n < 16; ++n) { Vp[j][2 * n] = V[32 * h + 2 * j][2 * n]; Vp[j][2 * n + 1] = V[32 * h + 2 * j + 1][2 * n]; }
      _tile_loadd(5, &P[0][32 * h], 128);
      _tile_loadd(7, Vp, 64);
      _tile_dpbf16ps(1, 5, 7);
    }
    _tile_stored(1, Cp, 64);
    for (int r = 0; r < 16; ++r) for (int n = 0; n < 16; ++n) {
      ++total;
      if (memcmp(&Cw[r][n], &Cp[r][n], 4)) { ++differ; maxrel = std::fmax(maxrel, std::fabs(Cw[r][n] - Cp[r][n]) / (std::fabs(Cp[r][n]) + 1e-30)); }
    }
  }
  printf("words vs pairs: %d of %d outputs differ (max rel %.3g)\n", differ, total, maxrel);
}
