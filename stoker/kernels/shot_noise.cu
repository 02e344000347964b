// noise.shot, one launch per batch (grid: x over a sample's elements, y over the samples), a thread
// per element. The CUDA twin of stoker/operators/filters/element_poisson.py (see its docstring for
// the sampler and why): element j reads words 2j and 2j+1 of draws 0, 1, ... under its sample's
// key, and every step is an IEEE operation in the same order as NumPy's. Compiled with
// --fmad=false (element_rng.kernel_options(SHOT_OPTIONS) in gpu_noise.py): a fused multiply-add
// would round once where NumPy rounds twice. exp_ and log_ are ours, not CUDA's, for the same
// reason. The constants are element_poisson's, written alike (a CPU test compares them).
//
// itab[s*ITAB + k]: 0 src ptr, 1 dst ptr, 2 elements, 3 k0, 4 k1 (the sample's key)
// ftab[s*FTAB + k]: 0 factor (0: a copy)
// Samples are contiguous, row-major.

#define ITAB 8
#define FTAB 4

#include "philox4x64_10.cuh"

#define SEARCH_BELOW 16.0
#define PTRS_BELOW 4503599627370496.0
#define SEARCH_MAX 64
#define ROUNDS 16
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10
#define INV_LN2 1.4426950408889634
#define SQRT_HALF 0.7071067811865476
#define TWO_PI 6.283185307179586

__constant__ double EXP_C[15] = {1.0, 1.0, 0.5, 0.16666666666666666, 0.041666666666666664, 0.008333333333333333,
                                 0.001388888888888889, 0.0001984126984126984, 2.48015873015873e-05,
                                 2.7557319223985893e-06, 2.755731922398589e-07, 2.505210838544172e-08,
                                 2.08767569878681e-09, 1.6059043836821613e-10, 1.1470745597729725e-11};
__constant__ double LOG_C[11] = {1.0, 0.3333333333333333, 0.2, 0.14285714285714285, 0.1111111111111111,
                                 0.09090909090909091, 0.07692307692307693, 0.06666666666666667,
                                 0.058823529411764705, 0.05263157894736842, 0.047619047619047616};
__constant__ double LOGFACT[16] = {0.0, 0.0, 0.6931471805599453, 1.791759469228055, 3.1780538303479458,
                                   4.787491742782046, 6.579251212010101, 8.525161361065415, 10.60460290274525,
                                   12.801827480081469, 15.104412573075516, 17.502307845873887,
                                   19.987214495661885, 22.552163853123425, 25.19122118273868, 27.89927138384089};
__constant__ double STIRLING_C[5] = {0.08333333333333333, -0.002777777777777778, 0.0007936507936507937,
                                     -0.0005952380952380953, 0.0008417508417508417};

__device__ __forceinline__ double exp_(double x) {
  const double k = floor(x * INV_LN2 + 0.5);
  const double r = (x - k * LN2_HI) - k * LN2_LO;
  double p = EXP_C[14];
  for (int i = 13; i >= 0; --i) p = p * r + EXP_C[i];
  return ldexp(p, (int)k);
}

__device__ __forceinline__ double log_(double x) {
  int e;
  double m = frexp(x, &e);
  if (m < SQRT_HALF) {
    m = m * 2.0;
    e -= 1;
  }
  const double ed = (double)e;
  const double s = (m - 1.0) / (m + 1.0);
  const double z = s * s;
  double p = LOG_C[10];
  for (int i = 9; i >= 0; --i) p = p * z + LOG_C[i];
  return ((s + s) * p + ed * LN2_LO) + ed * LN2_HI;
}

__device__ __forceinline__ double log1p_(double t) {
  const double u = 1.0 + t;
  if (u == 1.0) return t;
  return log_(u) * (t / (u - 1.0));
}

// log P(X = k), k >= 0 whole, lam > 0
__device__ __forceinline__ double logpmf(double k, double lam) {
  if (k < 16.0) return (-lam + k * log_(lam)) - LOGFACT[(int)k];
  const double d = k - lam;
  const double ik = 1.0 / k;
  const double z = ik * ik;
  double corr = STIRLING_C[4];
  for (int i = 3; i >= 0; --i) corr = corr * z + STIRLING_C[i];
  corr = corr * ik;
  return ((d - k * log1p_(d / lam)) - 0.5 * log_(TWO_PI * k)) - corr;
}

__device__ __forceinline__ double uniform53(unsigned long long w) {
  return (double)(w >> 11) * 1.1102230246251565e-16;  // 2^-53, exact
}

__device__ __forceinline__ double uniform_open(unsigned long long w) {
  return (double)(((w >> 12) << 1) | 1ull) * 1.1102230246251565e-16;
}

// words 2j and 2j+1 of draw d: half (j & 1) of block j >> 1
__device__ __forceinline__ void pair(long long j, unsigned long long d, unsigned long long k0,
                                     unsigned long long k1, unsigned long long& a, unsigned long long& b) {
  unsigned long long c[4] = {((unsigned long long)j >> 1) + 1ull, d, 0ull, 0ull};
  philox4x64_10(c, k0, k1);
  a = (j & 1) ? c[2] : c[0];
  b = (j & 1) ? c[3] : c[1];
}

__device__ double poisson(double lam, long long j, unsigned long long k0, unsigned long long k1) {
  if (!(lam < PTRS_BELOW)) return lam;  // huge, infinite or NaN
  unsigned long long w0, w1;
  pair(j, 0ull, k0, k1, w0, w1);
  if (lam < SEARCH_BELOW) {
    const double u = uniform53(w0);
    double p = exp_(-lam), f = p;
    int k = 0;
    while (u >= f && k < SEARCH_MAX) {
      ++k;
      p = p * lam / (double)k;
      f = f + p;
    }
    return (double)k;
  }
  const double slam = sqrt(lam);
  const double b = 0.931 + 2.53 * slam;
  const double a = -0.059 + 0.02483 * b;
  const double log_inv_alpha = log_(1.1239 + 1.1328 / (b - 3.4));
  const double vr = 0.9277 - 3.6224 / (b - 2.0);
  for (int r = 0; r < ROUNDS; ++r) {
    if (r) pair(j, (unsigned long long)r, k0, k1, w0, w1);
    const double big_u = uniform53(w0) - 0.5;
    const double v = uniform_open(w1);
    const double us = 0.5 - fabs(big_u);
    const double k = floor(((2.0 * a / us + b) * big_u + lam) + 0.43);
    if (us >= 0.07 && v <= vr) return k;
    if (k < 0.0 || (us < 0.013 && v > us)) continue;
    const double lhs = (log_(v) + log_inv_alpha) - log_(a / (us * us) + b);
    if (lhs <= logpmf(k, lam)) return k;
  }
  return floor(lam);
}

// ---- float32 result to the sample's type: integers round half up and saturate (as noise.cu) ----

template <typename T> struct IntRange;
template <> struct IntRange<unsigned char> { static constexpr float lo = 0.0f, hi = 255.0f; };
template <> struct IntRange<signed char> { static constexpr float lo = -128.0f, hi = 127.0f; };
template <> struct IntRange<unsigned short> { static constexpr float lo = 0.0f, hi = 65535.0f; };
template <> struct IntRange<short> { static constexpr float lo = -32768.0f, hi = 32767.0f; };

template <typename T>
__device__ __forceinline__ T from_float(float v) {
  const float r = floorf(v + 0.5f);
  return (T)fminf(fmaxf(r, IntRange<T>::lo), IntRange<T>::hi);
}
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ double from_float<double>(float v) { return (double)v; }

template <typename T>
__device__ void shot_impl(const long long* itab, const double* ftab) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  const long long j = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= it[2]) return;
  const T* src = (const T*)it[0];
  T* dst = (T*)it[1];
  const double factor = ftab[(long long)blockIdx.y * FTAB];
  if (factor == 0.0) {
    dst[j] = src[j];
    return;
  }
  double lam = (double)src[j] / factor;
  if (lam < 0.0) lam = 0.0;  // NaN stays, as np.maximum keeps it
  const double count = poisson(lam, j, (unsigned long long)it[3], (unsigned long long)it[4]);
  dst[j] = from_float<T>((float)(count * factor));
}

#define SHOT_KERNEL(suffix, T)                                                                   \
  extern "C" __global__ void noise_shot_##suffix(const long long* itab, const double* ftab) { \
    shot_impl<T>(itab, ftab);                                                                  \
  }

SHOT_KERNEL(u8, unsigned char)
SHOT_KERNEL(i8, signed char)
SHOT_KERNEL(u16, unsigned short)
SHOT_KERNEL(i16, short)
SHOT_KERNEL(f32, float)
SHOT_KERNEL(f64, double)
