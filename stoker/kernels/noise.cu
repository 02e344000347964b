// noise.gaussian and noise.salt_and_pepper, one launch per batch (grid: x over a sample's elements,
// y over the samples). The CUDA twin of stoker/operators/filters/element_rng.py and the CPU noise
// operators: block b of draw d is Philox4x64-10 of the counter (b + 1, d, 0, 0) under the sample's
// key, the words NumPy's Philox returns in order, and the words become values by the same steps.
// Every float operation whose rounding matters is an explicit __d*_rn / __f*_rn intrinsic, so the
// compiler cannot fuse a multiply and an add (NumPy never does); only log/cos/sin may differ from
// the CPU's in their last float64 bit.
//
// itab[s*ITAB + k]: 0 src ptr, 1 dst ptr, 2 elements, 3 k0, 4 k1 (the sample's key),
//                   5 channels sharing one draw, 6 elements after the channel axis
//                   (salt_and_pepper; 1 and 1 elsewhere)
// ftab[s*FTAB + k]: gaussian: 0 stddev, 1 mean (float32 values)
//                   salt_and_pepper: 0 salt threshold, 1 replace threshold (integers up to 2^32),
//                                    2 salt, 3 pepper (values of the sample's type)
// Samples are contiguous, row-major.

#define ITAB 8
#define FTAB 4

#include "philox4x64_10.cuh"  // philox4x64_10: Random123's constants, NumPy's counter order

// the 4 words of block b (draw 0) of the sample whose table row is it
__device__ __forceinline__ void block_words(const long long* it, long long b, unsigned long long w[4]) {
  w[0] = (unsigned long long)b + 1ull;
  w[1] = 0ull;
  w[2] = 0ull;
  w[3] = 0ull;
  philox4x64_10(w, (unsigned long long)it[3], (unsigned long long)it[4]);
}

// ---- float32 result to the sample's type: integers round half up and saturate -----------------

template <typename T> struct IntRange;
template <> struct IntRange<unsigned char> { static constexpr float lo = 0.0f, hi = 255.0f; };
template <> struct IntRange<signed char> { static constexpr float lo = -128.0f, hi = 127.0f; };
template <> struct IntRange<unsigned short> { static constexpr float lo = 0.0f, hi = 65535.0f; };
template <> struct IntRange<short> { static constexpr float lo = -32768.0f, hi = 32767.0f; };

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  const float r = floorf(__fadd_rn(v, 0.5f));
  return (T)fminf(fmaxf(r, IntRange<T>::lo), IntRange<T>::hi);
}
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_float<double>(float v) { return (double)v; }

// ---- the operators -------------------------------------------------------------------------------

// One thread per block of 4 elements: words 2h and 2h+1 give elements 4b+2h (cosine) and 4b+2h+1
// (sine), as element_rng.normals pairs them.
template <typename T>
__device__ void gaussian_impl(const long long* itab, const double* ftab) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const double* ft = ftab + (long long)blockIdx.y * FTAB;
  const long long b = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const long long n = it[2];
  if (4 * b >= n) return;
  const T* src = (const T*)it[0];
  T* dst = (T*)it[1];
  const float stddev = (float)ft[0], mean = (float)ft[1];
  unsigned long long w[4];
  block_words(it, b, w);
  for (int h = 0; h < 2; ++h) {
    // (2m + 1) 2^-53 from the top 52 bits m: exact and never 0; the angle m' 2^-53 exact, then 2 pi
    const double u1 = (double)(((w[2 * h] >> 12) << 1) | 1ull) * 1.1102230246251565e-16;
    const double angle = __dmul_rn((double)(w[2 * h + 1] >> 11) * 1.1102230246251565e-16, 6.283185307179586);
    const double radius = sqrt(__dmul_rn(log(u1), -2.0));
    for (int k = 0; k < 2; ++k) {
      const long long j = 4 * b + 2 * h + k;
      if (j >= n) return;
      const double z = __dmul_rn(radius, k ? sin(angle) : cos(angle));
      const float noise = __fadd_rn(__fmul_rn((float)z, stddev), mean);
      // NumPy adds in float32 (or in float64, rounded to float32 once: the same result)
      dst[j] = from_float<T>((float)((double)noise + (double)src[j]));
    }
  }
}

// One thread per element; a pixel's channels share a draw unless per_channel. Draw d's word is
// word d % 4 of block d / 4; its high half decides.
template <typename T>
__device__ void salt_and_pepper_impl(const long long* itab, const double* ftab) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const double* ft = ftab + (long long)blockIdx.y * FTAB;
  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= it[2]) return;
  const T* src = (const T*)it[0];
  T* dst = (T*)it[1];
  const long long inner = it[6], group = it[5] * inner;
  const long long d = (j / group) * inner + j % inner;  // the pixel's draw
  unsigned long long w[4];
  block_words(it, d >> 2, w);
  const double high = (double)(w[d & 3] >> 32);  // exact
  T v = src[j];
  if (high < ft[0]) v = (T)ft[2];
  else if (high < ft[1]) v = (T)ft[3];
  dst[j] = v;
}

#define NOISE_KERNELS(suffix, T)                                                                       \
  extern "C" __global__ void noise_gaussian_##suffix(const long long* itab, const double* ftab) {        \
    gaussian_impl<T>(itab, ftab);                                                                      \
  }                                                                                                    \
  extern "C" __global__ void noise_salt_and_pepper_##suffix(const long long* itab, const double* ftab) { \
    salt_and_pepper_impl<T>(itab, ftab);                                                               \
  }

NOISE_KERNELS(u8, unsigned char)
NOISE_KERNELS(i8, signed char)
NOISE_KERNELS(u16, unsigned short)
NOISE_KERNELS(i16, short)
NOISE_KERNELS(f32, float)
NOISE_KERNELS(f64, double)
