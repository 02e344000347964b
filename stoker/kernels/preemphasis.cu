// preemphasis_filter over a batch of float32 signals in one buffer: y[i] = x[i] - c * x[i - 1],
// the first sample of each signal against its border value (zero, x[0], or x[1] when it has one).
//
// One grid row per signal (blockIdx.y), threads striding over its samples. The multiply and the
// subtraction are rounded separately (__fmul_rn, __fsub_rn: never contracted to an FMA), as the
// CPU operator's float32 NumPy steps round them, so the outputs are the same to the bit.
//
// table: per signal (element offset in x and y, length); coef: per signal; border: 0 zero,
// 1 clamp, 2 reflect.

extern "C" __global__ void preemphasis_f32(const float* __restrict__ x, float* __restrict__ y,
                                           const long long* __restrict__ table, const float* __restrict__ coef,
                                           int border) {
  const long long s = blockIdx.y;
  const long long off = table[2 * s], size = table[2 * s + 1];
  const float c = coef[s];
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < size; i += step) {
    float prev;
    if (i > 0) {
      prev = x[off + i - 1];
    } else if (border == 0) {
      prev = 0.0f;
    } else if (border == 1 || size < 2) {
      prev = x[off];
    } else {
      prev = x[off + 1];
    }
    y[off + i] = __fsub_rn(x[off + i], __fmul_rn(c, prev));
  }
}
