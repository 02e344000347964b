// Batched Laplacian: every partial derivative is a separable filter, one 1-D pass per spatial
// axis; each pass is one launch over the whole batch (blockIdx.y = sample), in float32, with
// borders mirrored without repeating the edge (OpenCV's BORDER_REFLECT_101, as the CPU's
// cv2.sepFilter2D). A pass reads a sample's input or a float32 scratch and writes a scratch, the
// float32 sum of the partials so far, or (the last pass) the output.
//
// itab[s*40 + k]: 0 input ptr, 1 output ptr, 2 scratch A, 3 scratch B, 4 partial sum (float32),
//                 5 elements; pass q's axis at 8 + 3q: its length, its stride (elements), the
//                 window's radius (q = partial * axes + step, up to 9 passes)
// taps[(s * passes + q) * kmax + t]: pass q's window for sample s (2 * radius + 1 taps).
// Integer outputs round half up and saturate (the CPU's to_dtype); float outputs as computed.

#define LAP_COLS 40

__device__ __forceinline__ long long reflect101(long long i, long long n) {
  if (n == 1) return 0;
  long long period = 2 * n - 2, m = i % period;
  if (m < 0) m += period;
  return m < n ? m : period - m;
}

template <typename T> struct Limits;
template <> struct Limits<unsigned char> { static constexpr float lo = 0.f, hi = 255.f; };
template <> struct Limits<unsigned short> { static constexpr float lo = 0.f, hi = 65535.f; };
template <> struct Limits<short> { static constexpr float lo = -32768.f, hi = 32767.f; };

template <typename T> __device__ __forceinline__ T to_out(float v) {
  return (T)fminf(fmaxf(floorf(v + 0.5f), Limits<T>::lo), Limits<T>::hi);
}
template <> __device__ __forceinline__ float to_out<float>(float v) { return v; }

template <typename In, typename Out>
__device__ void pass_impl(const long long* itab, const float* taps, int passes, int kmax, int q, int src_col,
                          int dst_col, int add) {
  int s = blockIdx.y;
  const long long* it = itab + (long long)s * LAP_COLS;
  long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= it[5]) return;
  long long len = it[8 + 3 * q], stride = it[9 + 3 * q];
  int r = (int)it[10 + 3 * q];
  const In* src = (const In*)it[src_col];
  const float* k = taps + ((long long)s * passes + q) * kmax;
  long long i = (p / stride) % len, base = p - i * stride;
  float acc = 0.f;
  for (int t = -r; t <= r; ++t) acc += k[t + r] * (float)src[base + reflect101(i + t, len) * stride];
  if (add) acc = ((const float*)it[4])[p] + acc;
  ((Out*)it[dst_col])[p] = to_out<Out>(acc);
}

// Two spatial axes (images: HW, HWC, CHW, FHWC ...) in one launch, no scratch: each thread
// computes its element's two partials as the separable passes would (the first pass's value at
// every row of the second pass's window, in float32, then the second pass over them), and adds
// the second partial to the first as the multi-pass path does, so the values are the same. Both
// partials filter the same two axes in the same order (passes 0 / 2 and 1 / 3 differ only in
// their windows). 32-bit indices: the caller keeps samples below 2**31 elements.
__device__ __forceinline__ int fold101(int i, int n) {
  if (i >= 0 && i < n) return i;
  if (n == 1) return 0;
  int period = 2 * n - 2, m = i % period;
  if (m < 0) m += period;
  return m < n ? m : period - m;
}

// R >= 0: every window of the batch has radius R (3 taps: the default window_size), known at
// compile time so that the loops unroll and the column offsets are shared by both partials.
template <typename In, typename Out, int R>
__device__ void lap2d_impl(const long long* itab, const float* taps, int kmax) {
  int s = blockIdx.y;
  const long long* it = itab + (long long)s * LAP_COLS;
  int p = blockIdx.x * blockDim.x + threadIdx.x;
  if (p >= (int)it[5]) return;
  const In* src = (const In*)it[0];
  int la = (int)it[8], sa = (int)it[9], lb = (int)it[11], sb = (int)it[12];
  int ia = (p / sa) % la, ib = (p / sb) % lb, base = p - ia * sa - ib * sb;
  const float* k = taps + (long long)s * 4 * kmax;
  float total = 0.f;
#pragma unroll
  for (int part = 0; part < 2; ++part) {
    const float* ka = k + 2 * part * kmax;
    const float* kb = ka + kmax;
    int ra = R >= 0 ? R : (int)it[10 + 6 * part], rb = R >= 0 ? R : (int)it[13 + 6 * part];
    float acc = 0.f;
#pragma unroll
    for (int tb = -rb; tb <= rb; ++tb) {
      const In* row = src + base + fold101(ib + tb, lb) * sb;
      float first = 0.f;
#pragma unroll
      for (int ta = -ra; ta <= ra; ++ta) first += ka[ta + ra] * (float)row[fold101(ia + ta, la) * sa];
      acc += kb[tb + rb] * first;
    }
    total = part == 0 ? acc : total + acc;
  }
  ((Out*)it[1])[p] = to_out<Out>(total);
}

#define LAP_PASS(IN_NAME, IN, OUT_NAME, OUT)                                                              \
  extern "C" __global__ void lap_pass_##IN_NAME##_##OUT_NAME(const long long* itab, const float* taps,    \
                                                             int passes, int kmax, int q, int src_col,   \
                                                             int dst_col, int add) {                     \
    pass_impl<IN, OUT>(itab, taps, passes, kmax, q, src_col, dst_col, add);                               \
  }                                                                                                       \
  extern "C" __global__ void lap2d_##IN_NAME##_##OUT_NAME(const long long* itab, const float* taps,       \
                                                          int kmax) {                                     \
    lap2d_impl<IN, OUT, -1>(itab, taps, kmax);                                                            \
  }                                                                                                       \
  extern "C" __global__ void lap2d_r1_##IN_NAME##_##OUT_NAME(const long long* itab, const float* taps,    \
                                                             int kmax) {                                  \
    lap2d_impl<IN, OUT, 1>(itab, taps, kmax);                                                             \
  }
#define LAP_PASSES(IN_NAME, IN)               \
  LAP_PASS(IN_NAME, IN, f32, float)           \
  LAP_PASS(IN_NAME, IN, u8, unsigned char)    \
  LAP_PASS(IN_NAME, IN, u16, unsigned short)  \
  LAP_PASS(IN_NAME, IN, i16, short)

LAP_PASSES(f32, float)
LAP_PASSES(u8, unsigned char)
LAP_PASSES(u16, unsigned short)
LAP_PASSES(i16, short)
