#include <chrono>
#include <cstdio>
#define R12(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7) op(8) op(9) op(10) op(11)
#define DPZ(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define DPY(i) "vdpbf16ps %%ymm30, %%ymm31, %%ymm" #i "\n\t"
#define FMZ(i) "vfmadd231ps %%zmm30, %%zmm31, %%zmm" #i "\n\t"
#define UNP(i) "vpunpckldq %%zmm30, %%zmm" #i ", %%zmm" #i "\n\t"
#define SHF(i) "vshufi32x4 $0x44, %%zmm30, %%zmm" #i ", %%zmm" #i "\n\t"
#define MIX(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t" "vpunpckldq %%zmm30, %%zmm" #i "0, %%zmm" #i "0\n\t"
#define MXU(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t" "vpunpckldq %%zmm30, %%zmm2" #i ", %%zmm2" #i "\n\t"
#define MXS(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm" #i "\n\t" "vshufi32x4 $0x44, %%zmm30, %%zmm2" #i ", %%zmm2" #i "\n\t"
#define MX2(i) "vdpbf16ps %%zmm30, %%zmm31, %%zmm1" #i "\n\t" "vdpbf16ps %%zmm30, %%zmm31, %%zmm2" #i "\n\t" "vpunpckldq %%zmm30, %%zmm" #i ", %%zmm" #i "\n\t"
#define R8(op) op(0) op(1) op(2) op(3) op(4) op(5) op(6) op(7)
#define BENCH(name, body, per) { long n=100000000; auto t=std::chrono::steady_clock::now(); \
  asm volatile("vxorps %%zmm30,%%zmm30,%%zmm30\n\tvxorps %%zmm31,%%zmm31,%%zmm31\n\t1:\n\t" body "dec %0\n\tjnz 1b" : "+r"(n) :: "memory"); \
  double s=std::chrono::duration<double>(std::chrono::steady_clock::now()-t).count(); printf("%-10s %.3f ns each = %.2f cycles at 3.67 GHz\n", name, s/(1e8*per)*1e9, s/(1e8*per)*3.67e9); }
int main(){
  BENCH("dpbf16 z", R12(DPZ), 12)
  BENCH("dpbf16 y", R12(DPY), 12)
  BENCH("fma z", R12(FMZ), 12)
  BENCH("unpck z", R12(UNP), 12)
  BENCH("shufi z", R12(SHF), 12)
  BENCH("dp+unpck", R8(MXU), 8)
  BENCH("dp+shufi", R8(MXS), 8)
  BENCH("2dp+unpck", R8(MX2), 8)
}
