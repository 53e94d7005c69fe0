// Tensor-core and shared-memory fragment helpers for sm_80+ (mma.sync, ldmatrix).
// Family-agnostic: operands are raw 32-bit registers holding two 16-bit values.
// No host or CUDA headers: NVRTC compiles these without <cuda_fp16.h> (which costs compile time);
// the 16-bit types are handled as bits and converted with PTX cvt.
#pragma once

namespace tunelab {

// Element type codes shared with the launchers: 0 = fp16, 1 = bf16.
enum : int { kFp16 = 0, kBf16 = 1 };

// D (16x8, fp32) += A (16x16, row) * B (16x8, col), fp32 accumulate.
// Fragment ownership (g = lane / 4, t = lane % 4):
//   a[0]: row g,   k 2t..2t+1      a[1]: row g+8, k 2t..2t+1
//   a[2]: row g,   k 2t+8..2t+9    a[3]: row g+8, k 2t+8..2t+9
//   b0:   k 2t..2t+1, col g        b1:   k 2t+8..2t+9, col g
//   c[0..1]: row g, cols 2t..2t+1  c[2..3]: row g+8, cols 2t..2t+1
// Not volatile: pure register math, so the compiler may schedule it freely.
template <int DTYPE>
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  if constexpr (DTYPE == kFp16) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(DTYPE == kBf16, "DTYPE must be 0 (fp16) or 1 (bf16)");
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// ldmatrix: lanes 8i..8i+7 give the row addresses (16 bytes each) of matrix i; register i of every lane
// receives matrix i's elements (row lane/4, cols 2*(lane%4)..+1), or with .trans the elements
// (rows 2*(lane%4)..+1, col lane/4). volatile + "memory": the same address is read again after a
// __syncthreads() once the buffer has been refilled, so the load must never be hoisted or merged.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr)
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x2(unsigned (&r)[2], unsigned smem_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smem_addr)
               : "memory");
}

// Two fp32 values -> one register of two 16-bit values (lo in bits 0..15), round to nearest even.
// This is the layout an A/B fragment register expects for (col, col+1).
template <int DTYPE>
__device__ __forceinline__ unsigned pack_float2(float lo, float hi) {
  unsigned r;
  if constexpr (DTYPE == kFp16) {
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  } else {
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
  }
  return r;
}

// Generic -> shared-window address, as the 32-bit operand ldmatrix/cp.async/ld.shared take.
__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

}  // namespace tunelab
