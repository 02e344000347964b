"""``random_bbox_crop``'s search for a whole batch (``RandomBBoxCrop.run_batch``): ``_search`` for
every sample at once, reading each sample's draws where run_sample reads them, with its arithmetic
element by element, so the windows are the same to the bit."""

from __future__ import annotations

import numpy as np

from stoker.random_state import key_uniforms_at

# Without total_num_attempts DALI searches forever; we stop with an error rather than hang.
SAFETY_LIMIT = 100_000
# The batch path: rounds before the samples still searching go to run_sample (with total_num_attempts:
# up to its end, at most _BATCH_ROUNDS_CAP); rounds per step (their thresholds drawn at once: the
# rounds after a sample's first "no crop", or after one that finds a window, are never judged); most
# elements (samples x attempts x boxes) per NumPy step.
_BATCH_ROUNDS, _BATCH_ROUNDS_CAP, _ROUNDS_AT_ONCE, _CHUNK_ELEMENTS = 64, 2048, 16, 1 << 20
# A round's candidates are drawn and judged in these ranges, in order: most rows find a window in
# the first few, and the later ranges' draws are only read for the rows still searching.
_RANGES = (0, 4)
# Within a range, the candidates that may be valid are judged in blocks: first these many, then the rest.
_JUDGE_BLOCKS = (6,)


def _put(out, local, anchor, shape, kept):
    """Windows (anchor, shape: (nd, rows)) into rows ``local`` of ``out`` (found or score, anchor,
    shape, kept)."""
    if local.size:
        if out[0].dtype == bool:
            out[0][local] = True
        out[1][local], out[2][local] = anchor.T, shape.T
        if kept is not None:
            out[3][local] = kept


class BatchSearch:
    """``RandomBBoxCrop._search`` for a batch: per round, the samples still searching read their
    draws where run_sample reads them, with its arithmetic element by element. Boxes are padded to
    the batch's most (masked) and stacked per dimension (nd, samples, boxes); candidates are drawn
    and judged in ranges and blocks (later ones only where no window was found: the first one
    wins), metrics laid out (boxes, candidates). Work whose result cannot matter is skipped, and so
    are its draws (counter-based, so the others' do not move): a sample's rounds after its first
    "no crop" or after one that finds a window; rounds whose threshold no window can meet (bounds
    that hold for every window, _hopeless); candidates that fail the sample's smallest box."""

    def __init__(self, op, keys, lo, hi, real, counts, in_shape, crop_shape):
        self.args, self.keys, self.real, self.counts = op.args, keys, real, counts
        self.lo, self.hi = lo, hi  # (nd, n, most boxes)
        self.in_shape, self.crop_shape = in_shape, crop_shape
        self.nd = lo.shape[0]
        # centres and areas of the boxes, computed as run_sample computes them
        self.centre = (lo + hi) * 0.5
        self.area = area = np.prod(hi - lo, 0)  # (in order, as np.prod(hi - lo, -1) in _metrics)
        self.area_max = np.where(real, area, -np.inf).max(1, initial=-np.inf)
        self.area_min = np.where(real, area, np.inf).min(1, initial=np.inf)
        a = self.args
        ar = np.asarray(a["aspect_ratio"], np.float64).reshape(-1, 2)
        self.ar = np.repeat(ar, 3, 0) if self.nd == 3 and ar.shape[0] == 1 else ar
        # the IoU bound of _may_meet applies (see there)
        self.bound = a["total_num_attempts"] <= 0 and a["threshold_type"] == "iou"
        # Where every box must meet the threshold (and no score is kept), candidates are first judged
        # against one box alone, each sample's smallest (the one a window most often fails): most
        # rounds of a hard threshold then end there, on arrays without a boxes axis.
        self.first_box = None
        if a["total_num_attempts"] <= 0 and a["all_boxes_above_threshold"] and real.shape[1] > 1:
            b = np.where(real, area, np.inf).argmin(1)
            i = np.arange(b.size)
            self.first_box = np.concatenate([lo[:, i, b], hi[:, i, b], area[None, i, b]])  # (2 nd + 1, n)
        # With threshold 0 every IoU (never NaN) meets it, with any box: only the kept boxes (centres
        # inside) decide, with the default rule (no score kept).
        self.zero_kept = a["total_num_attempts"] <= 0 and a["bbox_prune_threshold"] is None
        # _judge's layout: (values, boxes, samples), so that a gather of the samples of its candidates
        # puts the candidates on the last axis (long inner loops, reductions over boxes across rows)
        self.box_t = np.ascontiguousarray(np.concatenate([lo, hi, self.centre, area[None]]).transpose(0, 2, 1))
        self.real_t = np.ascontiguousarray(real.T)

    def run(self):
        """(anchor (n, nd), shape (n, nd), kept-box mask (n, most boxes), samples left to run_sample)."""
        a, nd, n = self.args, self.nd, self.real.shape[0]
        n_thr = len(a["thresholds"])
        n_opt = n_thr + int(bool(a["allow_no_crop"]))
        thresholds = np.array(list(a["thresholds"]), np.float64)
        track_best = a["total_num_attempts"] > 0
        per_candidate = nd if self.crop_shape is not None else 2 * nd
        ks, final = self._schedule()
        hopeless = self._hopeless(thresholds)
        # results start as "no crop"; the best window so far counts with total_num_attempts
        self.anchor, self.shape, self.keep = np.zeros((n, nd)), np.ones((n, nd)), self.real.copy()
        best = (np.full(n, -np.inf), np.zeros((n, nd)), np.ones((n, nd)), self.real.copy())
        active, q, drawn = np.arange(n), 0, 0
        while active.size and q < len(ks):
            k, rounds = ks[q], 1  # this step's rounds: those of the same k, up to _ROUNDS_AT_ONCE
            while rounds < _ROUNDS_AT_ONCE and ks[q + rounds:q + rounds + 1] == [k]:
                rounds += 1
            # a round's draws: the threshold, the shapes, the anchors (all read when judged)
            starts = drawn + np.arange(rounds) * (1 + per_candidate * k)
            u = key_uniforms_at(self.keys[active][:, None], starts).reshape(-1)  # (sample, round) pairs
            drawn += rounds * (1 + per_candidate * k)
            opt = np.minimum((u * n_opt).astype(np.int64), n_opt - 1)  # SampleRNG.integers
            crop = opt < n_thr  # else "no crop": the sample is done, with the start values
            rows = np.repeat(active, rounds)
            # judged: crop rounds before the sample's first "no crop" (which ends it whatever comes after)
            judged = np.logical_and.accumulate(crop.reshape(active.size, rounds), 1).reshape(-1)
            if hopeless is not None:  # and not ruled out
                judged &= ~hopeless[rows, np.minimum(opt, n_thr - 1)]
            pick, (found, anchor, shape, keep, top) = self._judge_rounds(
                rows, np.tile(starts, active.size), thresholds[np.minimum(opt, n_thr - 1)], judged, rounds, k,
                track_best)
            done = ~crop
            done[pick] = found
            done = done.reshape(active.size, rounds)
            first = np.arange(active.size) * rounds + done.argmax(1)  # the pair that ends the search
            ended = done.any(1)
            judged[:] = False
            judged[pick] = True
            at = np.cumsum(judged) - 1  # a judged pair's position in pick
            won = ended & crop[first]
            r, p = active[won], at[first[won]]
            self.anchor[r], self.shape[r], self.keep[r] = anchor[p], shape[p], keep[p]
            active, q = active[~ended], q + rounds
            for j in range(rounds if track_best else 0):  # all these rounds searched: their best, in order
                p = at[np.flatnonzero(~ended) * rounds + j]
                up = top[0][p] > best[0][active]
                for x, y in zip(best, top):
                    x[active[up]] = y[p[up]]
            if final and q == len(ks):  # the best window, else no crop
                took = active[best[0][active] > -np.inf]
                self.anchor[took], self.shape[took], self.keep[took] = best[1][took], best[2][took], best[3][took]
                active = active[:0]
        return self.anchor, self.shape, self.keep, active.tolist()

    def _judge_rounds(self, rows, starts, thr, judged, rounds, k, track_best):
        """_rounds of the (sample, round) pairs ``judged`` ((samples * rounds,) sample-major): first
        each sample's first, then the others of the samples whose first found no window (a round
        after one that found a window does not matter). (The pairs judged, in order; _rounds'
        results for them.)"""
        judged = judged.reshape(-1, rounds)
        head = judged & (np.cumsum(judged, 1) == 1)
        a = np.flatnonzero(head)
        first = self._rounds(rows[a], starts[a], thr[a], k, track_best)
        searching = np.ones(judged.shape[0], bool)
        searching[a // rounds] = ~first[0]
        b = np.flatnonzero(judged & ~head & searching[:, None])
        if not b.size:
            return a, first
        then = self._rounds(rows[b], starts[b], thr[b], k, track_best)
        order = np.argsort(np.concatenate([a, b]), kind="stable")
        pick = np.concatenate([a, b])[order]
        both = [np.concatenate([x, y])[order] for x, y in zip(first[:4], then[:4])]
        top = tuple(np.concatenate([x, y])[order] for x, y in zip(first[4], then[4])) if track_best else None
        return pick, (*both, top)

    def _hopeless(self, thresholds):
        """(n, thresholds) True where no window can meet the threshold: _may_meet's bound rules out
        every area (with all_boxes_above_threshold, an area within [t * max, min / t] of the boxes'
        areas needs t^2 * max <= min; the margin covers the roundings), so a round with it fails
        whatever its windows, whose draws need not even be read. None where not used."""
        if not self.bound or not self.args["all_boxes_above_threshold"]:
            return None
        t = thresholds * (1 - 1e-9)  # as _may_meet
        with np.errstate(invalid="ignore"):  # (no boxes: 0 * -inf is NaN, never hopeless)
            out = (t * t)[None, :] * self.area_max[:, None] > self.area_min[:, None] * (1 + 1e-6)
        if self.in_shape is None and self.crop_shape is None:
            out |= self._no_interval(t)
        return out

    def _no_interval(self, t):
        """(n, thresholds) True where, along some dimension, no window extent (in scaling's range)
        at any position has a 1-D IoU of ``t`` with every box: a box's IoU is at most its 1-D IoU
        along each dimension, so no window meets the threshold. A 1-D IoU of t with a box [l, r]
        of extent b needs an overlap o >= c (w + b), c = t / (1 + t): with the window [x, x + w],
        x + w - l >= o, r - x >= o, w >= o and b >= o; these with 0 <= x <= 1 - w bound w above and
        below, linearly (x eliminated), by A = max(l + c b) and R = min(r - c b) over the boxes:
        w >= c max(b) / (1 - c), (A - R) / (1 - 2c); w <= (1 - c) min(b) / c, R / c, (1 - A) / c.
        Only thresholds in (0, 0.99] (c well below 1/2); margins cover the roundings. (Checked:
        tests/operators/detection/test_bbox_crop_search.py.)"""
        smin, smax = self.args["scaling"]
        wmin, wmax = smin - 1e-7, min(1.0, smax + 1e-7)  # _shapes' checks of every extent
        ok = (t > 0) & (t <= 0.99)
        out = np.zeros((self.real.shape[0], t.size), bool)
        if not ok.any() or not self.real.shape[1]:
            return out
        c = t[ok] / (1 + t[ok])
        nd, real = self.nd, self.real_t
        lo, hi = self.box_t[:nd], self.box_t[nd:2 * nd]  # (dimensions, boxes, samples)
        b = np.where(real, hi - lo, 0.0)  # (no box: b = 0, l = -inf, r = inf: never a bound)
        cb = c[:, None, None] * b[:, None]  # (dimensions, thresholds, boxes, samples)
        a = (np.where(real, lo, -np.inf)[:, None] + cb).max(2)
        r = (np.where(real, hi, np.inf)[:, None] - cb).min(2)
        c = c[:, None]
        low = np.maximum(np.maximum(c / (1 - c) * b.max(1)[:, None], (a - r) / (1 - 2 * c)), wmin)
        high = np.minimum(np.minimum((1 - c) / c * np.where(real, b, np.inf).min(1)[:, None],
                                     np.minimum(r, 1 - a) / c), wmax)
        out[:, ok] = (low > high + 1e-9).any(0).T
        # and the window's area, at least the product of those lower bounds, must be at most the
        # smallest box's area / t (IoU <= box area / window area)
        out[:, ok] |= (low.prod(0) * t[ok][:, None] > self.area_min * (1 + 1e-6)).T
        return out & (self.counts > 0)[:, None]

    def _schedule(self):
        """The candidates of each round _search runs, up to the batch path's limit; and whether the
        search ends after the last (with the best window) rather than going on (in run_sample)."""
        n_att, total_limit = self.args["num_attempts"], self.args["total_num_attempts"]
        if total_limit <= 0:
            return [n_att] * min(_BATCH_ROUNDS, (SAFETY_LIMIT - 1) // n_att), False
        ks, used = [], 0
        while len(ks) < _BATCH_ROUNDS_CAP:
            k = max(0, min(n_att, total_limit - used))
            ks.append(k)
            used += k
            if used >= total_limit or used >= SAFETY_LIMIT:
                return ks, True
        return ks, False

    def _rounds(self, rows, at, thr, k, track_best):
        """_round over ``rows`` in pieces of at most _CHUNK_ELEMENTS (candidates x boxes)."""
        step = max(1, _CHUNK_ELEMENTS // max(1, k * self.real.shape[1]))
        if rows.size <= step:
            return self._round(rows, at, thr, k, track_best)
        parts = [self._round(rows[c:c + step], at[c:c + step], thr[c:c + step], k, track_best)
                 for c in range(0, rows.size, step)]
        found, anchor, shape, keep = (np.concatenate([x[i] for x in parts]) for i in range(4))
        top = tuple(np.concatenate([x[4][i] for x in parts]) for i in range(4)) if track_best else None
        return found, anchor, shape, keep, top

    def _round(self, rows, at, thr, k, track_best):
        """A round of ``k`` candidates for each of ``rows`` (sample indices, repeats allowed): (found,
        anchor (rows, nd), shape, kept boxes (rows, most boxes), top): the window where found; with
        ``track_best`` top is the round's best (score (-inf: none), anchor, shape, kept boxes).
        ``at``: where each row's round starts in its stream (its threshold draw)."""
        r, nd, most = rows.size, self.nd, self.real.shape[1]
        out = (np.zeros(r, bool), np.zeros((r, nd)), np.ones((r, nd)), np.zeros((r, most), bool))
        top = (np.full(r, -np.inf), np.zeros((r, nd)), np.ones((r, nd)), np.zeros((r, most), bool)) \
            if track_best else None
        keys, boxed = self.keys[rows], self.counts[rows] > 0
        left = np.arange(r)  # the rows still searching
        for s, e in zip(_RANGES, _RANGES[1:] + (k,)):
            e = min(e, k)
            if e <= s or not left.size:
                continue
            sel = rows[left]
            shape = self._shapes(keys[left], at[left], s, e, k, sel)  # (nd, left, e - s)
            shaped = ~np.isnan(shape[0])
            empty = np.flatnonzero(~boxed[left] & shaped.any(1))  # no boxes: the first window of a valid shape
            if empty.size:
                j = shaped[empty].argmax(1)
                size = shape[:, empty, j]
                _put(out, left[empty], self._anchors(keys[left[empty]], at[left[empty]], s + j, size, k,
                                                     sel[empty]), size, None)
            # The candidates that may be valid, in order, packed to the left of each row; candidates
            # ruled out (bad shape, or an IoU bound) are invalid anyway.
            some = np.flatnonzero(boxed[left])
            maybe = shaped[some] & self._may_meet(sel[some], thr[left[some]], shape[:, some])
            count = maybe.sum(1)
            some, maybe, count = some[count > 0], maybe[count > 0], count[count > 0]
            if some.size:
                order = np.argsort(~maybe, 1, kind="stable")[:, :int(count.max())]  # (rows, c), repeats pad
                real = np.arange(order.shape[1])[None, :] < count[:, None]
                size = shape[:, some[:, None], order]
                sub = left[some]
                anchor = self._anchors(keys[sub][:, None], at[sub][:, None], s + order, size, k, sel[some][:, None])
                if self.zero_kept:  # threshold 0: every IoU meets it, only the kept boxes decide
                    zero = thr[sub] == 0
                    if zero.any():
                        z = np.flatnonzero(zero)
                        self._judge_blocks(out, top, sub[z], sel[some[z]], thr[sub[z]], anchor[:, z], size[:, z],
                                           real[z], track_best, kept_only=True)
                        z = np.flatnonzero(~zero)
                        some, sub, real, size, anchor = some[z], sub[z], real[z], size[:, z], anchor[:, z]
                        if not z.size:
                            left = left[~out[0][left]]
                            continue
                if self.first_box is not None:  # those that fail one box are out (and stay in order)
                    meets = self._meets_one(sel[some], thr[sub], anchor, size) & real
                    count = meets.sum(1)
                    on = np.flatnonzero(count)
                    if not on.size:
                        left = left[~out[0][left]]
                        continue
                    some, sub, count = some[on], sub[on], count[on]
                    order = np.argsort(~meets[on], 1, kind="stable")[:, :int(count.max())]
                    real = np.arange(order.shape[1])[None, :] < count[:, None]
                    size, anchor = size[:, on[:, None], order], anchor[:, on[:, None], order]
                self._judge_blocks(out, top, sub, sel[some], thr[sub], anchor, size, real, track_best)
            left = left[~out[0][left]]
        return (*out, top)

    def _judge_blocks(self, out, top, sub, rows, thr, anchor, shape, real, track_best, kept_only=False):
        """_judge the candidates (anchor, shape: (nd, rows, c); ``real``: (rows, c) the packed ones,
        in order) of rows ``sub`` of ``out`` (samples ``rows``) in blocks of columns, a row leaving
        at its first valid window: into ``out``, and the best score of each into ``top``."""
        start, idx = 0, np.arange(sub.size)
        for stop in _JUDGE_BLOCKS + (anchor.shape[2],):
            idx = idx[real[idx, start]] if start < anchor.shape[2] else idx[:0]  # those with candidates left
            if stop <= start or not idx.size:
                break
            a, z = anchor[:, idx, start:stop], shape[:, idx, start:stop]
            valid, kept, score = self._judge(rows[idx], thr[idx], a, z, track_best, kept_only)
            valid &= real[idx, start:stop]
            hit = valid.any(1)
            j = valid.argmax(1)[hit]
            _put(out, sub[idx[hit]], a[:, hit, j], z[:, hit, j], kept[:, hit, j].T)
            if track_best:  # the first maximum over all blocks (and ranges): a later one must beat it
                score = np.where(real[idx, start:stop], score, -np.inf)
                j = score.argmax(1)
                best = score[np.arange(idx.size), j]
                up = best > top[0][sub[idx]]
                top[0][sub[idx[up]]] = best[up]
                j = j[up]
                _put(top, sub[idx[up]], a[:, up, j], z[:, up, j], kept[:, up, j].T)
            idx, start = idx[~hit], stop

    def _meets_one(self, rows, thr, anchor, shape):
        """(rows, c): whether the candidates (anchor, shape: (nd, rows, c)) meet the threshold with
        the rows' first box (``first_box``), with _judge's arithmetic (so the same values as there)."""
        nd, c = self.nd, anchor.shape[2]
        box = np.repeat(self.first_box[:, rows], c, axis=1)  # (values, rows * c)
        anchor, shape = anchor.reshape(nd, -1), shape.reshape(nd, -1)
        w = np.minimum(box[nd:2 * nd], anchor + shape)
        w -= np.maximum(box[:nd], anchor)
        np.maximum(w, 0, out=w)
        inter = w[0] * w[1] if nd == 2 else w[0] * w[1] * w[2]
        box_area = box[2 * nd]
        if self.args["threshold_type"] == "overlap":
            metric = np.divide(inter, box_area, out=(inter > 0).astype(np.float64), where=box_area > 0)
        else:
            area = shape[0] * shape[1] if nd == 2 else shape[0] * shape[1] * shape[2]
            union = box_area + area - inter
            metric = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        return (metric >= np.repeat(thr, c)).reshape(rows.size, c)

    def _may_meet(self, rows, thr, shape):
        """(rows, c): False where the window's area alone rules out an IoU of ``thr`` with every
        box (with any box, for all_boxes_above_threshold=False): IoU <= min(area) / max(area), and
        the computed IoU stays within a few ulps of that bound, far inside the 1e-9 margin."""
        if not self.bound:
            return np.ones((rows.size, 1), bool)  # (every candidate's score counts)
        area = shape[0] * shape[1] if self.nd == 2 else shape[0] * shape[1] * shape[2]
        t = (thr * (1 - 1e-9))[:, None]
        big, small = self.area_max[rows, None], self.area_min[rows, None]
        if self.args["all_boxes_above_threshold"]:
            return (area >= t * big) & (small >= t * area)
        return (area >= t * small) & (big >= t * area)

    def _shapes(self, keys, at, s, e, k, rows):
        """RandomBBoxCrop._candidates' window shapes of candidates s..e-1 of rounds of ``k``, for
        rows whose rounds start at ``at`` in the streams ``keys``: (nd, rows, e - s), NaN where the
        aspect checks fail."""
        nd = self.nd
        if self.crop_shape is not None:
            size = self.crop_shape[rows] / self.in_shape[rows]
            return np.broadcast_to(size.T[:, :, None], (nd, rows.size, e - s))
        # dimension d of candidate j: draw 1 + d * k + j of the round
        u = key_uniforms_at(keys[:, None, None], (at + 1)[:, None, None] + (np.arange(nd) * k)[None, :, None]
                            + np.arange(s, e))
        in_shape = None if self.in_shape is None else self.in_shape[rows]
        smin, smax = self.args["scaling"]
        ar = self.ar
        shape = np.empty((nd, rows.size, e - s))
        first = shape[0]
        np.add(smin, (smax - smin) * u[:, 0], out=first)  # SampleRNG.uniform: low + (high - low) * u
        for d in range(1, nd):
            ratio = ar[d - 1, 0] + (ar[d - 1, 1] - ar[d - 1, 0]) * u[:, d]
            if in_shape is None:  # (x * 1.0 is x: the same values as with rel = 1)
                np.divide(first, ratio, out=shape[d])
            else:
                np.divide(first * in_shape[:, 0:1], ratio * in_shape[:, d:d + 1], out=shape[d])
        ok = (shape <= 1.0).all(0)
        if in_shape is None:
            ok &= ((shape >= smin - 1e-7) & (shape <= smax + 1e-7)).all(0)
        if nd == 3:
            rel = np.ones((1, nd)) if in_shape is None else in_shape
            yz = (shape[1] * rel[:, 1:2]) / (shape[2] * rel[:, 2:3])
            ok &= (yz >= ar[2, 0] * (1 - 1e-6)) & (yz <= ar[2, 1] * (1 + 1e-6))
        np.copyto(shape, np.nan, where=~ok)
        return shape

    def _anchors(self, keys, at, j, size, k, rows):
        """RandomBBoxCrop._candidates' anchors (nd, ...) of candidates ``j`` of rounds of ``k`` that
        start at ``at`` in the streams ``keys``, of shapes ``size`` (nd, ...), all broadcast
        together: their draws are read here (candidate j's: head + j * nd + d of the round)."""
        nd = self.nd
        head = 1 if self.crop_shape is not None else 1 + nd * k
        u = key_uniforms_at(keys[..., None], (at + head + j * nd)[..., None] + np.arange(nd))
        u = np.moveaxis(u, -1, 0)
        if self.crop_shape is not None:  # whole pixels: floor(u * span) / input_shape
            shape = np.moveaxis(self.in_shape[rows], -1, 0)
            span = np.moveaxis((self.in_shape[rows] - self.crop_shape[rows] + 1).astype(np.int64), -1, 0)
            return np.minimum(np.floor(u * span), span - 1) / shape
        return u * (1.0 - size)  # (SampleRNG.uniform(0, 1): 0.0 + 1.0 * u is u)

    def _judge(self, rows, thr, anchor, shape, track_best, kept_only=False):
        """Candidates (anchor, shape: (nd, rows, c)) against the rows' boxes, as _search judges them:
        (valid (rows, c), kept boxes (boxes, rows, c), score (rows, c) or None). Laid out (boxes,
        candidates): each candidate's boxes gathered, RandomBBoxCrop._metrics element for element.
        ``kept_only``: every box meets the threshold (``zero_kept``), only the kept boxes decide."""
        a, nd = self.args, self.nd
        r, c = anchor.shape[1], anchor.shape[2]
        of = np.repeat(rows, c)  # each candidate's sample
        if kept_only:
            centre = self.box_t[2 * nd:3 * nd][:, :, of]
            anchor, shape = anchor.reshape(nd, 1, -1), shape.reshape(nd, 1, -1)
            inside = (centre >= anchor) & (centre <= anchor + shape)
            kept = inside[0] & inside[1] if nd == 2 else inside[0] & inside[1] & inside[2]
            kept &= self.real_t[:, of]
            return (~np.isnan(shape[0, 0]) & kept.any(0)).reshape(r, c), kept.reshape(-1, r, c), None
        box = self.box_t[:, :, of]  # (values, boxes, candidates)
        real = self.real_t[:, of]
        anchor, shape = anchor.reshape(nd, 1, -1), shape.reshape(nd, 1, -1)
        a1 = anchor + shape
        w = np.minimum(box[nd:2 * nd], a1)
        w -= np.maximum(box[:nd], anchor)
        np.maximum(w, 0, out=w)  # (np.clip(x, 0, None) but for the sign of a zero, only ever compared)
        inter = w[0] * w[1] if nd == 2 else w[0] * w[1] * w[2]
        box_area = box[3 * nd]
        frac = np.divide(inter, box_area, out=(inter > 0).astype(np.float64), where=box_area > 0)
        if a["threshold_type"] == "overlap":
            metric = frac
        else:
            area = shape[0] * shape[1] if nd == 2 else shape[0] * shape[1] * shape[2]
            union = box_area + area - inter
            metric = np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)
        p = a["bbox_prune_threshold"]
        if p is not None:
            kept = (frac >= p) & (frac > 0)
        else:
            centre = box[2 * nd:3 * nd]
            inside = (centre >= anchor) & (centre <= a1)
            kept = inside[0] & inside[1] if nd == 2 else inside[0] & inside[1] & inside[2]
        kept &= real
        meets = metric >= np.repeat(thr, c)
        ok = (meets | ~real).all(0) if a["all_boxes_above_threshold"] else (meets & real).any(0)
        shaped = ~np.isnan(shape[0, 0])
        valid = (shaped & ok & kept.any(0)).reshape(r, c)
        score = None
        if track_best:
            score = np.where(shaped, np.where(real, metric, np.inf).min(0), -np.inf).reshape(r, c)
        return valid, kept.reshape(-1, r, c), score
