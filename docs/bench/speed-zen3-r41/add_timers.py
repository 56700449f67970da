# $VARDIR/tim_NAME.cpp from $VARDIR/NAME.cpp: rdtsc per-phase timers in run_item_avx2 (as round 38's timers.patch)
import sys
import os
d = os.environ.get("VARDIR", "/tmp/r41/var")
name = sys.argv[1]
s = open(f"{d}/{name}.cpp").read()
def ins(anchor, text, after=False):
    global s
    assert s.count(anchor) == 1, anchor
    s = s.replace(anchor, anchor + text if after else text + anchor)
ins("template <typename scalar_t>\nvoid run_item_avx2(", "#include <x86intrin.h>\nuint64_t g_tim[4];\n")
ins("  // scores, 8 keys at a time", "  uint64_t t_0 = __rdtsc();\n")
ins("  // keys a row may not see", "  uint64_t t_1 = __rdtsc();\n")
ins("  // P.V, a block of NB2 keys at a time", "  uint64_t t_2 = __rdtsc();\n")
ins("    for (int64_t i = 0; i < D; ++i) acc[r * D + widened_dim<scalar_t>(i)] = O[r * D + i];\n",
    "  uint64_t t_3 = __rdtsc();\n  __atomic_fetch_add(&g_tim[0], t_1 - t_0, __ATOMIC_RELAXED);\n  __atomic_fetch_add(&g_tim[1], t_2 - t_1, __ATOMIC_RELAXED);\n"
    "  __atomic_fetch_add(&g_tim[2], t_3 - t_2, __ATOMIC_RELAXED);\n  __atomic_fetch_add(&g_tim[3], 1, __ATOMIC_RELAXED);\n", after=True)
ins("#endif\n\nbool has_avx2()", "std::vector<int64_t> timers(bool reset) { std::vector<int64_t> r(g_tim, g_tim + 4); if (reset) for (auto& x : g_tim) x = 0; return r; }\n")
ins("  m.attr(\"decode_rows\") = ROWS_SPLIT;", "\n  m.def(\"timers\", &timers);", after=True)
open(f"{d}/tim_{name}.cpp", "w").write(s)
