// The distribution a level samples from, per row of logits: probs_rows(logits [N, V] fp32) -> [N, V] fp32.
//
// Pure-torch twin (and the definition): runtime.sampling.probs_from_logits; tests/test_sampling.py
// checks both agree. Used for top_k = 0 on the CPU, where the torch path makes 5-15 passes over
// V = 49,152 per row (softmax, a top-512 selection, comparisons, counts, a renormalization) and,
// in the decode loop with cold caches, costs 0.3-1.1 ms a row: more than a middle-level pass
// costs per token at T = 0.6 once every level's rows are counted.
//
// * temperature 0: one-hot at the first index of the row's maximum (torch.argmax; a NaN counts
//   as the maximum, as there).
// * temperature t > 0: p = softmax(logits / t), shifted by the row maximum first (so logits near
//   the float limit stay finite); then, if top_p < 1, the nucleus: in descending order of p (ties
//   by index), a token is kept iff the mass strictly before it is < top_p; kept mass renormalized.
//   The nucleus is found by a radix select instead of a sort: one pass builds a histogram of the
//   top 12 bits of each p (its exponent and 3 mantissa bits; floats >= 0 order like their bits)
//   holding the mass per bucket, the buckets are walked from the top until the mass reaches
//   top_p, and only the elements of that one bucket are sorted. Masses are summed in fp64. Only
//   the candidates go into the histogram: the entries that can matter to the walk (nucleus()),
//   gathered by one vector pass; then one vector pass zeroes the rest and normalizes. Per row of
//   49,152 at T = 0.6, top_p = 0.9: 52 us with every entry in the histogram, 22 us this way.
// Rows are independent: at::parallel_for over rows.
#include "torch_api.h"
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <utility>
#include <vector>

#include "simd.h"   // TF_AVX512 and exp2_ps

namespace {

constexpr int BUCKET_BITS = 12;                 // sign (0), 8 exponent bits, 3 mantissa bits
constexpr int BUCKETS = 1 << BUCKET_BITS;
constexpr double LOG2E = 1.4426950408889634;

inline uint32_t bits(float x) { uint32_t u; std::memcpy(&u, &x, 4); return u; }

// First index of the row's maximum; a NaN (the first one) wins, as in torch.argmax.
int64_t argmax_row(const float* x, int64_t V) {
  int64_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
  bool nan = false;
#if TF_AVX512
  __m512 mv = _mm512_set1_ps(m);
  __mmask16 unordered = 0;
  for (; i + 16 <= V; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    unordered |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    mv = _mm512_max_ps(mv, v);
  }
  m = _mm512_reduce_max_ps(mv);
  nan = unordered != 0;
#endif
  for (int64_t j = i; j < V; ++j) nan |= std::isnan(x[j]), m = std::max(m, x[j]);
  for (int64_t j = 0; j < V; ++j)
    if (nan ? std::isnan(x[j]) : x[j] == m) return j;
  return 0;   // a row of -inf only: torch.argmax gives 0 too
}

float max_row(const float* x, int64_t V) {
  int64_t i = 0;
  float m = -std::numeric_limits<float>::infinity();
#if TF_AVX512
  __m512 mv = _mm512_set1_ps(m);
  for (; i + 16 <= V; i += 16) mv = _mm512_max_ps(mv, _mm512_loadu_ps(x + i));
  m = _mm512_reduce_max_ps(mv);
#endif
  for (; i < V; ++i) m = std::max(m, x[i]);
  return m;
}

// e[i] = exp((x[i] - m) / t) (stored unless e is null), returns sum(e) in fp64.
double exp_row(const float* x, float* e, int64_t V, float m, double t) {
  const float c = (float)(LOG2E / t);
  double sum = 0.0;
  int64_t i = 0;
#if TF_AVX512
  const __m512 cv = _mm512_set1_ps(c), mv = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (; i + 16 <= V; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);   // -inf (a pruned head's tokens): exactly 0
    __m512 y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ),
                                   exp2_ps(_mm512_mul_ps(_mm512_sub_ps(v, mv), cv)));
    if (e) _mm512_storeu_ps(e + i, y);
    acc = _mm512_add_ps(acc, y);
    if ((i & 4095) == 4080) {  // every 4,096 entries: into fp64 before fp32 loses the small ones
      sum += _mm512_reduce_add_ps(acc);
      acc = _mm512_setzero_ps();
    }
  }
  sum += _mm512_reduce_add_ps(acc);
#endif
  for (; i < V; ++i) {
    const float y = x[i] == -INFINITY ? 0.f : std::exp2((x[i] - m) * c);
    if (e) e[i] = y;
    sum += y;
  }
  return sum;
}

inline int bucket(float x) { return (int)(bits(x) >> (32 - BUCKET_BITS)); }

// Where the nucleus ends: the boundary bucket and, in it, the last kept element (cut, cut_index);
// boundary -1 keeps the whole row. kept = the nucleus's mass.
struct Cut {
  int boundary = -1;
  float cut = 0.f;
  int64_t cut_index = -1;
  double kept = 0.0;
};

// Scratch of one thread: the candidates (value, index) and the per-bucket masses.
struct NucleusScratch {
  std::vector<float> value;
  std::vector<int32_t> index;
  std::vector<double> mass;
  std::vector<std::pair<float, int64_t>> edge;
};

// The entries of e in buckets >= low, in index order, into s.value / s.index; returns how many.
int64_t candidates(const float* e, int64_t V, int low, NucleusScratch& s) {
  s.value.resize(V + 16);   // + 16: a whole vector is stored after each compress
  s.index.resize(V + 16);
  float* value = s.value.data();
  int32_t* index = s.index.data();
  int64_t n = 0, i = 0;
#if TF_AVX512
  const __m512i lowv = _mm512_set1_epi32(low), step = _mm512_set1_epi32(16);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= V; i += 16, idx = _mm512_add_epi32(idx, step)) {
    const __m512 x = _mm512_loadu_ps(e + i);
    const __mmask16 m = _mm512_cmpge_epu32_mask(_mm512_srli_epi32(_mm512_castps_si512(x), 32 - BUCKET_BITS), lowv);
    if (m) {   // compress in a register, store whole (a compress straight to memory is slow on Zen 4)
      _mm512_storeu_ps(value + n, _mm512_maskz_compress_ps(m, x));
      _mm512_storeu_si512(index + n, _mm512_maskz_compress_epi32(m, idx));
      n += __builtin_popcount(m);
    }
  }
#endif
  for (; i < V; ++i)
    if (bucket(e[i]) >= low) value[n] = e[i], index[n++] = (int32_t)i;
  return n;
}

// The nucleus of p (unnormalized weights e with total `total`) from the entries in buckets >= low;
// boundary -1 when the walk does not reach top_p among them.
Cut walk(const float* e, int64_t V, double total, double top_p, int low, NucleusScratch& s) {
  const double target = top_p * total;   // "mass before < top_p" on p = e / total
  const int64_t n = candidates(e, V, low, s);
  const float* value = s.value.data();
  const int32_t* index = s.index.data();
  s.mass.assign(BUCKETS, 0.0);
  for (int64_t k = 0; k < n; ++k) s.mass[bucket(value[k])] += value[k];
  Cut c;
  double before = 0.0;
  for (int b = BUCKETS - 1; b >= low; --b) {
    if (before + s.mass[b] >= target) { c.boundary = b; break; }
    before += s.mass[b];
  }
  if (c.boundary < 0) return c;
  s.edge.clear();
  for (int64_t k = 0; k < n; ++k)
    if (bucket(value[k]) == c.boundary) s.edge.emplace_back(value[k], index[k]);
  std::sort(s.edge.begin(), s.edge.end(), [](const auto& a, const auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  // the bucket's elements, in order, while the mass before them is < top_p; the first one always
  // qualifies (before < target by the walk above)
  c.cut = std::numeric_limits<float>::infinity();
  c.kept = before;
  for (const auto& [value, index] : s.edge) {
    if (c.kept >= target) break;
    c.kept += value;
    c.cut = value, c.cut_index = index;
  }
  return c;
}

// Where the nucleus of p (unnormalized weights e with total `total`) ends. The walk runs over the
// candidates: the entries in buckets at or above that of tau = (1 - top_p) * total / (2 V). All
// the others hold less than V * tau = (1 - top_p) * total / 2 together, so the walk from the top
// reaches top_p inside the candidates' buckets, and those buckets are complete: the boundary, the
// mass before it and its elements (summed in the same index order) are those a histogram of every
// entry gives. A row at T = 0.6 has a few hundred candidates of 49,152. Should rounding stop the
// walk short (top_p within ~1e-7 of 1: `total` sums fp32 partial sums, the buckets fp64 ones), it
// runs again over every entry, as the full histogram did (and keeps the row if that stops too).
Cut nucleus(const float* e, int64_t V, double total, double top_p, NucleusScratch& s) {
  const int low = bucket((float)((1.0 - top_p) * total / (2.0 * (double)V)));
  Cut c = walk(e, V, total, top_p, low, s);
  if (c.boundary < 0 && low > 0) c = walk(e, V, total, top_p, 0, s);
  if (c.boundary < 0) c.kept = total;   // rounding left the whole row below top_p: keep everything
  return c;
}

// e[i] = e[i] * inv where the nucleus keeps i (buckets above the boundary, and in it the elements
// up to (cut, cut_index) in descending order, ties by index), else 0.
void keep_scaled(float* e, int64_t V, const Cut& c, float inv) {
  int64_t i = 0;
#if TF_AVX512
  const __m512 invv = _mm512_set1_ps(inv), cutv = _mm512_set1_ps(c.cut);
  const __m512i boundary = _mm512_set1_epi32(c.boundary), last = _mm512_set1_epi32((int32_t)c.cut_index),
                step = _mm512_set1_epi32(16);
  __m512i idx = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= V; i += 16, idx = _mm512_add_epi32(idx, step)) {
    const __m512 x = _mm512_loadu_ps(e + i);
    const __m512i b = _mm512_srli_epi32(_mm512_castps_si512(x), 32 - BUCKET_BITS);
    const __mmask16 in_edge = _mm512_cmpeq_epi32_mask(b, boundary);
    const __mmask16 keep = _mm512_cmpgt_epi32_mask(b, boundary) |
                           (in_edge & (_mm512_cmp_ps_mask(x, cutv, _CMP_GT_OQ) |
                                       (_mm512_cmp_ps_mask(x, cutv, _CMP_EQ_OQ) & _mm512_cmple_epi32_mask(idx, last))));
    _mm512_storeu_ps(e + i, _mm512_maskz_mul_ps(keep, x, invv));
  }
#endif
  for (; i < V; ++i) {
    const int b = bucket(e[i]);
    const bool keep = b > c.boundary || (b == c.boundary && (e[i] > c.cut || (e[i] == c.cut && i <= c.cut_index)));
    e[i] = keep ? e[i] * inv : 0.f;
  }
}

}  // namespace

// logits [N, V] fp32 -> probs [N, V] fp32 (see the header).
at::Tensor probs_rows(at::Tensor logits, double temperature, double top_p) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat, "probs_rows: logits [N, V] fp32 expected, got ",
              logits.sizes(), " ", logits.scalar_type());
  TORCH_CHECK(temperature >= 0 && top_p > 0 && top_p <= 1, "probs_rows: temperature ", temperature, " top_p ", top_p);
  logits = logits.contiguous();
  const int64_t N = logits.size(0), V = logits.size(1);
  auto out = at::empty_like(logits);   // every entry is written below
  if (V == 0) return out;
  const float* x = logits.data_ptr<float>();
  float* p = out.data_ptr<float>();
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    thread_local NucleusScratch scratch;   // grow-only, kept across calls
    for (int64_t n = begin; n < end; ++n) {
      const float* row = x + n * V;
      float* e = p + n * V;
      if (temperature == 0) {
        std::fill(e, e + V, 0.f);
        e[argmax_row(row, V)] = 1.f;
        continue;
      }
      const double total = exp_row(row, e, V, max_row(row, V), temperature);
      Cut c;   // boundary -1: keep every entry
      if (top_p < 1) c = nucleus(e, V, total, top_p, scratch);
      keep_scaled(e, V, c, (float)(1.0 / (c.boundary < 0 ? total : c.kept)));
    }
  });
  return out;
}

// The row reductions' input: logits [N, V > 0] fp32, contiguous (op names the caller in the error).
at::Tensor logit_rows(const at::Tensor& logits, const char* op) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.size(1) > 0,
              op, ": logits [N, V > 0] fp32 expected, got ", logits.sizes(), " ", logits.scalar_type());
  return logits.contiguous();
}

// logits [N, V] fp32 -> [N] fp32: each row's largest probability under softmax(logits), 1 / sum(exp(x - max))
// (runtime.sampling.top_probability; its torch twin is softmax(...).amax(-1)). One read of the row and
// no [N, V] written: a greedy level's confidence in its drafts (speculate.Extension), which a
// softmax written out and read back cost ~0.1 ms a row in the decode loop (docs/BENCHMARKS.md, round 50).
at::Tensor top_probability_rows(at::Tensor logits) {
  logits = logit_rows(logits, "top_probability_rows");
  const int64_t N = logits.size(0), V = logits.size(1);
  auto out = at::empty({N}, logits.options());
  const float* x = logits.data_ptr<float>();
  float* top = out.data_ptr<float>();
  at::parallel_for(0, N, 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) top[n] = (float)(1.0 / exp_row(x + n * V, nullptr, V, max_row(x + n * V, V), 1.0));
  });
  return out;
}

// logits [N, V] fp32 -> [N] int64: each row's first index of its maximum (a NaN wins), the token a
// greedy level draws (runtime.sampling.greedy_tokens; its torch twin is argmax(-1)). One read of the
// row, where the one-hot distribution wrote [N, V] and the acceptance rule read it back.
at::Tensor argmax_rows(at::Tensor logits) {
  logits = logit_rows(logits, "argmax_rows");
  const int64_t N = logits.size(0), V = logits.size(1);
  auto out = at::empty({N}, logits.options().dtype(at::kLong));
  const float* x = logits.data_ptr<float>();
  int64_t* best = out.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n) best[n] = argmax_row(x + n * V, V);
  return out;
}

// Sum in fp64 of the weights w[i] of [lo, hi): w = max(0, p - q) when q is given, else p.
inline double weight_sum(const float* p, const float* q, int64_t lo, int64_t hi) {
  double sum = 0.0;
  int64_t i = lo;
#if TF_AVX512
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  const __m512 zero = _mm512_setzero_ps();
  for (; i + 16 <= hi; i += 16) {
    __m512 w = _mm512_loadu_ps(p + i);
    if (q) w = _mm512_max_ps(_mm512_sub_ps(w, _mm512_loadu_ps(q + i)), zero);
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(w)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(w), 1))));
  }
  sum = _mm512_reduce_add_pd(_mm512_add_pd(a0, a1));
#endif
  for (; i < hi; ++i) sum += q ? std::max(p[i] - q[i], 0.f) : p[i];
  return sum;
}

// One token of row p (and q) by inverse CDF at uniform u, from the weights w = max(0, p - q) (w = p
// where that has no mass, or when q is absent): the first index at which the running fp64 sum of w exceeds
// min(u * mass, the largest double below mass). runtime.sampling's torch path computes the same
// with a sequential cumsum; here blocks of 256 are summed in vector lanes and only the block where
// the sum crosses is walked one by one, so the sums differ in their last bits and a token can
// differ only where u * mass falls within that rounding of a boundary (probability ~1e-13).
// sample_excess draws one per row; accept_rows one per round.
int64_t draw_row(const float* pr, const float* qr, int64_t V, double u) {
  constexpr int64_t BLOCK = 256;
  double mass = weight_sum(pr, qr, 0, V);
  if (qr && mass == 0.0) {   // p == q: the residual is undefined, p is what the verifier wants
    qr = nullptr;
    mass = weight_sum(pr, nullptr, 0, V);
  }
  const double target = std::min(u * mass, std::nextafter(mass, 0.0));
  double cum = 0.0;
  int64_t lo = 0;
  for (; lo < V; lo += BLOCK) {   // the block where the running sum passes the target
    const double block = weight_sum(pr, qr, lo, std::min(lo + BLOCK, V));
    if (cum + block > target) break;
    cum += block;
  }
  int64_t last = -1;   // the last index of positive weight seen (if rounding never passes the target)
  for (int64_t i = lo; i < V; ++i) {   // one by one from that block (on, should rounding differ)
    const float w = qr ? std::max(pr[i] - qr[i], 0.f) : pr[i];
    if (w > 0) last = i;
    cum += w;
    if (cum > target) return i;
  }
  return last >= 0 ? last : V - 1;
}

at::Tensor sample_excess(at::Tensor p, c10::optional<at::Tensor> q, at::Tensor u) {
  TORCH_CHECK(p.dim() == 2 && p.scalar_type() == at::kFloat, "sample_excess: p [N, V] fp32 expected, got ", p.sizes());
  TORCH_CHECK(!q.has_value() || (q->sizes() == p.sizes() && q->scalar_type() == at::kFloat),
              "sample_excess: q must match p [N, V] fp32");
  TORCH_CHECK(u.dim() == 1 && u.size(0) == p.size(0) && u.scalar_type() == at::kDouble, "sample_excess: u [N] fp64 expected");
  p = p.contiguous();
  at::Tensor qc = q.has_value() ? q->contiguous() : at::Tensor();
  u = u.contiguous();
  const int64_t N = p.size(0), V = p.size(1);
  auto out = at::zeros({N}, p.options().dtype(at::kLong));
  const double* up = u.data_ptr<double>();
  int64_t* op = out.data_ptr<int64_t>();
  for (int64_t n = 0; n < N; ++n)
    op[n] = draw_row(p.data_ptr<float>() + n * V, qc.defined() ? qc.data_ptr<float>() + n * V : nullptr, V, up[n]);
  return out;
}

// runtime.accept.accept in one call, for fp32 CPU rows (the definition and its documentation are
// there): draft x [B, K] int64, q [B, K, V], p [B, K + 1, V], u [B, K] fp32 (the acceptance
// tests), u_next [B] fp64 (the recovered or bonus draw) -> (accepted count [B], next token [B]).
// The same arithmetic: x_i is accepted iff u_i * q_i(x_i) < p_i(x_i) in fp32, up to the first
// rejection; the next token is draw_row of (p_n, q_n) after a rejection at n, of p_K after none,
// as sample_excess draws it. Given the same uniforms, the same tokens as the torch ops (~15 of
// them, ~65 us a round at V = 49,152; this is ~15 us).
std::tuple<at::Tensor, at::Tensor> accept_rows(at::Tensor x, at::Tensor q, at::Tensor p,
                                                     at::Tensor u, at::Tensor u_next) {
  TORCH_CHECK(x.dim() == 2 && x.scalar_type() == at::kLong, "accept_rows: draft tokens [B, K] int64 expected, got ",
              x.sizes(), " ", x.scalar_type());
  const int64_t B = x.size(0), K = x.size(1);
  TORCH_CHECK(K >= 1 && p.dim() == 3 && p.size(0) == B && p.size(1) == K + 1 && p.scalar_type() == at::kFloat,
              "accept_rows: target probs [", B, ", ", K + 1, ", V] fp32 expected, got ", p.sizes(), " ", p.scalar_type());
  const int64_t V = p.size(2);
  TORCH_CHECK(q.dim() == 3 && q.size(0) == B && q.size(1) == K && q.size(2) == V && q.scalar_type() == at::kFloat,
              "accept_rows: draft probs [", B, ", ", K, ", ", V, "] fp32 expected, got ", q.sizes(), " ", q.scalar_type());
  TORCH_CHECK(u.sizes() == x.sizes() && u.scalar_type() == at::kFloat && u_next.dim() == 1 && u_next.size(0) == B &&
              u_next.scalar_type() == at::kDouble, "accept_rows: u [B, K] fp32 and u_next [B] fp64 expected");
  x = x.contiguous(), q = q.contiguous(), p = p.contiguous(), u = u.contiguous(), u_next = u_next.contiguous();
  const int64_t* xp = x.data_ptr<int64_t>();
  const float *qp = q.data_ptr<float>(), *pp = p.data_ptr<float>(), *upf = u.data_ptr<float>();
  const double* un = u_next.data_ptr<double>();
  auto num = at::empty({B}, x.options()), next = at::empty({B}, x.options());
  int64_t *np = num.data_ptr<int64_t>(), *op = next.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    int64_t n = 0;
    for (; n < K; ++n) {
      const int64_t t = xp[b * K + n];
      TORCH_CHECK(t >= 0 && t < V, "accept_rows: draft token ", t, " outside the vocabulary [0, ", V, ")");
      const float pt = pp[(b * (K + 1) + n) * V + t], qt = qp[(b * K + n) * V + t];
      if (!(upf[b * K + n] * qt < pt)) break;
    }
    np[b] = n;
    op[b] = draw_row(pp + (b * (K + 1) + n) * V, n < K ? qp + (b * K + n) * V : nullptr, V, un[b]);
  }
  return {num, next};
}

bool has_avx512_bf16() { return TF_AVX512; }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("probs_rows", &probs_rows, "logits [N, V] fp32 -> the sampled distribution [N, V] (greedy one-hot, or "
        "softmax(logits / t) on the top-p nucleus)", py::arg("logits"), py::arg("temperature"), py::arg("top_p"));
  m.def("sample_excess", &sample_excess, "one token per row from max(0, p - q) (p where that is empty, or q absent) "
        "by inverse CDF at u", py::arg("p"), py::arg("q"), py::arg("u"));
  m.def("accept_rows", &accept_rows, "runtime.accept.accept for fp32 CPU rows, given its uniforms: (accepted count, "
        "next token)", py::arg("draft_tokens"), py::arg("draft_probs"), py::arg("target_probs"), py::arg("u"),
        py::arg("u_next"));
  m.def("argmax_rows", &argmax_rows, "logits [N, V] fp32 -> [N] int64: each row's first index of its maximum "
        "(a NaN wins, as in torch.argmax)", py::arg("logits"));
  m.def("top_probability_rows", &top_probability_rows, "logits [N, V] fp32 -> [N]: each row's largest softmax "
        "probability", py::arg("logits"));
  m.def("has_avx512_bf16", &has_avx512_bf16, "whether the AVX-512 paths were compiled in");
}
