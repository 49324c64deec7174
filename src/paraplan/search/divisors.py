"""Divisors of an integer, from its prime factorisation: the search space's degrees (tp, pp, cp, micro-batches, ep)
are divisors of GPU counts, layer counts, batches and expert counts."""

from __future__ import annotations

import math


def divisors(n: int) -> list[int]:
    """Every divisor of ``n`` in increasing order, built from its prime factorisation (Pollard's rho
    above trial division by small primes): milliseconds for any n < 2**64, not O(n)."""
    if n < 1:
        return []
    out = [1]
    for prime, power in sorted(_prime_factors(n).items()):
        out = [d * prime**e for d in out for e in range(power + 1)]
    return sorted(out)


def _prime_factors(n: int) -> dict[int, int]:
    """{prime: power} of ``n``: trial division by the primes up to 37, then Pollard's rho on what is left."""
    factors: dict[int, int] = {}
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        while n % p == 0:
            factors[p] = factors.get(p, 0) + 1
            n //= p
    stack = [n] if n > 1 else []
    while stack:
        m = stack.pop()
        if _is_prime(m):
            factors[m] = factors.get(m, 0) + 1
            continue
        d = _pollard_rho(m)
        stack += [d, m // d]
    return factors


def _is_prime(n: int) -> bool:
    """Deterministic Miller-Rabin for n < 3.3e24 (the first 13 prime bases; Sorenson & Webster 2015)."""
    if n < 2:
        return False
    bases = (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37, 41)
    if n in bases:
        return True
    if any(n % p == 0 for p in bases):
        return False
    d, r = n - 1, 0
    while d % 2 == 0:
        d, r = d // 2, r + 1
    for a in bases:
        x = pow(a, d, n)
        if x in (1, n - 1):
            continue
        for _ in range(r - 1):
            x = x * x % n
            if x == n - 1:
                break
        else:
            return False
    return True


def _pollard_rho(n: int) -> int:
    """A non-trivial factor of the odd composite ``n`` (Pollard 1975, Floyd's cycle detection)."""
    c = 1
    while True:
        x = y = 2
        d = 1
        while d == 1:
            x = (x * x + c) % n
            y = (y * y + c) % n
            y = (y * y + c) % n
            d = math.gcd(abs(x - y), n)
        if d != n:
            return d
        c += 1
