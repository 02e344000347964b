// box_encoder (SSD matching), two launches per batch, in the CPU operator's float32 arithmetic
// (stoker/operators/detection/box_encoder.py, BoxEncoder.run_sample):
//
// box_best_anchor: one block per ground-truth box (all samples' boxes in one list): the anchor
//   it overlaps most, the last one among equal IoUs (the CPU's "last maximum"). The block reduces
//   the 64-bit key (IoU bits << 32 | anchor): IoUs are never negative nor NaN, so their bits order
//   them as the floats do (a -0.0 is counted as +0.0, which it equals), and among equal IoUs the
//   larger anchor index wins. A box that overlaps nothing claims the last anchor, as on the CPU.
// box_encode: one thread per (anchor, sample) (grid: x over the anchors, y over the samples):
//   the anchor's best box (last maximum over the sample's boxes) if that IoU exceeds criteria,
//   then the boxes that claim the anchor as their best, in box order, so the last claimant wins
//   (the CPU applies the claims after the IoU matches, a later box overwriting an earlier one).
//   Then the encoding: the box in centre form or, with offset, the scaled offsets; and the label
//   row, copied byte for byte (any label type and shape), zeros for an unmatched anchor.
//
// boxes: every sample's boxes, float32 ltrb, back to back; anchors: m ltrb anchors.
// tab[s*BE_COLS + k]: 0 first box of the sample (in boxes), 1 its box count, 2 byte offset of its
//   first label row (in labels), 3 bytes per label row, 4 byte offset of its output labels
// The anchors array holds the m anchors, then the 4 means and the 4 stds (uploaded once per
// operator, as the anchors do not change from batch to batch).
//
// IoU as the CPU computes it: widths clipped at zero, inter = w * h, union = (area_box +
// area_anchor) - inter, inter / union where union > 0 (else 0). Products that feed sums are
// __fmul_rn (never contracted into an FMA, which rounds once where the CPU rounds twice).

#define BE_COLS 5
#define BE_BLOCK 256

__device__ float be_iou(const float* b, const float* a) {
  float w = fminf(b[2], a[2]) - fmaxf(b[0], a[0]);
  float h = fminf(b[3], a[3]) - fmaxf(b[1], a[1]);
  w = w > 0.0f ? w : 0.0f;
  h = h > 0.0f ? h : 0.0f;
  float inter = __fmul_rn(w, h);
  float area_b = __fmul_rn(b[2] - b[0], b[3] - b[1]);
  float area_a = __fmul_rn(a[2] - a[0], a[3] - a[1]);
  float uni = __fadd_rn(area_b, area_a) - inter;
  return uni > 0.0f ? inter / uni : 0.0f;
}

extern "C" __global__ void box_best_anchor(const float* boxes, const float* anchors, int m, int* best) {
  __shared__ unsigned long long keys[BE_BLOCK];
  const float* b = boxes + 4LL * blockIdx.x;
  unsigned long long key = 0;
  for (int a = threadIdx.x; a < m; a += blockDim.x) {
    float iou = be_iou(b, anchors + 4LL * a);
    unsigned long long k = ((unsigned long long)(iou == 0.0f ? 0u : __float_as_uint(iou)) << 32) | (unsigned)a;
    key = k > key ? k : key;
  }
  keys[threadIdx.x] = key;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (threadIdx.x < half && keys[threadIdx.x + half] > keys[threadIdx.x]) keys[threadIdx.x] = keys[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) best[blockIdx.x] = (int)(keys[0] & 0xffffffffu);
}

// the centre form (cx, cy, w, h) of an ltrb box, as the CPU's _center_form
__device__ void be_center(const float* b, float* c) {
  c[0] = (b[0] + b[2]) * 0.5f;
  c[1] = (b[1] + b[3]) * 0.5f;
  c[2] = b[2] - b[0];
  c[3] = b[3] - b[1];
}

extern "C" __global__ void box_encode(const float* boxes, const float* anchors, const int* best,
                                      const long long* tab, const unsigned char* labels, int m,
                                      float criteria, int offset, float scale, float* out, unsigned char* out_labels) {
  int a = blockIdx.x * blockDim.x + threadIdx.x;
  if (a >= m) return;
  const long long* t = tab + (long long)blockIdx.y * BE_COLS;
  long long first = t[0], count = t[1];
  const float* anchor = anchors + 4LL * a;
  const float* mean_std = anchors + 4LL * m;
  long long match = -1;
  float top = -1.0f;
  long long top_box = 0;
  for (long long j = 0; j < count; ++j) {
    float iou = be_iou(boxes + 4 * (first + j), anchor);
    if (iou >= top) { top = iou; top_box = j; }
  }
  if (count > 0 && top > criteria) match = top_box;
  for (long long j = 0; j < count; ++j)
    if (best[first + j] == a) match = j;
  float* o = out + 4 * ((long long)blockIdx.y * m + a);
  float c[4], ac[4];
  be_center(anchor, ac);
  if (match < 0) {
    for (int k = 0; k < 4; ++k) o[k] = offset ? 0.0f : ac[k];
  } else {
    be_center(boxes + 4 * (first + match), c);
    if (!offset) {
      for (int k = 0; k < 4; ++k) o[k] = c[k];
    } else {
      for (int k = 0; k < 4; ++k) { c[k] = c[k] * scale; ac[k] = ac[k] * scale; }
      for (int k = 0; k < 2; ++k) o[k] = ((c[k] - ac[k]) / ac[k + 2] - mean_std[k]) / mean_std[4 + k];
      for (int k = 2; k < 4; ++k) {
        // the ratio in float32, its log in double rounded to float32 (the CPU takes NumPy's
        // float64 log of the float32 ratio)
        float lg = (float)log((double)(c[k] / ac[k]));
        o[k] = (lg - mean_std[k]) / mean_std[4 + k];
      }
    }
  }
  long long row = t[3];
  unsigned char* lo = out_labels + t[4] + row * a;
  const unsigned char* li = labels + t[2] + row * (match < 0 ? 0 : match);
  for (long long k = 0; k < row; ++k) lo[k] = match < 0 ? (unsigned char)0 : li[k];
}
