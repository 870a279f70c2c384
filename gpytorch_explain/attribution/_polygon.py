#!/usr/bin/env python3
r"""Convex-polygon geometry on the unit square, used to triangulate the integration domain of a pair of paths
along kink lines with singular points as triangle apices (Duffy collapse vertices). Pure Python floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def _split_poly(poly: list[tuple[float, float]], coef: tuple[float, float, float], eps: float) -> list[list]:
    """Split a convex polygon by the line ``A t + B u + C = 0``."""
    A, B, C = coef
    vals = [A * t + B * u + C for t, u in poly]
    if all(v >= -eps for v in vals) or all(v <= eps for v in vals):
        return [poly]
    pos: list[tuple[float, float]] = []
    neg: list[tuple[float, float]] = []
    for i, (p, v) in enumerate(zip(poly, vals, strict=True)):
        q, w = poly[(i + 1) % len(poly)], vals[(i + 1) % len(poly)]
        if v >= -eps:
            pos.append(p)
        if v <= eps:
            neg.append(p)
        if (v > eps and w < -eps) or (v < -eps and w > eps):
            lam = v / (v - w)
            x = (p[0] + lam * (q[0] - p[0]), p[1] + lam * (q[1] - p[1]))
            pos.append(x)
            neg.append(x)
    return [pp for pp in (pos, neg) if len(pp) >= 3 and _area(pp) > eps * eps]


def _area(poly: Sequence[tuple[float, float]]) -> float:
    nxt = [*poly[1:], poly[0]]
    return 0.5 * abs(sum(p[0] * q[1] - q[0] * p[1] for p, q in zip(poly, nxt, strict=True)))


def _contains(poly: Sequence[tuple[float, float]], pt: tuple[float, float], eps: float) -> bool:
    sign = 0.0
    for i in range(len(poly)):
        p, q = poly[i], poly[(i + 1) % len(poly)]
        cr = (q[0] - p[0]) * (pt[1] - p[1]) - (q[1] - p[1]) * (pt[0] - p[0])
        if abs(cr) <= eps:
            continue
        if sign == 0.0:
            sign = cr
        elif cr * sign < 0:
            return False
    return True


def _on_segment(p: tuple, q: tuple, pt: tuple, eps: float) -> bool:
    cr = (q[0] - p[0]) * (pt[1] - p[1]) - (q[1] - p[1]) * (pt[0] - p[0])
    if abs(cr) > eps:
        return False
    dot = (pt[0] - p[0]) * (q[0] - p[0]) + (pt[1] - p[1]) * (q[1] - p[1])
    return -eps <= dot <= (q[0] - p[0]) ** 2 + (q[1] - p[1]) ** 2 + eps


def _triangulate(points: list[tuple[float, float]], lines: list[tuple[float, float, float]], eps: float) -> list:
    """Triangles ``((apex, v1, v2), point index or None)`` covering the unit square, with kink lines as edges and
    singular points as apices (Duffy collapse vertices)."""
    polys: list[tuple[list, int | None]] = [([(0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)], None)]
    for coef in lines:
        norm = math.hypot(coef[0], coef[1])
        if norm == 0:
            continue
        unit = (coef[0] / norm, coef[1] / norm, coef[2] / norm)
        polys = [(pp, None) for poly, _ in polys for pp in _split_poly(poly, unit, eps)]
    for pi, pt in enumerate(points):
        new = []
        for poly, apex in polys:
            if apex is None and _contains(poly, pt, eps):
                for i in range(len(poly)):
                    p, q = poly[i], poly[(i + 1) % len(poly)]
                    if not _on_segment(p, q, pt, eps):
                        tri = [pt, p, q]
                        if _area(tri) > eps * eps:
                            new.append((tri, pi))
            else:
                new.append((poly, apex))
        polys = new
    tris = []
    for poly, apex in polys:
        if apex is not None:
            tris.append((tuple(poly), apex))
        else:
            for i in range(1, len(poly) - 1):
                tri = (poly[0], poly[i], poly[i + 1])
                if _area(tri) > eps * eps:
                    tris.append((tri, None))
    return tris
