#include <torch/extension.h>
#include <immintrin.h>
#include <x86intrin.h>
#include <omp.h>
static inline void spin(uint64_t cyc) { uint64_t t = __rdtsc() + cyc; while (__rdtsc() < t) _mm_pause(); }
static inline void pf(const void* p) { _mm_prefetch((const char*)p, _MM_HINT_T2); }
// sched 0: pass1 K ahead PFK + V current; pass2 nothing.  1: pass1 V current; pass2 next chunk K spread.
// 2: uniform stream K(c) V(c) K(c+1).. prefetch PFK keys ahead of the stream position in both passes
double run(std::vector<torch::Tensor> ks, std::vector<torch::Tensor> vs, int64_t S, int sched, int64_t PFK, int64_t c1cyc, int64_t c2cyc) {
  const int64_t Hkv = ks[0].size(0), cap = ks[0].size(1);
  const int64_t CH = 1024, chunks = (S + CH - 1) / CH, items = Hkv * chunks;
  __m512i tot = _mm512_setzero_si512();
  double t0 = omp_get_wtime();
  for (size_t l = 0; l < ks.size(); ++l) {
    const uint16_t* K = (const uint16_t*)ks[l].data_ptr();
    const uint16_t* V = (const uint16_t*)vs[l].data_ptr();
    #pragma omp parallel num_threads(2)
    {
      int me = omp_get_thread_num();
      int64_t lo = items * me / 2, hi = items * (me + 1) / 2;
      __m512i acc = _mm512_setzero_si512();
      for (int64_t it = lo; it < hi; ++it) {
        int64_t h = it / chunks, c = it % chunks, c0 = c * CH, c1 = std::min(S, c0 + CH), len = c1 - c0;
        const uint16_t* kb = K + h * cap * 64; const uint16_t* vb = V + h * cap * 64;
        // next item's K
        int64_t h2 = (it + 1) / chunks, cc = (it + 1) % chunks; const uint16_t* kn = (it + 1 < items) ? K + h2 * cap * 64 + cc * CH * 64 : nullptr;
        int64_t nlen = kn ? std::min(S, cc * CH + CH) - cc * CH : 0;
        int64_t nblk = (len + 63) / 64;
        for (int pass = 0; pass < 2; ++pass) {
          const uint16_t* b = pass ? vb : kb;
          for (int64_t j = 0; j < nblk; ++j) {
            int64_t n0 = c0 + 64 * j, n1 = std::min(c1, n0 + 64);
            if (sched == 0 && pass == 0) for (int64_t n = n0; n < n1; ++n) {
              if (n + PFK < S) { pf(kb + (n + PFK) * 64); pf(kb + (n + PFK) * 64 + 32); }
              pf(vb + n * 64); pf(vb + n * 64 + 32);
            }
            if (sched == 4 && pass == 0) for (int64_t n = n0; n < n1; ++n) {
              if (n + PFK < S) pf(kb + (n + PFK) * 64);
              pf(vb + n * 64);
            }
            if (sched == 5 && pass == 0) for (int64_t n = n0; n < n1; ++n) {
              if (n + PFK < S) { pf(kb + (n + PFK) * 64); pf(kb + (n + PFK) * 64 + 32); }
            }
            if (sched == 6) for (int64_t n = n0; n < n1; ++n) {   // one line per row, K ahead in pass 1, V ahead in pass 2
              if (pass == 0 && n + PFK < S) pf(kb + (n + PFK) * 64);
              if (pass == 1 && n + PFK < c1) pf(vb + (n + PFK) * 64);
              if (pass == 0 && n + PFK >= c1 && n + PFK - c1 + c0 < c1) pf(vb + (n + PFK - c1 + c0) * 64);
            }
            if (sched == 1) {
              if (pass == 0) for (int64_t n = n0; n < n1; ++n) {
                if (it == lo && n + PFK < S) { pf(kb + (n + PFK) * 64); pf(kb + (n + PFK) * 64 + 32); }
                pf(vb + n * 64); pf(vb + n * 64 + 32);
              }
              if (pass == 1 && kn) { int64_t tl = nlen * 2, a = tl * j / nblk, e = tl * (j + 1) / nblk; for (int64_t x = a; x < e; ++x) pf(kn + (x / 2) * 64 + 32 * (x % 2)); }
            }
            if (sched == 2) for (int64_t n = n0; n < n1; ++n) {
              int64_t p = pass * len + (n - c0) + PFK;
              const uint16_t* t = p < len ? kb + (c0 + p) * 64 : p < 2 * len ? vb + (c0 + p - len) * 64 : (kn && p - 2 * len < nlen ? kn + (p - 2 * len) * 64 : nullptr);
              if (t) { pf(t); pf(t + 32); }
            }
            for (int64_t n = n0; n < n1; ++n) {
              acc = _mm512_xor_si512(acc, _mm512_loadu_si512(b + n * 64));
              acc = _mm512_xor_si512(acc, _mm512_loadu_si512(b + n * 64 + 32));
            }
            if (sched == 7 || sched == 8) {   // prefetches spread over 16 sub-steps of the block's compute
              const uint16_t* lines[512]; int nl = 0;
              for (int64_t n = n0; n < n1; ++n) {
                if (sched == 7) {
                  int64_t p = pass * len + (n - c0) + PFK;
                  const uint16_t* t = p < len ? kb + (c0 + p) * 64 : p < 2 * len ? vb + (c0 + p - len) * 64 : (kn && p - 2 * len < nlen ? kn + (p - 2 * len) * 64 : nullptr);
                  if (t) { lines[nl++] = t; lines[nl++] = t + 32; }
                } else if (pass == 0) {
                  if (n + PFK < S) { lines[nl++] = kb + (n + PFK) * 64; lines[nl++] = kb + (n + PFK) * 64 + 32; }
                  lines[nl++] = vb + n * 64; lines[nl++] = vb + n * 64 + 32;
                }
              }
              const int64_t cyc = pass ? c2cyc : c1cyc;
              for (int st = 0; st < 16; ++st) {
                for (int x = nl * st / 16; x < nl * (st + 1) / 16; ++x) pf(lines[x]);
                spin(cyc / 16);
              }
            } else
            spin(pass ? c2cyc : c1cyc);
          }
        }
      }
      #pragma omp critical
      tot = _mm512_xor_si512(tot, acc);
    }
  }
  double t = omp_get_wtime() - t0;
  volatile int sink = _mm512_reduce_add_epi32(tot); (void)sink;
  return t;
}
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("run", &run); }
