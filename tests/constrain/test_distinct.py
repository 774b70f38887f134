"""bitmask.distinct: np.unique's result (sorted distinct values) by a sort, for the masks'
candidate sets (numpy 2.4's np.unique hashes first: ~10x slower at a few hundred ids)."""
import numpy as np
import pytest

from furca.constrain.bitmask import distinct


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_distinct_is_np_unique(dtype):
    rng = np.random.default_rng(0)
    for n in (0, 1, 2, 7, 800, 5000):
        ids = rng.integers(0, max(n // 2, 1), n).astype(dtype)
        before = ids.copy()
        got = distinct(ids)
        assert got.dtype == dtype
        assert np.array_equal(got, np.unique(ids))
        assert np.array_equal(ids, before)  # the caller's array is left as it was
        if n:
            assert got is not ids


def test_distinct_fresh_sorts_in_place():
    ids = np.array([5, 1, 5, 3, 1], dtype=np.int32)
    got = distinct(ids, fresh=True)
    assert got.tolist() == [1, 3, 5]
    assert ids.tolist() == [1, 1, 3, 5, 5]  # the caller's own array: sorted where it lies
    one = np.array([4], dtype=np.int32)
    assert distinct(one, fresh=True) is one
