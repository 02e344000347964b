// grid_mask and paste, one launch per batch each (grid: x over a sample's output elements, y over
// the samples). Samples are contiguous, row-major, HWC (HW counts as one channel). Both only move
// values, so the kernels go by element size: grid_mask_1 / paste_1 for uint8, int8 and bool,
// _2 for 16-bit types (float16 too), _4 for 32-bit ones, _8 for 64-bit ones.
//
// grid_mask
//   itab[s*GM_ITAB + k]: 0 src ptr, 1 dst ptr, 2 elements, 3 width, 4 channels
//   ftab[s*GM_FTAB + k]: 0 ca, 1 sa, 2 sx, 3 sy, 4 ratio (grid_mask.grid_mask_params: cos and sin
//                        of the angle and the shifts, pre-scaled by 1 / tile; all float32)
//   Pixel (x, y) is zeroed when the fractional parts of u = x*ca + (-y*sa - sx) and
//   v = x*sa + (y*ca - sy) are both below ratio. Each product and sum is rounded on its own, in
//   the order the CPU's NumPy code takes: the __f*_rn intrinsics keep the compiler from fusing a
//   product and a sum into one FMA (rounded once), which would move pixels on a square's edge.
//
// paste
//   itab[s*PS_ITAB + k]: 0 src ptr, 1 dst ptr, 2 canvas elements, 3 canvas width, 4 image height,
//                        5 image width, 6 y0, 7 x0 (the image's top-left corner on the canvas)
//   fill: the canvas colour, one value per channel, in the sample's type (its bit pattern)

#define GM_ITAB 5
#define GM_FTAB 5
#define PS_ITAB 8

__device__ __forceinline__ bool grid_black(float x, float y, const float* f) {
  float u = __fadd_rn(__fmul_rn(x, f[0]), __fsub_rn(__fmul_rn(-y, f[1]), f[2]));
  float v = __fadd_rn(__fmul_rn(x, f[1]), __fsub_rn(__fmul_rn(y, f[0]), f[3]));
  return __fsub_rn(u, floorf(u)) < f[4] && __fsub_rn(v, floorf(v)) < f[4];
}

template <typename T>
__device__ void grid_mask_impl(const long long* itab, const float* ftab) {
  const long long* it = itab + (long long)blockIdx.y * GM_ITAB;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  long long pixel = p / it[4];
  long long y = pixel / it[3];
  long long x = pixel - y * it[3];
  const T* src = (const T*)it[0];
  T* dst = (T*)it[1];
  // every bit zero is 0 (and +0.0) in each type this moves
  dst[p] = grid_black((float)x, (float)y, ftab + (long long)blockIdx.y * GM_FTAB) ? T(0) : src[p];
}

template <typename T>
__device__ void paste_impl(const long long* itab, const T* fill, int channels) {
  const long long* it = itab + (long long)blockIdx.y * PS_ITAB;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  long long c = p % channels;
  long long pixel = p / channels;
  long long y = pixel / it[3] - it[6];
  long long x = pixel % it[3] - it[7];
  T* dst = (T*)it[1];
  if (y >= 0 && y < it[4] && x >= 0 && x < it[5]) {
    const T* src = (const T*)it[0];
    dst[p] = src[(y * it[5] + x) * channels + c];
  } else {
    dst[p] = fill[c];
  }
}

#define GRID_MASK_PASTE(bytes, T)                                                                    \
  extern "C" __global__ void grid_mask_##bytes(const long long* itab, const float* ftab) {          \
    grid_mask_impl<T>(itab, ftab);                                                                   \
  }                                                                                                  \
  extern "C" __global__ void paste_##bytes(const long long* itab, const T* fill, int channels) {    \
    paste_impl<T>(itab, fill, channels);                                                             \
  }

GRID_MASK_PASTE(1, unsigned char)
GRID_MASK_PASTE(2, unsigned short)
GRID_MASK_PASTE(4, unsigned int)
GRID_MASK_PASTE(8, unsigned long long)
