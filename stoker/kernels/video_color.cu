// NV12 (8-bit 4:2:0, NVDEC's native output) -> interleaved RGB/BGR, computing what the CPU video
// reader's swscale call computes (BILINEAR | ACCURATE_RND | FULL_CHR_H_INT | FULL_CHR_H_INP, see
// stoker/operators/video/_av.py), so that frames decoded on either device are equal, level for level.
// One launch per sample window: blockIdx.y is the frame.
//
// itab[f*5 + k]: 0 Y plane ptr, 1 Y pitch (bytes), 2 UV plane ptr, 3 UV pitch, 4 dst ptr (HWC)
// hx[4*w]: per output column: chroma column a, column b, weight of a, weight of b (sum 1 << 14)
// vy[4*h]: per output row: chroma row a, row b, weight of a, weight of b (sum 1 << 12)
//   (swscale's bilinear filters for the stream's chroma siting, built on the host by
//   gpu_video_reader.chroma_taps; edges repeat the last chroma sample)
// coef: y_offset, y_coeff, v2r, v2g, u2g, u2b (swscale's yuv2rgb_* for the stream's matrix/range)
// kind: bit 0 BGR order; bit 1 float32 output (value * scale when bit 2, else the value)
//
// Steps, as swscale's C code: chroma scaled horizontally to 15 bits (hScale8To15: sum >> 7,
// capped at 32767), vertically to 17 bits with its 12-bit weights (yuv2rgb_full_1: no rounding
// term), luma to 17 bits (y << 9), then yuv2rgb_write_full in wrapping 32-bit arithmetic, clipped
// to 30 bits and shifted by 22. NumPy twin: tests/operators/video/nv12_reference.py.

__device__ __forceinline__ int clip30(int v) {
  // av_clip_uintp2(v, 30): negative (also a sum that wrapped past 2^31) -> 0, above -> 2^30 - 1
  return (v & ~((1 << 30) - 1)) ? ((~v) >> 31) & ((1 << 30) - 1) : v;
}

extern "C" __global__ void nv12_to_rgb(const long long* itab, const int* hx, const int* vy, int h, int w,
                                       const int* coef, int kind, float scale) {
  const long long* it = itab + blockIdx.y * 5;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (long long)h * w) return;
  int y = (int)(p / w), x = (int)(p % w);
  const unsigned char* uv = (const unsigned char*)it[2];
  long long uvp = it[3];
  int a = hx[x], b = hx[w + x], wa = hx[2 * w + x], wb = hx[3 * w + x];
  const unsigned char* r0 = uv + vy[y] * uvp;
  const unsigned char* r1 = uv + vy[h + y] * uvp;
  int u0 = min((r0[2 * a] * wa + r0[2 * b] * wb) >> 7, 32767);
  int v0 = min((r0[2 * a + 1] * wa + r0[2 * b + 1] * wb) >> 7, 32767);
  int u1 = min((r1[2 * a] * wa + r1[2 * b] * wb) >> 7, 32767);
  int v1 = min((r1[2 * a + 1] * wa + r1[2 * b + 1] * wb) >> 7, 32767);
  int ka = vy[2 * h + y], kb = vy[3 * h + y];
  int U = (u0 * ka + u1 * kb - (128 << 19)) >> 10;
  int V = (v0 * ka + v1 * kb - (128 << 19)) >> 10;
  int Y = ((const unsigned char*)it[0])[y * it[1] + x] << 9;
  unsigned yc = (unsigned)((Y - coef[0]) * coef[1] + (1 << 21));
  int R = clip30((int)(yc + (unsigned)V * (unsigned)coef[2])) >> 22;
  int G = clip30((int)(yc + (unsigned)V * (unsigned)coef[3] + (unsigned)U * (unsigned)coef[4])) >> 22;
  int B = clip30((int)(yc + (unsigned)U * (unsigned)coef[5])) >> 22;
  if (kind & 1) {
    int t = R;
    R = B;
    B = t;
  }
  if (kind & 2) {
    float* d = (float*)it[4] + p * 3;
    float s = (kind & 4) ? scale : 1.f;
    d[0] = __fmul_rn((float)R, s);
    d[1] = __fmul_rn((float)G, s);
    d[2] = __fmul_rn((float)B, s);
  } else {
    unsigned char* d = (unsigned char*)it[4] + p * 3;
    d[0] = (unsigned char)R;
    d[1] = (unsigned char)G;
    d[2] = (unsigned char)B;
  }
}
