#include <chrono>
#include <cstdio>
#include <cstdint>
alignas(64) uint32_t buf[1024];
#define BENCH(name, body, per) { long n=100000000; const uint32_t* p=buf; auto t=std::chrono::steady_clock::now(); \
  asm volatile("vxorps %%zmm30,%%zmm30,%%zmm30\n\tvxorps %%zmm31,%%zmm31,%%zmm31\n\t1:\n\t" body "dec %0\n\tjnz 1b" : "+r"(n) : "r"(p) : "memory"); \
  double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t).count(); printf("%-28s %.2f cycles per iteration (3.67 GHz), %.2f per dot\n", name, s/1e8*3.67e9, s/1e8*3.67e9/per); }
// QK 6 rows: 4 K loads, per row: broadcast + 4 dots
#define QROW(r, a0,a1,a2,a3) "vpbroadcastd " #r "*4(%1), %%zmm28\n\t" "vdpbf16ps %%zmm24, %%zmm28, %%zmm" #a0 "\n\t" "vdpbf16ps %%zmm25, %%zmm28, %%zmm" #a1 "\n\t" "vdpbf16ps %%zmm26, %%zmm28, %%zmm" #a2 "\n\t" "vdpbf16ps %%zmm27, %%zmm28, %%zmm" #a3 "\n\t"
#define KLOAD "vmovdqu64 (%1), %%zmm24\n\t vmovdqu64 64(%1), %%zmm25\n\t vmovdqu64 128(%1), %%zmm26\n\t vmovdqu64 192(%1), %%zmm27\n\t"
#define QK6 KLOAD QROW(1,0,1,2,3) QROW(2,4,5,6,7) QROW(3,8,9,10,11) QROW(4,12,13,14,15) QROW(5,16,17,18,19) QROW(6,20,21,22,23)
#define EROW(r, a0,a1,a2,a3) "vdpbf16ps " #r "*4(%1)%{1to16%}, %%zmm24, %%zmm" #a0 "\n\t" "vdpbf16ps " #r "*4(%1)%{1to16%}, %%zmm25, %%zmm" #a1 "\n\t" "vdpbf16ps " #r "*4(%1)%{1to16%}, %%zmm26, %%zmm" #a2 "\n\t" "vdpbf16ps " #r "*4(%1)%{1to16%}, %%zmm27, %%zmm" #a3 "\n\t"
#define QK6E KLOAD EROW(1,0,1,2,3) EROW(2,4,5,6,7) EROW(3,8,9,10,11) EROW(4,12,13,14,15) EROW(5,16,17,18,19) EROW(6,20,21,22,23)
// dots only with K in regs
#define DROW(a0,a1,a2,a3) "vdpbf16ps %%zmm24, %%zmm30, %%zmm" #a0 "\n\t" "vdpbf16ps %%zmm25, %%zmm30, %%zmm" #a1 "\n\t" "vdpbf16ps %%zmm26, %%zmm30, %%zmm" #a2 "\n\t" "vdpbf16ps %%zmm27, %%zmm30, %%zmm" #a3 "\n\t"
#define D6 DROW(0,1,2,3) DROW(4,5,6,7) DROW(8,9,10,11) DROW(12,13,14,15) DROW(16,17,18,19) DROW(20,21,22,23)
// PV 9 rows x 2 accs: 2 V loads + 2 unpacks, 9 broadcasts, 18 dots
#define PROW(r, a0, a1) "vpbroadcastd " #r "*4(%1), %%zmm28\n\t" "vdpbf16ps %%zmm24, %%zmm28, %%zmm" #a0 "\n\t" "vdpbf16ps %%zmm25, %%zmm28, %%zmm" #a1 "\n\t"
#define PV9 "vmovdqu64 (%1), %%zmm26\n\t vmovdqu64 64(%1), %%zmm27\n\t vpunpcklwd %%zmm27, %%zmm26, %%zmm24\n\t vpunpckhwd %%zmm27, %%zmm26, %%zmm25\n\t" PROW(1,0,1) PROW(2,2,3) PROW(3,4,5) PROW(4,6,7) PROW(5,8,9) PROW(6,10,11) PROW(7,12,13) PROW(8,14,15) PROW(9,16,17)
int main(){
  BENCH("24 dots, regs only", D6, 24)
  BENCH("QK 6 rows (bcast reg)", QK6, 24)
  BENCH("QK 6 rows (embedded bcast)", QK6E, 24)
  BENCH("PV 9 rows NV=2", PV9, 18)
}
