// A sorted top-KC list of (key, index) pairs held in one thread's registers: the running top-k of the search
// kernel's thread-list epilogue (MERGE 3 and 4, see topk.cuh). Every index into the arrays is a compile-time
// constant (unrolled loops), so they stay in registers; k (<= KC) is a run-time value.
//
// Order: a pair is better when its key is larger, or equal with a smaller index (the family's tie rule). Empty
// real slots hold (-inf, INT_MAX), which every real candidate beats (indices are below INT_MAX: the launcher
// keeps index_base + n <= INT_MAX); NaN keys never enter.
#pragma once

#include "similarity/ptx.cuh"

namespace tunelab {
namespace sim {

__device__ __forceinline__ bool better(float ak, int ai, float bk, int bi) {
  return ak > bk || (ak == bk && ai < bi);
}

template <int KC>
struct ThreadTopk {
  static_assert(KC >= 1 && KC <= 32, "1..32 entries");
  // Layout for a run-time k: entries 0 .. KC-k-1 are fixed sentinels (+inf, -1), better than any candidate, so
  // that the k real entries, best first, are entries KC-k .. KC-1 and the bar is always entry KC - 1. (Reading
  // entry k - 1 instead lets the compiler turn the unrolled select into an indexed load, which moves the arrays
  // from registers to local memory.)
  float key[KC];
  int idx[KC];

  __device__ __forceinline__ void init(int k) {
#pragma unroll
    for (int j = 0; j < KC; ++j) {
      const bool sentinel = j < KC - k;
      key[j] = sentinel ? f32_inf() : -f32_inf();
      idx[j] = sentinel ? -1 : 0x7fffffff;
    }
  }

  // Whether (xk, xi) would enter: it beats the k-th entry (NaN keys never do).
  __device__ __forceinline__ bool admits(float xk, int xi) const { return better(xk, xi, key[KC - 1], idx[KC - 1]); }
  __device__ __forceinline__ float bar_key() const { return key[KC - 1]; }

  // Inserts (xk, xi) at its rank (the caller has checked admits()); the last entry drops out.
  __device__ __forceinline__ void insert(float xk, int xi) {
    bool b[KC];  // b[j]: the new pair beats entry j (a prefix of false, then true)
#pragma unroll
    for (int j = 0; j < KC; ++j) b[j] = better(xk, xi, key[j], idx[j]);
#pragma unroll
    for (int j = KC - 1; j > 0; --j) {  // downwards: entry j - 1 is read before it is overwritten
      key[j] = b[j - 1] ? key[j - 1] : (b[j] ? xk : key[j]);
      idx[j] = b[j - 1] ? idx[j - 1] : (b[j] ? xi : idx[j]);
    }
    if (b[0]) {
      key[0] = xk;
      idx[0] = xi;
    }
  }

  // Entry `rank` (0 = best) of the k real ones is entry KC - k + rank: callers loop over j = 0..KC-1 with
  // compile-time j and take j >= KC - k.

  // ---- plain layout, for merging lists across lanes (KC a power of two): after to_plain() the real entries are
  // entries 0 .. k-1, best first, and the rest hold the worst pair (-inf, INT_MAX). admits()/insert() no longer
  // apply.

  // Sorts a bitonic sequence best first: log2(KC) rounds of compare-exchange at halving distances.
  __device__ __forceinline__ void bitonic_clean() {
    static_assert((KC & (KC - 1)) == 0, "bitonic networks need a power-of-two capacity");
#pragma unroll
    for (int stride = KC / 2; stride > 0; stride >>= 1) {
#pragma unroll
      for (int j = 0; j < KC; ++j) {
        if ((j & stride) == 0) {
          const int o = j + stride;
          if (better(key[o], idx[o], key[j], idx[j])) {
            const float tk = key[j];
            const int ti = idx[j];
            key[j] = key[o];
            idx[j] = idx[o];
            key[o] = tk;
            idx[o] = ti;
          }
        }
      }
    }
  }

  // Sentinels -> worst pairs: the list becomes a rotation of the plain layout (worst pairs, then the real entries
  // descending), which is bitonic, so one bitonic_clean() sorts it.
  __device__ __forceinline__ void to_plain() {
#pragma unroll
    for (int j = 0; j < KC; ++j) {
      if (idx[j] == -1) {  // a sentinel (real indices are >= 0)
        key[j] = -f32_inf();
        idx[j] = 0x7fffffff;
      }
    }
    bitonic_clean();
  }

  // Plain layout: the best KC of this lane's list and that of lane (lane ^ mask), in both lanes (warp-collective).
  // Entry j against the partner's entry KC-1-j keeps the better one: a bitonic sequence holding the best KC of
  // the two lists, which bitonic_clean() sorts.
  __device__ __forceinline__ void merge_lane(int mask) {
    float ok[KC];
    int oi[KC];
#pragma unroll
    for (int j = 0; j < KC; ++j) {
      ok[j] = shfl_xor_f(key[KC - 1 - j], mask);
      oi[j] = static_cast<int>(shfl_xor_u(static_cast<unsigned>(idx[KC - 1 - j]), mask));
    }
#pragma unroll
    for (int j = 0; j < KC; ++j) {
      if (better(ok[j], oi[j], key[j], idx[j])) {
        key[j] = ok[j];
        idx[j] = oi[j];
      }
    }
    bitonic_clean();
  }
};

}  // namespace sim
}  // namespace tunelab
