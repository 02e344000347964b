// Batched crop / flip of interleaved images of any element type: copies whole pixels
// (bpp bytes each), one launch per batch, per-sample tables (variable shapes).
// itab[s*10 + k]: 0 src ptr, 1 src row stride (bytes), 2 src H, 3 src W, 4 y0, 5 x0,
//                 6 dst H, 7 dst W, 8 flags (bit 0 flip x, bit 1 flip y), 9 dst ptr
// Pixels outside the source are written as zero bytes.
// Pixels are copied in words of W bytes (1, 2 or 4: the host picks the widest that divides bpp and
// every pointer and row stride), ``words`` = bpp / W of them: a float RGB pixel is 3 four-byte
// copies rather than 12 one-byte ones.
template <typename W>
__device__ void crop_flip_impl(const long long* itab, int words) {
  int s = blockIdx.y;
  const long long* it = itab + s * 10;
  int dH = (int)it[6], dW = (int)it[7];
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (long long)dH * dW) return;
  int oy = (int)(p / dW), ox = (int)(p % dW);
  int flags = (int)it[8];
  int sx = (flags & 1) ? dW - 1 - ox : ox;
  int sy = (flags & 2) ? dH - 1 - oy : oy;
  int y = (int)it[4] + sy, x = (int)it[5] + sx;
  W* dst = (W*)it[9] + p * words;
  if (y < 0 || y >= (int)it[2] || x < 0 || x >= (int)it[3]) {
    for (int b = 0; b < words; ++b) dst[b] = 0;
    return;
  }
  const W* src = (const W*)((const unsigned char*)it[0] + (long long)y * it[1]) + (long long)x * words;
  for (int b = 0; b < words; ++b) dst[b] = src[b];
}

extern "C" __global__ void crop_flip(const long long* itab, int bpp) { crop_flip_impl<unsigned char>(itab, bpp); }
extern "C" __global__ void crop_flip_w2(const long long* itab, int words) {
  crop_flip_impl<unsigned short>(itab, words);
}
extern "C" __global__ void crop_flip_w4(const long long* itab, int words) { crop_flip_impl<unsigned int>(itab, words); }
