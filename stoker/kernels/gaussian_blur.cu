// Batched separable Gaussian blur of interleaved images (HWC / HW), two launches per batch:
// rows into a float32 scratch, then columns into the output. Borders mirror without repeating
// the edge pixel (OpenCV's BORDER_REFLECT_101), as the CPU operator's cv2.sepFilter2D does.
//
// itab[s*8 + k]: 0 src ptr, 1 src row stride (bytes), 2 H, 3 W, 4 scratch ptr (float32, H*W*C),
//                5 dst ptr, 6 radius along x, 7 radius along y
// taps[s*2*kmax + k]: the x kernel (2*rx+1 taps) from 0, the y kernel from kmax.
// Integer outputs round half up and saturate (the CPU's to_dtype); float outputs as computed.

__device__ __forceinline__ int reflect101(int i, int n) {
  if (n == 1) return 0;
  while (i < 0 || i >= n) i = i < 0 ? -i : 2 * n - 2 - i;
  return i;
}

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned char to_out<unsigned char>(float v) {
  return (unsigned char)fminf(fmaxf(floorf(v + 0.5f), 0.f), 255.f);
}

template <typename In>
__device__ void rows_impl(const long long* itab, const float* taps, int C, int kmax) {
  int s = blockIdx.y;
  const long long* it = itab + s * 8;
  int H = (int)it[2], W = (int)it[3], rx = (int)it[6];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (long long)H * W) return;
  int x = (int)(p % W), y = (int)(p / W);
  const In* row = (const In*)((const unsigned char*)it[0] + (long long)y * it[1]);
  const float* k = taps + (long long)s * 2 * kmax;
  float* out = (float*)it[4] + p * C;
  for (int c = 0; c < C; ++c) {
    float acc = 0.f;
    for (int t = -rx; t <= rx; ++t) acc += k[t + rx] * (float)row[(long long)reflect101(x + t, W) * C + c];
    out[c] = acc;
  }
}

template <typename Out>
__device__ void columns_impl(const long long* itab, const float* taps, int C, int kmax) {
  int s = blockIdx.y;
  const long long* it = itab + s * 8;
  int H = (int)it[2], W = (int)it[3], ry = (int)it[7];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (long long)H * W) return;
  int x = (int)(p % W), y = (int)(p / W);
  const float* scratch = (const float*)it[4];
  const float* k = taps + (long long)s * 2 * kmax + kmax;
  Out* out = (Out*)it[5] + p * C;
  for (int c = 0; c < C; ++c) {
    float acc = 0.f;
    for (int t = -ry; t <= ry; ++t) acc += k[t + ry] * scratch[((long long)reflect101(y + t, H) * W + x) * C + c];
    out[c] = to_out<Out>(acc);
  }
}

extern "C" __global__ void blur_rows_u8(const long long* itab, const float* taps, int C, int kmax) {
  rows_impl<unsigned char>(itab, taps, C, kmax);
}
extern "C" __global__ void blur_rows_f32(const long long* itab, const float* taps, int C, int kmax) {
  rows_impl<float>(itab, taps, C, kmax);
}
extern "C" __global__ void blur_columns_u8(const long long* itab, const float* taps, int C, int kmax) {
  columns_impl<unsigned char>(itab, taps, C, kmax);
}
extern "C" __global__ void blur_columns_f32(const long long* itab, const float* taps, int C, int kmax) {
  columns_impl<float>(itab, taps, C, kmax);
}
