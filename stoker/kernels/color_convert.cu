// color_space_conversion to or from one channel (GRAY), uint8, one launch per batch. 3-channel to
// 3-channel conversions use linear_color.cu's matrix_u8_u8.
//
// itab[s*3 + k]: 0 src ptr, 1 dst ptr, 2 pixels (samples are contiguous, channel-last)
//
// luma_u8: RGB/BGR -> GRAY as OpenCV's cvtColor computes it for uint8 (what the CPU operator
// calls): integer weights of 15 fractional bits in the pixel's channel order, rounded half up.
// The three weights sum to 1 << 15, so the result never exceeds 255.
//
// affine_u8: out channel c = sum over k of m[c*cin + k] * in[k], then + offset[c], in float32
// with the CPU's order of operations (left to right, the offset last; __f*_rn keeps the compiler
// from fusing multiply-adds), rounded half up and saturated as the CPU's to_dtype. For GRAY ->
// RGB/BGR/YCbCr (cin 1, cout 3), YCbCr -> GRAY (cin 3, cout 1) and GRAY -> GRAY (1, 1).
// ftab[s*12 + k]: the cout x cin matrix row by row from 0, the offsets from 9 (linear_color's
// table layout, read with row length cin).

extern "C" __global__ void luma_u8(const long long* itab, int w0, int w1, int w2) {
  const long long* it = itab + blockIdx.y * 3;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  const unsigned char* src = (const unsigned char*)it[0] + p * 3;
  int v = w0 * src[0] + w1 * src[1] + w2 * src[2];
  ((unsigned char*)it[1])[p] = (unsigned char)((v + (1 << 14)) >> 15);
}

extern "C" __global__ void affine_u8(const long long* itab, const float* ftab, int cin, int cout) {
  const long long* it = itab + blockIdx.y * 3;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[2]) return;
  const unsigned char* src = (const unsigned char*)it[0] + p * cin;
  unsigned char* dst = (unsigned char*)it[1] + p * cout;
  const float* m = ftab + blockIdx.y * 12;
  float x[3];
  for (int k = 0; k < cin; ++k) x[k] = (float)src[k];
  for (int c = 0; c < cout; ++c) {
    const float* row = m + c * cin;
    float v = __fmul_rn(row[0], x[0]);
    for (int k = 1; k < cin; ++k) v = __fadd_rn(v, __fmul_rn(row[k], x[k]));
    v = __fadd_rn(v, m[9 + c]);
    dst[c] = (unsigned char)fminf(fmaxf(floorf(__fadd_rn(v, 0.5f)), 0.f), 255.f);
  }
}
