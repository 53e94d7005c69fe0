"""benchmarks/similarity_bar_model.py: the bar rules it counts keys for must be valid bars (k distinct keys reach
each, so the answer stays exact) and relate as their definitions say."""
import numpy as np
import pytest


def test_first_tiles_follow_the_default_geometry(load_benchmark):
    """At 50K rows: 391 tiles of 128 in 131 splits of 3, two first tiles a split (the last split holds tiles 390 only:
    one), each of 128 rows but the corpus's last; a split of one tile has one first tile."""
    pytest.importorskip("torch")  # (tunelab.ops.similarity, the plan's config)
    m = load_benchmark("similarity_bar_model")
    assert all(len(r) <= 128 for r in m.first_tile_rows(300)) and len(m.first_tile_rows(300)) == 3
    firsts = m.first_tile_rows(50_000)
    assert len(firsts) == 2 * 130 + 1
    assert firsts[0] == range(0, 128) and firsts[1] == range(128, 256) and firsts[2] == range(384, 512)
    assert firsts[-1] == range(390 * 128, 50_000)


def test_every_rule_is_a_valid_bar_and_they_order_as_defined(load_benchmark):
    """Each bar has at least k keys at or above it (the true k-th key bounds it from above); the k-th largest of all
    first-tile keys is at least the k-th of their maxima, which is at least the smallest bucket word; the global bar
    of group bounds is a bound too; a pilot's bar is its sample's k-th key, at least as high for the larger sample."""
    pytest.importorskip("torch")
    m = load_benchmark("similarity_bar_model")
    k = 10
    rng = np.random.default_rng(7)
    scores = rng.standard_normal((6, 9_000), dtype=np.float32)
    scores[0] = 1.0  # every key ties
    bars = m.bars(scores, k)
    kth = np.sort(scores, axis=1)[:, -k]
    for rule, bar in bars.items():
        assert bar.shape == (6,), rule
        assert np.all(bar <= kth), rule
        assert np.all((scores >= bar[:, None]).sum(axis=1) >= k), rule
    assert np.all(bars["first_tiles_kth"] >= bars["tile_maxima_kth"])
    assert np.all(bars["tile_maxima_kth"] >= bars["bucket_words_min"])
    assert np.all(bars["first_tiles_kth"][0] == 1.0)
    # a pilot over every 8th row sees a superset of every 32nd row's sample (both start at row 0): its bar is at
    # least as high
    assert np.all(bars["pilot_1_in_8"] >= bars["pilot_1_in_32"])
    assert np.allclose(bars["pilot_1_in_8"][1:], np.sort(scores[1:, ::8], axis=1)[:, -k])
