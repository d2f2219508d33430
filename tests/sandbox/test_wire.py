"""The sandbox's ids (sandbox/wire.py): a provider's object ids, as unguessable as Stripe's."""

from __future__ import annotations

import secrets
from collections import Counter

import pytest

from sandbox.wire import ID_ALPHABET, new_id


def test_an_id_is_its_prefix_and_characters_of_the_alphabet_each_as_likely(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads = [0]
    real = secrets.token_bytes

    def token_bytes(n: int) -> bytes:
        reads[0] += 1
        return real(n)

    monkeypatch.setattr(secrets, "token_bytes", token_bytes)
    ids = [new_id("pi_") for _ in range(5000)]
    assert len(set(ids)) == 5000
    assert all(i.startswith("pi_") and len(i) == 27 for i in ids)
    seen = Counter("".join(i[3:] for i in ids))
    assert set(seen) == set(ID_ALPHABET)
    # 120,000 characters, 1,935 expected of each (give or take 44).
    assert 1600 < min(seen.values()) <= max(seen.values()) < 2300, seen
    # Were bytes 248-255 kept, b % 62 would give the first 8 characters 5 chances in 256 and
    # the others 4: a quarter more often. Unbiased, the two means are about 1% apart (one
    # standard deviation), and 8% is nine.
    first, rest = ID_ALPHABET[:8], ID_ALPHABET[8:]
    favoured = sum(seen[c] for c in first) / len(first)
    others = sum(seen[c] for c in rest) / len(rest)
    assert favoured < 1.08 * others, (favoured, others)
    assert reads[0] < 5100  # one read an id, now and then two
    assert len(new_id("x", 200)) == 201


def test_an_id_is_not_the_last_one_with_a_character_changed() -> None:
    a, b = new_id("ch_"), new_id("ch_")
    assert sum(x != y for x, y in zip(a, b, strict=True)) > 12
