// Per-sample linear colour maps, one launch per batch: hsv, hue, saturation and color_twist
// (a 3x3 matrix and an offset per sample, on 3-channel pixels) and brightness, contrast and
// brightness_contrast (a scalar formula per sample, on every element).
//
// itab[s*3 + k]: 0 src ptr, 1 dst ptr, 2 count (pixels for matrix_*, elements for scalar_*)
// ftab[s*12 + k]: matrix_*: the 3x3 matrix row by row, then the 3 offsets;
//                 scalar_*: brightness, contrast, contrast centre, added constant.
// The __f*_rn intrinsics keep the CPU operators' float32 order of operations (the compiler
// would otherwise fuse multiply-adds and move rounding ties). Integer outputs round half up and
// saturate, float outputs are stored as computed: the CPU's to_dtype.

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned char to_out<unsigned char>(float v) {
  return (unsigned char)fminf(fmaxf(floorf(__fadd_rn(v, 0.5f)), 0.f), 255.f);
}

template <typename In, typename Out>
__device__ void matrix_impl(const long long* itab, const float* ftab) {
  int s = blockIdx.y;
  const long long* it = itab + s * 3;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  const In* src = (const In*)it[0] + p * 3;
  Out* dst = (Out*)it[1] + p * 3;
  const float* m = ftab + s * 12;
  float r = (float)src[0], g = (float)src[1], b = (float)src[2];
  for (int c = 0; c < 3; ++c) {
    float v = __fadd_rn(__fadd_rn(__fmul_rn(m[3 * c], r), __fmul_rn(m[3 * c + 1], g)), __fmul_rn(m[3 * c + 2], b));
    dst[c] = to_out<Out>(__fadd_rn(v, m[9 + c]));
  }
}

template <typename In, typename Out>
__device__ void scalar_impl(const long long* itab, const float* ftab) {
  int s = blockIdx.y;
  const long long* it = itab + s * 3;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  const float* f = ftab + s * 12;  // brightness, contrast, centre, added
  float x = (float)((const In*)it[0])[p];
  x = __fadd_rn(__fmul_rn(__fadd_rn(__fmul_rn(__fsub_rn(x, f[2]), f[1]), f[2]), f[0]), f[3]);
  ((Out*)it[1])[p] = to_out<Out>(x);
}

#define LINEAR_COLOR(suffix, In, Out)                                                              \
  extern "C" __global__ void matrix_##suffix(const long long* itab, const float* ftab) {          \
    matrix_impl<In, Out>(itab, ftab);                                                              \
  }                                                                                                \
  extern "C" __global__ void scalar_##suffix(const long long* itab, const float* ftab) {          \
    scalar_impl<In, Out>(itab, ftab);                                                              \
  }

LINEAR_COLOR(u8_u8, unsigned char, unsigned char)
LINEAR_COLOR(u8_f32, unsigned char, float)
LINEAR_COLOR(f32_u8, float, unsigned char)
LINEAR_COLOR(f32_f32, float, float)
