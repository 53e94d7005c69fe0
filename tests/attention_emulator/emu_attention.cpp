// Runs the real attention kernel source (csrc/kernels/attention/fwd.cuh) on the CPU emulator and
// compares it with a float64 reference.
//
// Build: g++ -std=c++17 -O1 -I shim -I ../emulator/shim -I ../emulator -I . -I <repo>/csrc/kernels
//        -DTUNELAB_EMU_TRAITS=<12 traits args> emu_attention.cpp ../emulator/emu_runtime.cpp
// Run:   ./a.out B H Sq Sk layout(0 = BHSD, 1 = BSHD) causal_align(0 = bottom-right, 1 = top-left)
//        want_lse seed land_late
// Prints one line: "RESULT ok=<0|1> max_err=... lse_err=... races=... poisoned=... oob=... unwritten=..."
#include "emu_runtime.h"
#include "attention/fwd.cuh"

#include <random>

namespace tunelab {
__attribute__((aligned(128))) unsigned char tunelab_attention_smem[emu::kSmemCapacity];
}

using Tr = tunelab::AttentionTraits<TUNELAB_EMU_TRAITS>;
using tunelab::emu_detail::from_float;
using tunelab::emu_detail::to_float;

struct Tensor {
  std::vector<uint16_t> data;
  long long sb, sh, ss;  // element strides
  uint16_t& at(int b, int h, int s, int d) { return data[b * sb + h * sh + s * ss + d]; }
};

// layout 0: (B, H, S, D) contiguous; 1: (B, S, H, D). Rows get `pad` extra elements (gaps the kernel
// must neither read as data nor write).
static Tensor make(int B, int H, int S, int D, int layout, int pad) {
  Tensor t;
  if (layout == 0) {
    t.ss = D + pad;
    t.sh = S * t.ss;
    t.sb = H * t.sh;
  } else {
    t.sh = D + pad;
    t.ss = H * t.sh;
    t.sb = S * t.ss;
  }
  t.data.assign(B * t.sb, 0xffff);
  return t;
}

int main(int argc, char** argv) {
  if (argc < 10) {
    std::fprintf(stderr, "usage: %s B H Sq Sk layout causal_align want_lse seed land_late\n", argv[0]);
    return 2;
  }
  const int B = std::atoi(argv[1]), H = std::atoi(argv[2]), Sq = std::atoi(argv[3]), Sk = std::atoi(argv[4]);
  const int layout = std::atoi(argv[5]), align = std::atoi(argv[6]), want_lse = std::atoi(argv[7]);
  const unsigned seed = static_cast<unsigned>(std::atoi(argv[8]));
  emu::land_late = std::atoi(argv[9]) != 0;
  emu::smem_buffer = tunelab::tunelab_attention_smem;
  constexpr int D = Tr::kHeadDim, DT = Tr::kDtype;
  const bool causal = Tr::kIsCausal;

  Tensor q = make(B, H, Sq, D, layout, 8), k = make(B, H, Sk, D, layout, 0), v = make(B, H, Sk, D, layout, 16);
  Tensor o = make(B, H, Sq, D, layout, 8);
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      for (int s = 0; s < Sq; ++s)
        for (int d = 0; d < D; ++d) q.at(b, h, s, d) = from_float<DT>(nd(rng));
      for (int s = 0; s < Sk; ++s)
        for (int d = 0; d < D; ++d) {
          k.at(b, h, s, d) = from_float<DT>(nd(rng));
          v.at(b, h, s, d) = from_float<DT>(nd(rng));
        }
    }
  std::vector<float> lse(static_cast<size_t>(B) * H * Sq + 8, NAN);

  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  tunelab::AttentionParams p{};
  p.q = q.data.data();
  p.k = k.data.data();
  p.v = v.data.data();
  p.o = o.data.data();
  p.lse = want_lse ? lse.data() : nullptr;
  p.q_batch_stride = q.sb; p.q_head_stride = q.sh; p.q_seq_stride = q.ss;
  p.k_batch_stride = k.sb; p.k_head_stride = k.sh; p.k_seq_stride = k.ss;
  p.v_batch_stride = v.sb; p.v_head_stride = v.sh; p.v_seq_stride = v.ss;
  p.o_batch_stride = o.sb; p.o_head_stride = o.sh; p.o_seq_stride = o.ss;
  p.batch = B; p.heads = H; p.seqlen_q = Sq; p.seqlen_k = Sk;
  p.causal_offset = align == 0 ? Sk - Sq : 0;
  p.scale_log2 = scale * 1.4426950408889634f;

  emu::register_global(q.data.data(), q.data.size() * 2);
  emu::register_global(k.data.data(), k.data.size() * 2);
  emu::register_global(v.data.data(), v.data.size() * 2);

  const uint3_ grid{static_cast<unsigned>((Sq + Tr::kBlockM - 1) / Tr::kBlockM), static_cast<unsigned>(H), static_cast<unsigned>(B)};
  emu::launch(grid, Tr::kThreads, Tr::kSmemBytes, [&] { tunelab::attention_fwd<Tr>(p); });

  // reference in float64 on the rounded inputs
  double max_err = 0, max_lse_err = 0;
  long long unwritten = 0, bad = 0;
  const double atol = DT == 0 ? 2e-3 : 1.2e-2, rtol = DT == 0 ? 5e-3 : 1.2e-2;
  std::vector<double> sc(Sk), out(D);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < Sq; ++i) {
        double mx = -INFINITY;
        for (int j = 0; j < Sk; ++j) {
          const bool visible = !causal || j <= i + p.causal_offset;
          double s = 0;
          for (int d = 0; d < D; ++d) s += static_cast<double>(to_float<DT>(q.at(b, h, i, d))) * to_float<DT>(k.at(b, h, j, d));
          sc[j] = visible ? s * scale : -INFINITY;
          mx = std::max(mx, sc[j]);
        }
        double l = 0;
        for (int d = 0; d < D; ++d) out[d] = 0;
        if (mx != -INFINITY) {
          for (int j = 0; j < Sk; ++j) {
            const double w = std::exp(sc[j] - mx);
            l += w;
            if (w != 0)
              for (int d = 0; d < D; ++d) out[d] += w * to_float<DT>(v.at(b, h, j, d));
          }
          for (int d = 0; d < D; ++d) out[d] /= l;
        }
        for (int d = 0; d < D; ++d) {
          const uint16_t bits = o.at(b, h, i, d);
          const float got = to_float<DT>(bits);
          if (bits == 0xffff || std::isnan(got)) { ++unwritten; continue; }
          const double err = std::fabs(got - out[d]);
          max_err = std::max(max_err, err);
          if (err > atol + rtol * std::fabs(out[d])) ++bad;
        }
        if (want_lse) {
          const double ref_lse = mx == -INFINITY ? -INFINITY : mx + std::log(l);
          const float got = lse[(static_cast<size_t>(b) * H + h) * Sq + i];
          if (std::isinf(ref_lse)) {
            if (!(std::isinf(got) && got < 0)) ++bad;
          } else {
            const double e = std::fabs(got - ref_lse);
            max_lse_err = std::max(max_lse_err, e);
            if (!(e <= 1e-3 + 1e-4 * std::fabs(ref_lse))) ++bad;
          }
        }
      }
  // nothing outside the logical output (row padding) may be written; LSE past the end untouched
  long long stray = 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < Sq; ++i)
        for (int d = D; d < D + 8; ++d)
          if (o.data[b * o.sb + h * o.sh + i * o.ss + d] != 0xffff) ++stray;
  for (int e = 0; e < 8; ++e)
    if (!std::isnan(lse[static_cast<size_t>(B) * H * Sq + e])) ++stray;
  if (!want_lse)
    for (size_t e = 0; e < lse.size(); ++e)
      if (!std::isnan(lse[e])) ++stray;

  const bool ok = bad == 0 && unwritten == 0 && stray == 0 && emu::stats.races == 0 && emu::stats.oob == 0;
  std::printf("RESULT ok=%d max_err=%.3g lse_err=%.3g bad=%lld unwritten=%lld stray=%lld races=%lld oob=%lld smem=%d\n",
              ok ? 1 : 0, max_err, max_lse_err, bad, unwritten, stray, emu::stats.races, emu::stats.oob, Tr::kSmemBytes);
  return ok ? 0 : 1;
}
