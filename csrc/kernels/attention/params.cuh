// Kernel argument block of the attention forward family. Plain data, no CUDA headers: the same
// definition is compiled by NVRTC (kernel side) and by the host C++ launcher (which packs it), so the
// byte layout cannot drift between the two.
#pragma once

namespace tunelab {

struct AttentionParams {
  const void* q;  // (B, H, Sq, D) addressed through the strides below; last dim contiguous
  const void* k;  // (B, H, Sk, D)
  const void* v;  // (B, H, Sk, D)
  void* o;        // (B, H, Sq, D), same element type as q
  float* lse;     // (B, H, Sq) contiguous fp32, natural-log logsumexp of the scaled scores; nullptr = skip

  // Strides in elements (not bytes).
  long long q_batch_stride, q_head_stride, q_seq_stride;
  long long k_batch_stride, k_head_stride, k_seq_stride;
  long long v_batch_stride, v_head_stride, v_seq_stride;
  long long o_batch_stride, o_head_stride, o_seq_stride;

  int batch, heads, seqlen_q, seqlen_k;
  // Causal kernels only: query i sees key j iff j <= i + causal_offset. Sk - Sq aligns the mask to the
  // bottom-right corner (FlashAttention-2, torch.nn.attention.bias.causal_lower_right); 0 aligns it to
  // the top-left (what SDPA's is_causal=True does).
  int causal_offset;
  float scale_log2;  // softmax scale * log2(e): the kernel works in base 2 (exp2 on the SFU)
};

static_assert(sizeof(AttentionParams) == 160, "AttentionParams layout changed: update the launcher");

}  // namespace tunelab
