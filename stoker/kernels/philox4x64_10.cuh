// Philox4x64-10 (Salmon et al., 2011; Random123's constants), the element-wise generator of
// stoker/operators/filters/element_rng.py, for kernels that draw on the device what the CPU draws
// with NumPy's Philox: block b of draw d under a sample's key (k0, k1) is the cipher of the counter
// (b + 1, d, 0, 0) (NumPy increments its counter before each block), and word j of a draw is word
// j % 4 of block j / 4. Included by kernels/distortions.cu (jitter); a kernel that includes it is
// loaded with element_rng.kernel_options(), so that NVRTC finds this file and CuPy's disk cache
// (keyed by the including source and the options, not by included files) sees its changes.

#ifndef STOKER_PHILOX4X64_10_CUH
#define STOKER_PHILOX4X64_10_CUH

__device__ __forceinline__ void philox4x64_10(unsigned long long c[4], unsigned long long k0,
                                              unsigned long long k1) {
  const unsigned long long m0 = 0xD2E7470EE14C6C93ull, m1 = 0xCA5A826395121157ull;
  for (int r = 0; r < 10; ++r) {
    if (r) {
      k0 += 0x9E3779B97F4A7C15ull;
      k1 += 0xBB67AE8584CAA73Bull;
    }
    const unsigned long long hi0 = __umul64hi(m0, c[0]), lo0 = m0 * c[0];
    const unsigned long long hi1 = __umul64hi(m1, c[2]), lo1 = m1 * c[2];
    const unsigned long long n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
}

// Word j of draw `draw` under the key (k0, k1): what element_rng.words(key, count, draw)[j] is.
__device__ __forceinline__ unsigned long long philox_word(unsigned long long j, unsigned long long draw,
                                                          unsigned long long k0, unsigned long long k1) {
  unsigned long long c[4] = {(j >> 2) + 1ull, draw, 0ull, 0ull};
  philox4x64_10(c, k0, k1);
  // a select, not c[j & 3]: a dynamic index would put c in local memory
  return (j & 2) ? ((j & 1) ? c[3] : c[2]) : ((j & 1) ? c[1] : c[0]);
}

// An integer in [0, span) from a 32-bit value v (span at most 2^32): floor(v * span / 2^32), as
// element_rng.below32 computes it (exact in 64 bits; biased by at most span / 2^32).
__device__ __forceinline__ unsigned long long below32(unsigned long long v, unsigned long long span) {
  return (v * span) >> 32;
}

#endif  // STOKER_PHILOX4X64_10_CUH
