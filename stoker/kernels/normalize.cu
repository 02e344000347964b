// normalize's map, one launch per ragged batch: out = (x - mean) * factor + shift, where
// factor = scale / stddev was worked out beforehand (stoker/operators/image/gpu_normalize.py).
//
// rows[s * ROW + k] for sample s (blockIdx.y):
//   0 src ptr, 1 dst ptr, 2 element count, 3 first mean entry, 4 first factor entry,
//   5 number of dims d (<= MAXD), 6 .. 6+d-1 extents, 6+MAXD .. 6+MAXD+d-1 table strides.
// The dims are the sample's, with extent-1 dims dropped and neighbours of the same kind (reduced
// or kept) merged; a reduced dim has table stride 0, so an element's table entry is the sum of
// its kept coordinates times their strides. mean and factor are float64 tables.
//
// The arithmetic is the CPU operator's: float64, no fused multiply-add (the _rn intrinsics keep
// the compiler from contracting it), rounded to float32, then to the output type. Integer outputs
// round halves away from zero from that float32 value and saturate.
#include <cuda_fp16.h>

#define MAXD 8
#define ROW (6 + 2 * MAXD)

template <typename In> __device__ __forceinline__ double load(const In* p) { return (double)*p; }
template <> __device__ __forceinline__ double load<__half>(const __half* p) { return (double)__half2float(*p); }

template <typename Out> __device__ __forceinline__ Out to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ double to_out<double>(float v) { return (double)v; }
template <> __device__ __forceinline__ __half to_out<__half>(float v) { return __float2half_rn(v); }

#define SATURATING(T, LO, HI)                                                                      \
  template <> __device__ __forceinline__ T to_out<T>(float v) {                                    \
    double d = (double)v;                                                                          \
    return (T)fmin(fmax(trunc(d + copysign(0.5, d)), LO), HI);                                     \
  }
SATURATING(unsigned char, 0.0, 255.0)
SATURATING(signed char, -128.0, 127.0)
SATURATING(unsigned short, 0.0, 65535.0)
SATURATING(short, -32768.0, 32767.0)
SATURATING(int, -2147483648.0, 2147483647.0)

template <typename In, typename Out>
__device__ void normalize_impl(const long long* rows, const double* mean, const double* factor, double shift) {
  const long long* r = rows + (long long)blockIdx.y * ROW;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= r[2]) return;
  long long rest = p, entry = 0;
  for (int d = (int)r[5] - 1; d >= 0; --d) {  // innermost dim first: row-major coordinates
    long long ext = r[6 + d];
    entry += (rest % ext) * r[6 + MAXD + d];
    rest /= ext;
  }
  double x = load<In>((const In*)r[0] + p);
  double v = __dadd_rn(__dmul_rn(__dsub_rn(x, mean[r[3] + entry]), factor[r[4] + entry]), shift);
  ((Out*)r[1])[p] = to_out<Out>(__double2float_rn(v));
}

#define NORMALIZE(suffix, In, Out)                                                                 \
  extern "C" __global__ void normalize_##suffix(const long long* rows, const double* mean,         \
                                                const double* factor, double shift) {              \
    normalize_impl<In, Out>(rows, mean, factor, shift);                                            \
  }

#define NORMALIZE_FROM(in, In)                                                                     \
  NORMALIZE(in##_u8, In, unsigned char)                                                            \
  NORMALIZE(in##_i8, In, signed char)                                                              \
  NORMALIZE(in##_u16, In, unsigned short)                                                          \
  NORMALIZE(in##_i16, In, short)                                                                   \
  NORMALIZE(in##_i32, In, int)                                                                     \
  NORMALIZE(in##_f16, In, __half)                                                                  \
  NORMALIZE(in##_f32, In, float)                                                                   \
  NORMALIZE(in##_f64, In, double)

NORMALIZE_FROM(u8, unsigned char)
NORMALIZE_FROM(i8, signed char)
NORMALIZE_FROM(u16, unsigned short)
NORMALIZE_FROM(i16, short)
NORMALIZE_FROM(i32, int)
NORMALIZE_FROM(f16, __half)
NORMALIZE_FROM(f32, float)
NORMALIZE_FROM(f64, double)
