"""The private polygon geometry of the 2-D path integrals (``attribution/_polygon.py``), checked against
independent computations: exact areas, sides of splitting lines, and a Monte Carlo partition check of the
triangulation of the unit square (every sample point lies in exactly one triangle)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from gpytorch_explain.attribution._polygon import _area, _contains, _on_segment, _split_poly, _triangulate

SQUARE = [(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)]
EPS = 1e-12


def _inside(tri, p, tol=1e-12) -> bool:
    """Barycentric test (independent of ``_contains``)."""
    (x0, y0), (x1, y1), (x2, y2) = tri
    det = (x1 - x0) * (y2 - y0) - (x2 - x0) * (y1 - y0)
    a = ((x1 - p[0]) * (y2 - p[1]) - (x2 - p[0]) * (y1 - p[1])) / det
    b = ((x2 - p[0]) * (y0 - p[1]) - (x0 - p[0]) * (y2 - p[1])) / det
    return min(a, b, 1.0 - a - b) >= -tol


def test_area_of_simple_polygons():
    assert _area(SQUARE) == pytest.approx(1.0, abs=1e-15)
    assert _area([(0.0, 0.0), (1.0, 0.0), (0.0, 1.0)]) == pytest.approx(0.5, abs=1e-15)
    assert _area(list(reversed(SQUARE))) == pytest.approx(1.0, abs=1e-15)  # orientation-free


def test_contains_and_on_segment():
    assert _contains(SQUARE, (0.5, 0.5), EPS)
    assert _contains(SQUARE, (0.0, 0.3), EPS)  # on the boundary counts
    assert not _contains(SQUARE, (1.2, 0.5), EPS)
    assert _on_segment((0.0, 0.0), (1.0, 1.0), (0.25, 0.25), EPS)
    assert not _on_segment((0.0, 0.0), (1.0, 1.0), (1.5, 1.5), EPS)  # collinear, beyond the end
    assert not _on_segment((0.0, 0.0), (1.0, 1.0), (0.5, 0.4), EPS)


def test_split_by_the_diagonal_gives_two_halves_on_opposite_sides():
    coef = (1.0 / math.sqrt(2), -1.0 / math.sqrt(2), 0.0)  # t - u = 0
    parts = _split_poly(SQUARE, coef, EPS)
    assert len(parts) == 2
    assert sum(_area(p) for p in parts) == pytest.approx(1.0, abs=1e-14)
    signs = [{np.sign(round(coef[0] * t + coef[1] * u + coef[2], 12)) for t, u in p} - {0.0} for p in parts]
    assert sorted(s.pop() for s in signs) == [-1.0, 1.0]


def test_line_missing_the_polygon_leaves_it_whole():
    assert _split_poly(SQUARE, (1.0, 0.0, -2.0), EPS) == [SQUARE]  # t = 2


@pytest.mark.parametrize("seed", range(6))
def test_triangulation_partitions_the_square(seed):
    rng = random.Random(seed)
    lines = []
    for _ in range(rng.randint(0, 3)):
        ang = rng.uniform(0, math.pi)
        a, b = math.cos(ang), math.sin(ang)
        lines.append((a, b, -(a * rng.uniform(0.1, 0.9) + b * rng.uniform(0.1, 0.9))))
    points = [(rng.uniform(0.05, 0.95), rng.uniform(0.05, 0.95)) for _ in range(rng.randint(0, 2))]
    points += [(0.0, 0.0)] if seed % 2 else []  # a singular corner
    tris = _triangulate(points, lines, EPS)

    assert sum(_area(t) for t, _ in tris) == pytest.approx(1.0, abs=1e-12)
    for tri, _ in tris:  # no triangle crosses a kink line
        for a, b, c in lines:
            vals = [a * t + b * u + c for t, u in tri]
            assert min(vals) >= -1e-9 or max(vals) <= 1e-9
    for tri, apex in tris:  # a singular point is the first vertex (the collapse apex) of its triangles
        if apex is not None:
            assert tri[0] == points[apex]
        for pi, pt in enumerate(points):
            if _inside(tri, pt, -1e-9):  # strictly inside: never allowed
                pytest.fail(f"singular point {pt} inside triangle {tri}")
            if apex is None and any(math.dist(v, pt) < 1e-12 for v in tri):
                pytest.fail(f"triangle {tri} touches singular point {pi} but is not collapsed there")
    gen = np.random.default_rng(seed)
    for p in gen.random((400, 2)):
        hits = sum(_inside(t, p, -1e-9) for t, _ in tris)  # strict interiors: at most one
        loose = sum(_inside(t, p, 1e-9) for t, _ in tris)  # closures: at least one
        assert hits <= 1 and loose >= 1
