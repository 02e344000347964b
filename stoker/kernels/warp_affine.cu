// Batched affine warps (warp_affine, rotate) of interleaved images, one launch per batch.
//
// itab[s*8 + k]: 0 src ptr, 1 src row stride (bytes), 2 src H, 3 src W, 4 dst ptr, 5 dst H,
//                6 dst W, 7 unused
// ftab[s*8 + k]: the 2x3 output-to-input matrix, row by row (then 2 unused).
//   Linear: OpenCV's convention (pixel centres at integers), as the CPU operators hand it to
//   cv2.warpAffine; bilinear taps, border replicated (constant < 0) or `fill` (constant > 0).
//   Nearest: DALI's convention (centres at +0.5): the source pixel is the floor of the mapped
//   centre, computed in float32 in the CPU's order; outside the source, `fill` or the clamped
//   border pixel.
// Integer outputs round to nearest and saturate.

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned char to_out<unsigned char>(float v) {
  return (unsigned char)fminf(fmaxf(rintf(v), 0.f), 255.f);
}

template <typename T>
__device__ __forceinline__ const T* pixel(const long long* it, int y, int x, int C) {
  return (const T*)((const unsigned char*)it[0] + (long long)y * it[1]) + (long long)x * C;
}

template <typename T>
__device__ void warp_impl(const long long* itab, const float* ftab, int C, int nearest, int constant,
                          float fill, T fill_out) {
  int s = blockIdx.y;
  const long long* it = itab + s * 8;
  const float* m = ftab + s * 8;
  int H = (int)it[2], W = (int)it[3], dH = (int)it[5], dW = (int)it[6];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (long long)dH * dW) return;
  int ox = (int)(p % dW), oy = (int)(p / dW);
  T* dst = (T*)it[4] + p * C;
  if (nearest) {
    float fx = __fadd_rn((float)ox, 0.5f), fy = __fadd_rn((float)oy, 0.5f);
    int sx = (int)floorf(__fadd_rn(__fmul_rn(m[0], fx), __fadd_rn(__fmul_rn(m[1], fy), m[2])));
    int sy = (int)floorf(__fadd_rn(__fmul_rn(m[3], fx), __fadd_rn(__fmul_rn(m[4], fy), m[5])));
    bool inside = sx >= 0 && sx < W && sy >= 0 && sy < H;
    if (!inside && constant) {
      for (int c = 0; c < C; ++c) dst[c] = fill_out;
      return;
    }
    const T* src = pixel<T>(it, min(max(sy, 0), H - 1), min(max(sx, 0), W - 1), C);
    for (int c = 0; c < C; ++c) dst[c] = src[c];
    return;
  }
  float x = m[0] * ox + m[1] * oy + m[2];
  float y = m[3] * ox + m[4] * oy + m[5];
  float x0f = floorf(x), y0f = floorf(y);
  float ax = x - x0f, ay = y - y0f;
  int x0 = (int)x0f, y0 = (int)y0f;
  for (int c = 0; c < C; ++c) {
    float v[4];
    for (int k = 0; k < 4; ++k) {
      int yy = y0 + (k >> 1), xx = x0 + (k & 1);
      if (yy < 0 || yy >= H || xx < 0 || xx >= W) {
        if (constant) { v[k] = fill; continue; }
        yy = min(max(yy, 0), H - 1);
        xx = min(max(xx, 0), W - 1);
      }
      v[k] = (float)pixel<T>(it, yy, xx, C)[c];
    }
    float top = v[0] + ax * (v[1] - v[0]), bottom = v[2] + ax * (v[3] - v[2]);
    dst[c] = to_out<T>(top + ay * (bottom - top));
  }
}

extern "C" __global__ void warp_u8(const long long* itab, const float* ftab, int C, int nearest, int constant,
                                   float fill, unsigned char fill_out) {
  warp_impl<unsigned char>(itab, ftab, C, nearest, constant, fill, fill_out);
}

extern "C" __global__ void warp_f32(const long long* itab, const float* ftab, int C, int nearest, int constant,
                                    float fill, float fill_out) {
  warp_impl<float>(itab, ftab, C, nearest, constant, fill, fill_out);
}
