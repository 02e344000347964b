"""The pinned blocks the hardware JPEG decoder stages encoded bytes in: a block is reused only
after the event recorded behind its call has completed, or at once when its call was dropped."""

from types import SimpleNamespace

from stoker.backend.nvjpeg import PinnedStaging


class _Event:
    def __init__(self):
        self.done = False


def _staging():
    made = []

    def alloc(size):
        made.append(bytearray(size))
        return made[-1]

    return PinnedStaging(SimpleNamespace(cuda=SimpleNamespace(alloc_pinned_memory=alloc))), made


def test_a_block_is_reused_only_after_its_call_completed():
    st, made = _staging()
    a = st.take(1000)
    assert a[0] >= 1000 and len(made) == 1
    b = st.take(1000)  # a is staged: a new block
    assert b[1] is not a[1] and len(made) == 2
    ev = _Event()
    st.release(a, ev)
    c = st.take(1000)  # a's call is still running on the device
    assert c[1] is not a[1] and len(made) == 3
    ev.done = True
    d = st.take(1000)
    assert d[1] is a[1] and len(made) == 3


def test_a_dropped_call_frees_its_block_at_once_and_small_blocks_do_not_serve_large_calls():
    st, made = _staging()
    a = st.take(100)
    st.release(a, None)
    assert st.take(100)[1] is a[1]


def test_blocks_grow_to_the_largest_call_and_outgrown_ones_are_dropped():
    st, made = _staging()
    small = st.take(100)
    st.release(small, None)
    big = st.take(PinnedStaging._GRAIN + 1)
    assert big[0] == 2 * PinnedStaging._GRAIN and st.allocations == 2
    st.release(big, None)
    assert st.take(10)[1] is big[1]  # any later call fits the large block
    assert all(size >= big[0] for size, _ in st.free)


def test_staged_bitstreams_land_at_the_pointers_the_call_gets():
    """Samples of one buffer are copied as one span (near ones) or one by one (far apart); any
    other array on its own. Every returned pointer holds its sample's bytes."""
    import ctypes

    import numpy as np

    from stoker.backend.nvjpeg import HardwareDecoder, StagedCall

    decoder = object.__new__(HardwareDecoder)  # only its staging is used: no nvJPEG needed
    decoder._staging, _ = _staging()
    rng = np.random.default_rng(0)
    batch = rng.integers(0, 256, 10_000, dtype=np.uint8)  # a reader's batch: one buffer
    far = rng.integers(0, 256, 1 << 20, dtype=np.uint8)
    datas = [batch[100:400], batch[500:2000], rng.integers(0, 256, 50, dtype=np.uint8), batch[9000:9999],
             far[:100], far[-100:]]
    ptrs = np.fromiter((d.ctypes.data for d in datas), np.uint64, len(datas))
    sizes = np.fromiter((d.nbytes for d in datas), np.uint64, len(datas))
    call = StagedCall()
    staged = decoder._stage_bytes(call, datas, ptrs, sizes)
    call.copied.result()  # the copy runs on the decoder's copy thread
    decoder._copier.shutdown()
    assert call.pinned is not None and call.pinned[0] >= int(sizes.sum())
    for p, d in zip(staged.tolist(), datas):
        got = np.frombuffer((ctypes.c_uint8 * d.size).from_address(p), np.uint8)
        np.testing.assert_array_equal(got, d)
    block_lo = ctypes.addressof(ctypes.c_char.from_buffer(call.pinned[1]))
    assert all(block_lo <= p < block_lo + call.pinned[0] for p in staged.tolist())


def test_a_call_staged_from_known_addresses_equals_one_staged_from_the_arrays():
    """HardwareDecoder.stage with ``located`` (a file reader's batch: the samples' addresses and
    sizes in its buffer) builds the same call as from the arrays: sizes, windows, padding, and
    the staged bytes at every pointer."""
    import contextlib
    import ctypes

    import numpy as np

    from stoker.backend.nvjpeg import HardwareDecoder

    def fake_decoder():
        decoder = object.__new__(HardwareDecoder)
        decoder._staging, _ = _staging()
        decoder._copier = None
        decoder._params_lock = __import__("threading").Lock()
        decoder._free_params = [[ctypes.c_void_p(1000 + k) for k in range(8)]]
        decoder._all_params = []
        decoder._set_roi = lambda p, x, y, w, h: 0
        scratch = np.zeros(8 * 192, np.uint8)
        device_array = SimpleNamespace(size=scratch.size, data=SimpleNamespace(ptr=scratch.ctypes.data))
        decoder.cp = SimpleNamespace(uint8=np.uint8, empty=lambda size, dtype: device_array,
                                     cuda=SimpleNamespace(Device=lambda _: contextlib.nullcontext()))
        decoder.device_id, decoder._pad_out, decoder._pad_retired = 0, None, []
        return decoder

    rng = np.random.default_rng(1)
    buffer = rng.integers(0, 256, 5000, dtype=np.uint8)
    bounds = [(0, 700), (700, 1500), (1500, 1520), (2000, 4990)]
    datas = [buffer[a:b] for a, b in bounds]
    windows = np.array([[0, 0, 8, 8], [1, 2, 3, 4], [0, 0, 16, 16], [5, 5, 10, 20]])
    located = (np.array([d.ctypes.data for d in datas], np.uint64), np.array([d.nbytes for d in datas], np.uint64))
    calls = []
    for where in (None, located):
        decoder = fake_decoder()
        call = decoder.stage(datas, windows, fixed_batch=6, located=where)
        call.copied.result()
        decoder._copier.shutdown()
        pointers, sizes = list(call.args[0]), list(call.args[1])
        staged = [bytes((ctypes.c_uint8 * s).from_address(p)) for p, s in zip(pointers, sizes)]
        calls.append((sizes, call.image_table.copy(), staged, call.n, call.real))
    (s0, t0, b0, n0, r0), (s1, t1, b1, n1, r1) = calls
    assert (n0, r0) == (n1, r1) == (6, 4)
    assert s0 == s1
    np.testing.assert_array_equal(t0[:, 4:], t1[:, 4:])  # pitches (output pointers come at run())
    assert b0 == b1 and b0[:4] == [bytes(d) for d in datas]
