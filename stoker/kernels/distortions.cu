// water, sphere and jitter (operators/image/distortions.py), one launch per batch: grid x over a
// sample's output pixels, grid y over the samples; a thread writes every channel of one pixel.
//
// Each output pixel reads the input at a displaced point (corner origin: pixel i spans [i, i + 1)).
// The point is computed in float32, one correctly rounded operation at a time in the CPU's (NumPy's)
// order, so both devices read the same pixels:
//   op 0 water:  (x + dx[y], y + dy[x]); dx (H) and dy (W) come from the host (ftab, the CPU's
//                own values: sin/cos are not computed here, as CUDA's differ from NumPy's in the last bit)
//   op 1 sphere: c + (|p - c| / r) (p - c), p the pixel centre; r, cx, cy in ftab
//   op 2 jitter: the pixel centre shifted by whole numbers in [-half, half], drawn here as the CPU
//                draws them (distortions.jitter_offsets): pixel p = y * W + x takes word p of the
//                sample's Philox4x64-10 stream (element_rng, key in itab), its high half giving the
//                x shift and its low half the y shift (below32(half32, 2 half + 1) - half)
//
// itab[s*ITAB + k]: 0 src ptr, 1 src row stride (bytes), 2 dst ptr (contiguous HWC), 3 H, 4 W, 5 C,
//                   6 mode (0: copy the sample, its mask is 0; 1: distort), 7 first entry in ftab,
//                   8, 9 the sample's Philox key (jitter)
//
// Nearest neighbour (the CPU's NumPy path): the pixel that contains the point, `fill` (the bits of
// the C-cast fill value) outside the image; it moves elements by size, so any type goes.
// Linear: OpenCV's float remap (cv2.remap, INTER_LINEAR, 32F maps, BORDER_CONSTANT; 8U/16U/32F with
// 1, 3 or 4 channels): map = point - 0.5; taps outside the image read `bval` (the fill value as
// OpenCV saturates it); a point whose top-left tap is beyond the one-pixel border is `bval`; the
// weights are the fractions in float32 and each step is one fused multiply-add, x then y (its
// vectorised order); integers round to nearest even and saturate.

#include "philox4x64_10.cuh"

#define ITAB 10
#define OP_WATER 0
#define OP_SPHERE 1
#define OP_JITTER 2

// float -> integer coordinate: NaN, infinities and values beyond int become INT_MIN, which lies
// outside any image (the CPU's conversions give such points an index outside the image too).
__device__ __forceinline__ long long to_index(float v) {
  return (v >= -2147483648.f && v < 2147483648.f) ? (long long)v : -2147483648LL;
}

__device__ __forceinline__ void source_point(int op, const long long* it, const float* ftab, long long half,
                                             long long ox, long long oy, float& sx, float& sy) {
  long long H = it[3], W = it[4], first = it[7];
  float fx = (float)ox, fy = (float)oy;
  if (op == OP_WATER) {
    const float* t = ftab + first;
    sx = __fadd_rn(fx, t[oy]);
    sy = __fadd_rn(fy, t[H + ox]);
  } else if (op == OP_SPHERE) {
    const float* t = ftab + first;
    float r = t[0], cx = t[1], cy = t[2];
    float tx = __fsub_rn(__fadd_rn(fx, 0.5f), cx), ty = __fsub_rn(__fadd_rn(fy, 0.5f), cy);
    float scale = __fdiv_rn(__fsqrt_rn(__fadd_rn(__fmul_rn(tx, tx), __fmul_rn(ty, ty))), r);
    sx = __fadd_rn(__fmul_rn(scale, tx), cx);
    sy = __fadd_rn(__fmul_rn(scale, ty), cy);
  } else {
    // half < 2^30 (nDegree is an int32): the span fits below32 and the shifts fit long long
    const unsigned long long word = philox_word((unsigned long long)(oy * W + ox), 0ull,
                                                (unsigned long long)it[8], (unsigned long long)it[9]);
    const unsigned long long span = 2ull * (unsigned long long)half + 1ull;
    const long long dx = (long long)below32(word >> 32, span) - half;
    const long long dy = (long long)below32(word & 0xFFFFFFFFull, span) - half;
    // the CPU adds the shift as float32 (exact below 2^24, rounded to nearest beyond, as here)
    sx = __fadd_rn(__fadd_rn(fx, 0.5f), __ll2float_rn(dx));
    sy = __fadd_rn(__fadd_rn(fy, 0.5f), __ll2float_rn(dy));
  }
}

// ---- nearest neighbour, by element size ---------------------------------------------------------

template <typename U>
__device__ void nearest_impl(const long long* itab, const float* ftab, int op, long long half,
                             unsigned long long fill) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  long long H = it[3], W = it[4], C = it[5];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= H * W) return;
  long long ox = p % W, oy = p / W;
  const unsigned char* src = (const unsigned char*)it[0];
  U* dst = (U*)it[2] + p * C;
  long long ix = ox, iy = oy;
  if (it[6]) {
    float sx, sy;
    source_point(op, it, ftab, half, ox, oy, sx, sy);
    ix = to_index(floorf(sx));
    iy = to_index(floorf(sy));
    if (ix < 0 || ix >= W || iy < 0 || iy >= H) {
      for (long long c = 0; c < C; ++c) dst[c] = (U)fill;
      return;
    }
  }
  const U* s = (const U*)(src + iy * it[1]) + ix * C;
  for (long long c = 0; c < C; ++c) dst[c] = s[c];
}

#define NEAREST(bytes, U)                                                                            \
  extern "C" __global__ void distort_nn_##bytes(const long long* itab, const float* ftab, int op,           \
                                                long long half, unsigned long long fill) {            \
    nearest_impl<U>(itab, ftab, op, half, fill);                                                    \
  }

NEAREST(1, unsigned char)
NEAREST(2, unsigned short)
NEAREST(4, unsigned int)
NEAREST(8, unsigned long long)

// ---- linear ---------------------------------------------------------------------------------------

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
// fmaxf(NaN, 0) is 0: a NaN saturates to 0, as OpenCV's conversion gives
template <> __device__ __forceinline__ unsigned char to_out<unsigned char>(float v) {
  return (unsigned char)fminf(fmaxf(rintf(v), 0.f), 255.f);
}
template <> __device__ __forceinline__ unsigned short to_out<unsigned short>(float v) {
  return (unsigned short)fminf(fmaxf(rintf(v), 0.f), 65535.f);
}

template <typename T>
__device__ __forceinline__ float tap(const unsigned char* src, long long row, long long H, long long W, long long C,
                                     long long y, long long x, long long c, float bval) {
  if (y < 0 || y >= H || x < 0 || x >= W) return bval;
  return (float)((const T*)(src + y * row))[x * C + c];
}

template <typename T>
__device__ void linear_impl(const long long* itab, const float* ftab, int op, long long half,
                            float bval) {
  const long long* it = itab + (long long)blockIdx.y * ITAB;
  long long H = it[3], W = it[4], C = it[5], row = it[1];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= H * W) return;
  long long ox = p % W, oy = p / W;
  const unsigned char* src = (const unsigned char*)it[0];
  T* dst = (T*)it[2] + p * C;
  if (!it[6]) {
    const T* s = (const T*)(src + oy * row) + ox * C;
    for (long long c = 0; c < C; ++c) dst[c] = s[c];
    return;
  }
  float sx, sy;
  source_point(op, it, ftab, half, ox, oy, sx, sy);
  float mx = __fsub_rn(sx, 0.5f), my = __fsub_rn(sy, 0.5f);  // OpenCV's pixel centres are integers
  float fx = floorf(mx), fy = floorf(my);
  long long x0 = to_index(fx), y0 = to_index(fy);
  if (x0 < -1 || x0 >= W || y0 < -1 || y0 >= H) {  // no tap inside: the border value itself
    for (long long c = 0; c < C; ++c) dst[c] = to_out<T>(bval);
    return;
  }
  float ax = __fsub_rn(mx, fx), ay = __fsub_rn(my, fy);
  for (long long c = 0; c < C; ++c) {
    float p00 = tap<T>(src, row, H, W, C, y0, x0, c, bval), p01 = tap<T>(src, row, H, W, C, y0, x0 + 1, c, bval);
    float p10 = tap<T>(src, row, H, W, C, y0 + 1, x0, c, bval);
    float p11 = tap<T>(src, row, H, W, C, y0 + 1, x0 + 1, c, bval);
    float top = fmaf(ax, __fsub_rn(p01, p00), p00), bottom = fmaf(ax, __fsub_rn(p11, p10), p10);
    dst[c] = to_out<T>(fmaf(ay, __fsub_rn(bottom, top), top));
  }
}

#define LINEAR(name, T)                                                                              \
  extern "C" __global__ void distort_linear_##name(const long long* itab, const float* ftab, int op,     \
                                                   long long half, float bval) {                     \
    linear_impl<T>(itab, ftab, op, half, bval);                                                     \
  }

LINEAR(u8, unsigned char)
LINEAR(u16, unsigned short)
LINEAR(f32, float)
