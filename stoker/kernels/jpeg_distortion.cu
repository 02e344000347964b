// jpeg_compression_distortion: libjpeg-turbo's lossy JPEG round trip (4:2:0, islow DCTs, fancy
// upsampling) as integer arithmetic, two launches per batch. The CUDA twin of
// stoker/operators/filters/jpeg_distortion_model.py, line by line: the functions below carry the
// model's names, work in the same integer steps (64-bit where the model's values could leave 32
// bits: the DCTs, as libjpeg's JLONG), and `>>` of a negative number is arithmetic here as in NumPy.
// See the model's docstring for which libjpeg-turbo step each one reproduces and why the output
// equals the CPU operator's (cv2.imencode + cv2.imdecode) bit for bit.
//
// Work unit: an image (an HWC sample, or one frame of an FHWC sample), H x W x 3 uint8, contiguous.
// tab (int64), one row of TAB_COLS per image with at least one pixel, then the quantization tables:
//   0 src ptr, 1 dst ptr, 2 H, 3 W, 4 scratch ptr, 5 offset in tab of the image's 128 table values
//   (luminance 64, chrominance 64, natural order), 6 the image's first MCU in the batch,
//   7 its first pixel in the batch (6 and 7: exclusive prefix sums, strictly increasing)
// scratch of an image: the decoded Y plane (Hm x Wm, Hm = 16 ceil(H/16), Wm = 16 ceil(W/16)), then
//   the decoded Cb and Cr planes (Hm/2 x Wm/2 each), uint8.
//
// jpeg_mcu: a thread block of 64 per 16x16 MCU: level-shifted samples of its 4 Y blocks and its Cb
//   and Cr blocks in shared memory, forward DCT, quantization, dequantization, inverse DCT (a thread
//   per row or column of a block: 48 busy threads), decoded samples to scratch.
// jpeg_upsample_rgb: a thread per output pixel: the fancy upsampling reads chroma of the
//   neighbouring MCUs, hence the second launch.

#define TAB_COLS 8
#define MCU_THREADS 64

#define SCALEBITS 16
#define ONE_HALF (1 << (SCALEBITS - 1))
#define CBCR_OFFSET (128 << SCALEBITS)
#define CONST_BITS 13
#define PASS1_BITS 2

// FIX(x) at SCALEBITS, as the model's fix()
#define F_0_29900 19595
#define F_0_58700 38470
#define F_0_11400 7471
#define F_0_16874 11059
#define F_0_33126 21709
#define F_0_50000 32768
#define F_0_41869 27439
#define F_0_08131 5329
#define F_1_40200 91881
#define F_0_34414 22554
#define F_0_71414 46802
#define F_1_77200 116130

// FIX(c) at CONST_BITS
#define C0_298 2446LL
#define C0_390 3196LL
#define C0_541 4433LL
#define C0_765 6270LL
#define C0_899 7373LL
#define C1_175 9633LL
#define C1_501 12299LL
#define C1_847 15137LL
#define C1_961 16069LL
#define C2_053 16819LL
#define C2_562 20995LL
#define C3_072 25172LL

// the last image whose start (column col of its row) is at most idx
__device__ __forceinline__ int find_image(const long long* tab, int n, long long idx, int col) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) >> 1;
    if (tab[(long long)mid * TAB_COLS + col] <= idx) lo = mid; else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ long long descale(long long x, int n) { return (x + (1LL << (n - 1))) >> n; }

// rgb_to_ycc, one component (0 Y, 1 Cb, 2 Cr) of one pixel
__device__ __forceinline__ int ycc(const unsigned char* p, int comp) {
  const int r = p[0], g = p[1], b = p[2];
  if (comp == 0) return (F_0_29900 * r + F_0_58700 * g + F_0_11400 * b + ONE_HALF) >> SCALEBITS;
  if (comp == 1) return (-F_0_16874 * r - F_0_33126 * g + F_0_50000 * b + CBCR_OFFSET + ONE_HALF - 1) >> SCALEBITS;
  return (F_0_50000 * r - F_0_41869 * g - F_0_08131 * b + CBCR_OFFSET + ONE_HALF - 1) >> SCALEBITS;
}

// _fdct_1d: d[0..7] in, out[0..7] out; last: the column pass
__device__ void fdct_1d(const long long* d, long long* out, bool last) {
  long long t0 = d[0] + d[7], t7 = d[0] - d[7];
  long long t1 = d[1] + d[6], t6 = d[1] - d[6];
  long long t2 = d[2] + d[5], t5 = d[2] - d[5];
  long long t3 = d[3] + d[4], t4 = d[3] - d[4];
  const long long t10 = t0 + t3, t13 = t0 - t3;
  const long long t11 = t1 + t2, t12 = t1 - t2;
  int sh;
  if (last) {
    out[0] = descale(t10 + t11, PASS1_BITS);
    out[4] = descale(t10 - t11, PASS1_BITS);
    sh = CONST_BITS + PASS1_BITS;
  } else {
    out[0] = (t10 + t11) << PASS1_BITS;
    out[4] = (t10 - t11) << PASS1_BITS;
    sh = CONST_BITS - PASS1_BITS;
  }
  long long z1 = (t12 + t13) * C0_541;
  out[2] = descale(z1 + t13 * C0_765, sh);
  out[6] = descale(z1 - t12 * C1_847, sh);
  z1 = t4 + t7;
  long long z2 = t5 + t6, z3 = t4 + t6, z4 = t5 + t7;
  const long long z5 = (z3 + z4) * C1_175;
  t4 = t4 * C0_298;
  t5 = t5 * C2_053;
  t6 = t6 * C3_072;
  t7 = t7 * C1_501;
  z1 = z1 * -C0_899;
  z2 = z2 * -C2_562;
  z3 = z3 * -C1_961 + z5;
  z4 = z4 * -C0_390 + z5;
  out[7] = descale(t4 + z1 + z3, sh);
  out[5] = descale(t5 + z2 + z4, sh);
  out[3] = descale(t6 + z2 + z3, sh);
  out[1] = descale(t7 + z1 + z4, sh);
}

// _idct_1d: c[0..7] in, out[0..7] out; last: the row pass
__device__ void idct_1d(const long long* c, long long* out, bool last) {
  long long z2 = c[2], z3 = c[6];
  long long z1 = (z2 + z3) * C0_541;
  long long t2 = z1 - z3 * C1_847;
  long long t3 = z1 + z2 * C0_765;
  long long t0 = (c[0] + c[4]) << CONST_BITS;
  long long t1 = (c[0] - c[4]) << CONST_BITS;
  const long long t10 = t0 + t3, t13 = t0 - t3, t11 = t1 + t2, t12 = t1 - t2;
  t0 = c[7];
  t1 = c[5];
  t2 = c[3];
  t3 = c[1];
  z1 = t0 + t3;
  z2 = t1 + t2;
  z3 = t0 + t2;
  long long z4 = t1 + t3;
  const long long z5 = (z3 + z4) * C1_175;
  t0 = t0 * C0_298;
  t1 = t1 * C2_053;
  t2 = t2 * C3_072;
  t3 = t3 * C1_501;
  z1 = z1 * -C0_899;
  z2 = z2 * -C2_562;
  z3 = z3 * -C1_961 + z5;
  z4 = z4 * -C0_390 + z5;
  t0 = t0 + z1 + z3;
  t1 = t1 + z2 + z4;
  t2 = t2 + z2 + z3;
  t3 = t3 + z1 + z4;
  const int sh = last ? CONST_BITS + PASS1_BITS + 3 : CONST_BITS - PASS1_BITS;
  out[0] = descale(t10 + t3, sh);
  out[1] = descale(t11 + t2, sh);
  out[2] = descale(t12 + t1, sh);
  out[3] = descale(t13 + t0, sh);
  out[4] = descale(t13 - t0, sh);
  out[5] = descale(t12 - t1, sh);
  out[6] = descale(t11 - t2, sh);
  out[7] = descale(t10 - t3, sh);
}

// range_limit: a 10-bit two's-complement wrap, +128, clamp to 0..255
__device__ __forceinline__ unsigned char range_limit(long long v) {
  const long long w = ((v + 512) & 1023) - 512 + 128;
  return (unsigned char)(w < 0 ? 0 : (w > 255 ? 255 : w));
}

// quantize then dequantize one coefficient (rounded division by 8 q, half away from zero; times q)
__device__ __forceinline__ long long requantize(long long x, long long q) {
  const long long d = q << 3;
  const long long mag = ((x < 0 ? -x : x) + (d >> 1)) / d;
  return (x < 0 ? -mag : mag) * q;
}

// The level-shifted sample k (row-major in its 8x8 block) of MCU block b (0..3: the Y blocks,
// left to right then top to bottom; 4 Cb; 5 Cr), from the image with the codec's edge rules:
// the last column and row repeated; chroma from rows made even, its own last row repeated
// (the model's round_trip and downsample).
__device__ int mcu_sample(const unsigned char* src, int h, int w, int my, int mx, int b, int k) {
  const int r = k >> 3, c = k & 7;
  if (b < 4) {
    const int py = min(my * 16 + (b >> 1) * 8 + r, h - 1);
    const int px = min(mx * 16 + (b & 1) * 8 + c, w - 1);
    return ycc(src + ((long long)py * w + px) * 3, 0) - 128;
  }
  const int ch = (h + 1) >> 1;
  const int gr = min(my * 8 + r, ch - 1);
  const int gc = mx * 8 + c;
  const int y0 = 2 * gr, y1 = min(2 * gr + 1, h - 1);
  const int x0 = min(2 * gc, w - 1), x1 = min(2 * gc + 1, w - 1);
  const int comp = b - 3;
  const int s = ycc(src + ((long long)y0 * w + x0) * 3, comp) + ycc(src + ((long long)y0 * w + x1) * 3, comp) +
                ycc(src + ((long long)y1 * w + x0) * 3, comp) + ycc(src + ((long long)y1 * w + x1) * 3, comp);
  return ((s + 1 + (gc & 1)) >> 2) - 128;
}

extern "C" __global__ void jpeg_mcu(const long long* tab, int n) {
  __shared__ int blk[6][64];
  const int t = threadIdx.x;
  const long long mcu = blockIdx.x;
  const int i = find_image(tab, n, mcu, 6);
  const long long* row = tab + (long long)i * TAB_COLS;
  const unsigned char* src = (const unsigned char*)row[0];
  unsigned char* scratch = (unsigned char*)row[4];
  const int h = (int)row[2], w = (int)row[3];
  const long long* qt = tab + row[5];
  const int mcus_x = (w + 15) >> 4;
  const int m = (int)(mcu - row[6]);
  const int my = m / mcus_x, mx = m % mcus_x;
  for (int s = t; s < 6 * 64; s += MCU_THREADS) blk[s >> 6][s & 63] = mcu_sample(src, h, w, my, mx, s >> 6, s & 63);
  __syncthreads();
  const int b = t >> 3, k = t & 7;  // threads 0..47: block b, row or column k
  const bool busy = t < 48;
  const long long* q = qt + (b < 4 ? 0 : 64);
  long long in[8], out[8];
  if (busy) {  // forward DCT, rows
    for (int j = 0; j < 8; ++j) in[j] = blk[b][k * 8 + j];
    fdct_1d(in, out, false);
    for (int j = 0; j < 8; ++j) blk[b][k * 8 + j] = (int)out[j];
  }
  __syncthreads();
  if (busy) {  // forward DCT, columns; quantization and dequantization; inverse DCT, columns
    for (int j = 0; j < 8; ++j) in[j] = blk[b][j * 8 + k];
    fdct_1d(in, out, true);
    for (int j = 0; j < 8; ++j) in[j] = requantize(out[j], q[j * 8 + k]);
    idct_1d(in, out, false);
    for (int j = 0; j < 8; ++j) blk[b][j * 8 + k] = (int)out[j];
  }
  __syncthreads();
  if (busy) {  // inverse DCT, rows; decoded samples to scratch
    for (int j = 0; j < 8; ++j) in[j] = blk[b][k * 8 + j];
    idct_1d(in, out, true);
    const long long wm = (long long)mcus_x * 16, hm = (long long)((h + 15) >> 4) * 16;
    unsigned char* dst;
    if (b < 4) {
      dst = scratch + (my * 16 + (b >> 1) * 8 + k) * wm + mx * 16 + (b & 1) * 8;
    } else {
      dst = scratch + hm * wm + (b - 4) * (hm * wm / 4) + (my * 8 + k) * (wm / 2) + mx * 8;
    }
    for (int j = 0; j < 8; ++j) dst[j] = range_limit(out[j]);
  }
}

// fancy_upsample of one output pixel (y, x) from a decoded chroma plane c (ch x cw, pitch p)
__device__ __forceinline__ int upsample(const unsigned char* c, long long p, int ch, int cw, int y, int x) {
  const int i = y >> 1, j = x >> 1;
  if (cw <= 2) return c[i * p + j];  // h2v2_upsample: replication
  const int nb = (y & 1) ? min(i + 1, ch - 1) : max(i - 1, 0);  // the row below (odd y) or above
  const int v = 3 * c[i * p + j] + c[nb * p + j];
  if (x & 1) {
    const int jr = min(j + 1, cw - 1);
    return (3 * v + 3 * c[i * p + jr] + c[nb * p + jr] + 7) >> 4;
  }
  const int jl = max(j - 1, 0);
  return (3 * v + 3 * c[i * p + jl] + c[nb * p + jl] + 8) >> 4;
}

__device__ __forceinline__ unsigned char clamp255(int v) { return (unsigned char)(v < 0 ? 0 : (v > 255 ? 255 : v)); }

extern "C" __global__ void jpeg_upsample_rgb(const long long* tab, int n, long long total) {
  const long long pix = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (pix >= total) return;
  const int i = find_image(tab, n, pix, 7);
  const long long* row = tab + (long long)i * TAB_COLS;
  const int h = (int)row[2], w = (int)row[3];
  const long long local = pix - row[7];
  const int y = (int)(local / w), x = (int)(local % w);
  const unsigned char* scratch = (const unsigned char*)row[4];
  const long long wm = (long long)((w + 15) >> 4) * 16, hm = (long long)((h + 15) >> 4) * 16;
  const int ch = (h + 1) >> 1, cw = (w + 1) >> 1;
  const int yy = scratch[y * wm + x];
  const int cb = upsample(scratch + hm * wm, wm / 2, ch, cw, y, x) - 128;
  const int cr = upsample(scratch + hm * wm + hm * wm / 4, wm / 2, ch, cw, y, x) - 128;
  unsigned char* dst = (unsigned char*)row[1] + local * 3;
  // ycc_to_rgb
  dst[0] = clamp255(yy + ((F_1_40200 * cr + ONE_HALF) >> SCALEBITS));
  dst[1] = clamp255(yy + ((-F_0_34414 * cb + ONE_HALF - F_0_71414 * cr) >> SCALEBITS));
  dst[2] = clamp255(yy + ((F_1_77200 * cb + ONE_HALF) >> SCALEBITS));
}
