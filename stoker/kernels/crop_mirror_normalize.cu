// Batched crop + mirror + normalize + layout change + cast, one launch per batch.
//
// itab[s*8 + k]: 0 src ptr, 1 src row stride (bytes), 2 src H, 3 src W,
//                4 crop y0 (may be < 0 or run past the image: padded), 5 crop x0,
//                6 flags (bit 0 mirror x, bit 1 mirror y), 7 dst ptr
// Every sample's output is out_h x out_w x out_c (out_c >= C pads channels with `fill`).
// norm[c] = mean, norm[8 + c] = 1 / std (per channel, c < out_c).
// chw != 0 writes planar (C, H, W), else interleaved (H, W, C).
#include <cuda_fp16.h>

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ __half to_out<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ unsigned char to_out<unsigned char>(float v) {
  return (unsigned char)fminf(fmaxf(rintf(v), 0.f), 255.f);  // round half to even, as a float->int cast
}
template <> __device__ __forceinline__ signed char to_out<signed char>(float v) {
  return (signed char)fminf(fmaxf(rintf(v), -128.f), 127.f);
}

template <typename T>
__device__ void cmn_impl(const long long* itab, const float* norm, int C, int out_h, int out_w, int out_c,
                         int chw, float scale, float shift, float fill, int normalize) {
  int s = blockIdx.y;
  const long long* it = itab + s * 8;
  long long plane = (long long)out_h * out_w;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= plane) return;
  int oy = (int)(p / out_w), ox = (int)(p % out_w);
  int flags = (int)it[6];
  int sx = (flags & 1) ? out_w - 1 - ox : ox;
  int sy = (flags & 2) ? out_h - 1 - oy : oy;
  int y = (int)it[4] + sy, x = (int)it[5] + sx;
  int H = (int)it[2], W = (int)it[3];
  bool inside = y >= 0 && y < H && x >= 0 && x < W;
  const unsigned char* src = (const unsigned char*)it[0] + (long long)y * it[1] + (long long)x * C;
  T* dst = (T*)it[7];
  for (int c = 0; c < out_c; ++c) {
    float v;
    if (inside && c < C) {
      v = (float)src[c];
      if (normalize) v = (v - norm[c]) * norm[8 + c] * scale + shift;
    } else {
      v = fill;
    }
    long long o = chw ? (long long)c * plane + p : p * out_c + c;
    dst[o] = to_out<T>(v);
  }
}

extern "C" __global__ void cmn_f32(const long long* itab, const float* norm, int C, int oh, int ow, int oc,
                                   int chw, float scale, float shift, float fill, int normalize) {
  cmn_impl<float>(itab, norm, C, oh, ow, oc, chw, scale, shift, fill, normalize);
}
extern "C" __global__ void cmn_f16(const long long* itab, const float* norm, int C, int oh, int ow, int oc,
                                   int chw, float scale, float shift, float fill, int normalize) {
  cmn_impl<__half>(itab, norm, C, oh, ow, oc, chw, scale, shift, fill, normalize);
}
extern "C" __global__ void cmn_u8(const long long* itab, const float* norm, int C, int oh, int ow, int oc,
                                  int chw, float scale, float shift, float fill, int normalize) {
  cmn_impl<unsigned char>(itab, norm, C, oh, ow, oc, chw, scale, shift, fill, normalize);
}
extern "C" __global__ void cmn_i8(const long long* itab, const float* norm, int C, int oh, int ow, int oc,
                                  int chw, float scale, float shift, float fill, int normalize) {
  cmn_impl<signed char>(itab, norm, C, oh, ow, oc, chw, scale, shift, fill, normalize);
}
