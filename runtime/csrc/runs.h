// Work units [0, n) shared by threads with stealing (the attention kernel's items). Each thread
// owns a contiguous run of units (so its reads are one stream the prefetchers follow) and, when
// done, takes units from the back of another thread's run: a thread that a shared machine slows,
// or that gets less of the memory bandwidth, delays the region by at most a unit instead of by the
// difference of two static halves.
#pragma once

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <vector>

struct Runs {
  // per thread: (next, end) packed in one atomic word, each on its own cache line (a thread takes
  // its own units without moving the line that the other thread is taking from)
  struct alignas(64) Run { std::atomic<uint64_t> word; };
  std::vector<Run> runs;
  Runs(int64_t n, int threads) : runs(threads) {
    for (int i = 0; i < threads; ++i)
      runs[i].word.store(pack(n * i / threads, n * (i + 1) / threads), std::memory_order_relaxed);
  }
  static uint64_t pack(int64_t lo, int64_t hi) { return (uint64_t)lo << 32 | (uint64_t)hi; }
  // Units [lo, hi) for thread `me`: up to `most` from the front of its own run, else one from the
  // back of another's; false when every run is empty.
  bool take(int me, int64_t most, int64_t& first, int64_t& last) {
    const int n = (int)runs.size();
    for (int i = 0; i < n; ++i) {
      auto& run = runs[(me + i) % n].word;
      uint64_t cur = run.load(std::memory_order_relaxed);
      for (;;) {
        int64_t lo = (int64_t)(cur >> 32), hi = (int64_t)(cur & 0xFFFFFFFFu);
        if (lo >= hi) break;
        const int64_t k = i == 0 ? std::min(most, hi - lo) : 1;
        uint64_t want = i == 0 ? pack(lo + k, hi) : pack(lo, hi - 1);  // own: front; others: back
        if (run.compare_exchange_weak(cur, want, std::memory_order_relaxed)) {
          first = i == 0 ? lo : hi - 1, last = first + k;
          return true;
        }
      }
    }
    return false;
  }
  // The next unit for thread `me`, or -1 when every run is empty.
  int64_t next(int me) {
    int64_t first, last;
    return take(me, 1, first, last) ? first : -1;
  }
};

// f(first, last) for each range of units [0, n) that torch's threads take from their runs (up to
// `most` at a time from a thread's own run, single units stolen); each thread calls enter() before
// its first range and leave() after its last (the AMX linears configure their tiles there).
template <typename F, typename Enter, typename Leave>
void for_runs(int64_t n, int64_t most, F&& f, Enter&& enter, Leave&& leave) {
  if (n <= 0) return;
  const int threads = (int)std::min<int64_t>(n, at::get_num_threads());
  Runs runs(n, threads);
  _Pragma("omp parallel num_threads(threads)") {
    const int me = omp_get_thread_num();
    enter();
    for (int64_t first, last; runs.take(me, most, first, last);) f(first, last);
    leave();
  }
}

template <typename F>
void for_runs(int64_t n, int64_t most, F&& f) {
  for_runs(n, most, f, [] {}, [] {});
}
