// Batched perspective warps of images (warp_perspective), one launch per batch.
//
// The source access, border rules and bilinear sampling below are written to serve the affine
// kernels (warp_affine.cu) as well; they stay apart until this file's GPU tests have passed on a
// device, so that the affine kernels, which have, are not changed untested.
//
// Integer outputs round to nearest (ties to even) and saturate, as OpenCV's.

// Border modes, OpenCV's meaning (the order of the GPU modules' _BORDER tables).
#define BORDER_CONSTANT 0
#define BORDER_REPLICATE 1
#define BORDER_REFLECT 2      // fedcba|abcdef|fedcba
#define BORDER_REFLECT_101 3  // fedcb|abcdef|edcba
#define BORDER_WRAP 4         // cdef|abcdef|abcd

template <typename T> __device__ __forceinline__ T to_out(float v);
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }
template <> __device__ __forceinline__ unsigned char to_out<unsigned char>(float v) {
  return (unsigned char)fminf(fmaxf(rintf(v), 0.f), 255.f);
}

// One source image: pixel (y, x) channel c is at base + y * row (bytes) + (x * px + c * ch) elements,
// so interleaved (HWC: px = C, ch = 1) and planar (CHW: px = 1, ch = H * W) images read alike.
struct Image {
  const unsigned char* base;
  long long row, px, ch;
  long long H, W;
};

template <typename T>
__device__ __forceinline__ float load(const Image& im, long long y, long long x, int c) {
  return (float)*((const T*)(im.base + y * im.row) + x * im.px + (long long)c * im.ch);
}

__device__ __forceinline__ long long floor_mod(long long a, long long n) {
  long long m = a % n;
  return m < 0 ? m + n : m;
}

// The index that coordinate i (outside [0, n)) reads under a non-constant border: OpenCV's
// borderInterpolate, with its loops replaced by closed forms so that far points cost no more.
__device__ __forceinline__ long long border_index(long long i, long long n, int border) {
  if (n == 1 || border == BORDER_REPLICATE) return i < 0 ? 0 : (i >= n ? n - 1 : i);
  if (border == BORDER_WRAP) return floor_mod(i, n);
  long long period = border == BORDER_REFLECT ? 2 * n : 2 * n - 2;
  long long m = floor_mod(i, period);
  return m < n ? m : (border == BORDER_REFLECT ? period - 1 - m : period - m);
}

// One tap: the pixel when (y, x) is inside, else `fill` (constant border) or the border's pixel.
template <typename T>
__device__ __forceinline__ float tap(const Image& im, long long y, long long x, int c, int border, float fill) {
  if (y >= 0 && y < im.H && x >= 0 && x < im.W) return load<T>(im, y, x, c);
  if (border == BORDER_CONSTANT) return fill;
  return load<T>(im, border_index(y, im.H, border), border_index(x, im.W, border), c);
}

// float -> integer coordinate; NaN, infinities and values beyond int become INT_MIN, what x86's
// conversions (OpenCV's cvFloor / cvRound) give, so such points land outside the image alike.
__device__ __forceinline__ long long to_index(float v) {
  return (v >= -2147483648.f && v < 2147483648.f) ? (long long)v : -2147483648LL;
}

// Bilinear sample at (sx, sy) (pixel centres at integers): weights from the fractions in float32,
// interpolated along x, then y, each step one fused multiply-add (OpenCV's vectorised order).
template <typename T>
__device__ float bilinear(const Image& im, float sx, float sy, int c, int border, float fill) {
  float fx = floorf(sx), fy = floorf(sy);
  long long x0 = to_index(fx), y0 = to_index(fy);
  float ax = sx - fx, ay = sy - fy;
  float p00 = tap<T>(im, y0, x0, c, border, fill), p01 = tap<T>(im, y0, x0 + 1, c, border, fill);
  float p10 = tap<T>(im, y0 + 1, x0, c, border, fill), p11 = tap<T>(im, y0 + 1, x0 + 1, c, border, fill);
  float top = fmaf(ax, p01 - p00, p00), bottom = fmaf(ax, p11 - p10, p10);
  return fmaf(ay, bottom - top, top);
}

// ---- perspective --------------------------------------------------------------------------------
// One table row per image (a sample, or one frame of a sequence):
// itab[r*16 + k]: 0 src ptr, 1 src row stride (bytes), 2 src pixel stride, 3 src channel stride
//                 (elements), 4 src H, 5 src W, 6 dst ptr, 7 dst row stride (elements), 8 dst pixel
//                 stride, 9 dst channel stride, 10 dst H, 11 dst W, 12-15 unused
// ftab[r*16 + k]: 0-8 the 3x3 output-to-input homography in OpenCV's convention (pixel centres at
//                 integers), row by row; 9-12 the constant border's value per channel (already
//                 rounded and saturated to the output type); 13-15 unused.
// The source point is computed in float32 in the order of OpenCV's vectorised warpPerspective
// (row terms multiplied then added, the column term fused in, one IEEE division), so the same
// pixels are read; nearest rounds it (ties to even), linear interpolates as `bilinear`.

template <typename T>
__device__ void perspective_impl(const long long* itab, const float* ftab, int C, int nearest, int border) {
  int r = blockIdx.y;
  const long long* it = itab + (long long)r * 16;
  const float* m = ftab + (long long)r * 16;
  long long dH = it[10], dW = it[11];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= dH * dW) return;
  long long ox = p % dW, oy = p / dW;
  Image im = {(const unsigned char*)it[0], it[1], it[2], it[3], it[4], it[5]};
  float fx = (float)ox, fy = (float)oy;
  float X = fmaf(fx, m[0], __fadd_rn(__fmul_rn(fy, m[1]), m[2]));
  float Y = fmaf(fx, m[3], __fadd_rn(__fmul_rn(fy, m[4]), m[5]));
  float Wh = fmaf(fx, m[6], __fadd_rn(__fmul_rn(fy, m[7]), m[8]));
  float sx = __fdiv_rn(X, Wh), sy = __fdiv_rn(Y, Wh);
  T* dst = (T*)it[6] + oy * it[7] + ox * it[8];
  if (nearest) {
    long long x = to_index(rintf(sx)), y = to_index(rintf(sy));
    for (int c = 0; c < C; ++c) dst[c * it[9]] = to_out<T>(tap<T>(im, y, x, c, border, m[9 + c]));
    return;
  }
  for (int c = 0; c < C; ++c) dst[c * it[9]] = to_out<T>(bilinear<T>(im, sx, sy, c, border, m[9 + c]));
}

extern "C" __global__ void perspective_u8(const long long* itab, const float* ftab, int C, int nearest,
                                          int border) {
  perspective_impl<unsigned char>(itab, ftab, C, nearest, border);
}

extern "C" __global__ void perspective_f32(const long long* itab, const float* ftab, int C, int nearest,
                                           int border) {
  perspective_impl<float>(itab, ftab, C, nearest, border);
}
