// Batched image resampling, one launch per batch.
//
// Every sample has a row in two tables (variable input and output shapes):
//   itab[s*8 + k]: 0 src ptr, 1 src row stride (bytes), 2 src H, 3 src W,
//                  4 dst ptr, 5 dst H, 6 dst W, 7 flags (bit 0: mirror x)
//   ftab[s*4 + k]: 0 lo y, 1 lo x, 2 scale y (src px per dst px), 3 scale x
// Pixels are interleaved HWC with C channels (C <= 4), uint8 in.
//
// Source coordinate of output pixel j: lo + (j + 0.5) * scale (scale < 0 flips).
// Filter: a triangle of radius max(|scale|, 1) centred on the output pixel's
// centre mapped into the source. For scale <= 1 it is bilinear interpolation;
// for scale > 1 it averages every source pixel the output pixel covers
// (antialiasing). Borders replicate the edge pixel.

#include <cuda_fp16.h>

struct Taps {
  int lo, n;
  float centre, inv_r;
};

__device__ __forceinline__ Taps make_taps(float centre, float scale) {
  Taps t;
  float a = fabsf(scale);
  float r = a > 1.f ? a : 1.f;
  t.centre = centre;
  t.inv_r = 1.f / r;
  t.lo = (int)floorf(centre - r);
  int hi = (int)ceilf(centre + r);
  t.n = hi - t.lo + 1;
  return t;
}

__device__ __forceinline__ float tap_weight(const Taps& t, int i) {
  float d = fabsf((float)(t.lo + i) + 0.5f - t.centre) * t.inv_r;
  return d < 1.f ? 1.f - d : 0.f;
}

// Horizontal weights of up to kRegTaps taps are kept in registers (a fixed-size, fully unrolled
// array); wider filters (shrinking by more than ~3x) compute each weight where it is used. The
// sums are the same, in the same order, either way.
constexpr int kRegTaps = 8;

// One source row's contribution: wy * sum_i wx[i] * row[x_i]. kRegs: the weights are in `wx`
// (registers: constant indices once unrolled); else each is computed where it is used.
template <int C, bool kRegs>
__device__ __forceinline__ void accumulate_row(const unsigned char* row, int W, const Taps& tx, float wy,
                                               const float (&wx)[kRegTaps], float acc[C]) {
  float racc[C];
#pragma unroll
  for (int c = 0; c < C; ++c) racc[c] = 0.f;
  if (kRegs) {
#pragma unroll
    for (int i = 0; i < kRegTaps; ++i) {
      if (i >= tx.n || wx[i] == 0.f) continue;
      int x = min(max(tx.lo + i, 0), W - 1);
      const unsigned char* p = row + x * C;
#pragma unroll
      for (int c = 0; c < C; ++c) racc[c] += wx[i] * (float)p[c];
    }
  } else {
    for (int i = 0; i < tx.n; ++i) {
      float w = tap_weight(tx, i);
      if (w == 0.f) continue;
      int x = min(max(tx.lo + i, 0), W - 1);
      const unsigned char* p = row + x * C;
#pragma unroll
      for (int c = 0; c < C; ++c) racc[c] += w * (float)p[c];
    }
  }
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] += wy * racc[c];
}

template <int C, bool kRegs>
__device__ __forceinline__ float filter_rows(const unsigned char* src, long long stride, int H, int W,
                                             const Taps& ty, const Taps& tx, const float (&wx)[kRegTaps],
                                             float acc[C]) {
  float wsum_y = 0.f;
  for (int j = 0; j < ty.n; ++j) {
    float wy = tap_weight(ty, j);
    if (wy == 0.f) continue;
    int y = min(max(ty.lo + j, 0), H - 1);
    accumulate_row<C, kRegs>(src + (long long)y * stride, W, tx, wy, wx, acc);
    wsum_y += wy;
  }
  return wsum_y;
}

template <int C>
__device__ __forceinline__ void resample(const unsigned char* src, long long stride, int H, int W,
                                         float cy, float cx, float sy, float sx, float acc[C]) {
  Taps ty = make_taps(cy, sy), tx = make_taps(cx, sx);
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] = 0.f;
  float wx[kRegTaps];
  float wsum_x = 0.f;
  float wsum_y;
  if (tx.n <= kRegTaps) {
#pragma unroll
    for (int i = 0; i < kRegTaps; ++i) {
      wx[i] = i < tx.n ? tap_weight(tx, i) : 0.f;
      if (i < tx.n) wsum_x += wx[i];
    }
    wsum_y = filter_rows<C, true>(src, stride, H, W, ty, tx, wx, acc);
  } else {
    for (int i = 0; i < tx.n; ++i) wsum_x += tap_weight(tx, i);
    wsum_y = filter_rows<C, false>(src, stride, H, W, ty, tx, wx, acc);
  }
  float norm = 1.f / (wsum_y * wsum_x);
#pragma unroll
  for (int c = 0; c < C; ++c) acc[c] *= norm;
}

// Resize to uint8 HWC. grid: (ceil(max dst pixels / block), N).
template <int C>
__device__ void resize_u8_impl(const long long* itab, const float* ftab) {
  int s = blockIdx.y;
  const long long* it = itab + s * 8;
  const float* ft = ftab + s * 4;
  int dH = (int)it[5], dW = (int)it[6];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (long long)dH * dW) return;
  int oy = (int)(p / dW), ox = (int)(p % dW);
  if (it[7] & 1) ox = dW - 1 - ox;
  float acc[C];
  resample<C>((const unsigned char*)it[0], it[1], (int)it[2], (int)it[3],
              ft[0] + (oy + 0.5f) * ft[2], ft[1] + (ox + 0.5f) * ft[3], ft[2], ft[3], acc);
  unsigned char* dst = (unsigned char*)it[4] + p * C;
#pragma unroll
  for (int c = 0; c < C; ++c) dst[c] = (unsigned char)fminf(fmaxf(floorf(acc[c] + 0.5f), 0.f), 255.f);
}

extern "C" __global__ void resize_u8_c3(const long long* itab, const float* ftab) {
  resize_u8_impl<3>(itab, ftab);
}
extern "C" __global__ void resize_u8_c1(const long long* itab, const float* ftab) {
  resize_u8_impl<1>(itab, ftab);
}

// Resize fused with normalize, mirror and HWC -> CHW float (the training-pipeline pair
// resize -> crop_mirror_normalize). norm[c] = mean, norm[4 + c] = 1 / std; out dense (N, C, H, W).
extern "C" __global__ void resize_normalize_chw_f32_c3(const long long* itab, const float* ftab,
                                                       const float* norm, float scale, float shift) {
  int s = blockIdx.y;
  const long long* it = itab + s * 8;
  const float* ft = ftab + s * 4;
  int dH = (int)it[5], dW = (int)it[6];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  long long plane = (long long)dH * dW;
  if (p >= plane) return;
  int oy = (int)(p / dW), ox = (int)(p % dW);
  int sx_ = (it[7] & 1) ? dW - 1 - ox : ox;
  float acc[3];
  resample<3>((const unsigned char*)it[0], it[1], (int)it[2], (int)it[3],
              ft[0] + (oy + 0.5f) * ft[2], ft[1] + (sx_ + 0.5f) * ft[3], ft[2], ft[3], acc);
  float* dst = (float*)it[4];
#pragma unroll
  for (int c = 0; c < 3; ++c) {
    float v = fminf(fmaxf(floorf(acc[c] + 0.5f), 0.f), 255.f);  // the resize's uint8 rounding
    dst[c * plane + p] = (v - norm[c]) * norm[4 + c] * scale + shift;
  }
}
