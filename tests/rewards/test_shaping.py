"""Shaping terms: length penalty, DAPO soft overlong penalty (veRL's formula), format term."""

import pytest

from rlrun.rewards.shaping import length_penalty, overlong_penalty, shaping_components

from .helpers import config, math_problem, sample


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [(0, 0.0), (500, 0.0), (600, -0.1), (650, -0.15), (1500, -1.0)],
)
def test_length_penalty_per_100_tokens_over_the_limit(tokens, expected):
    assert length_penalty(tokens, 500, 0.1) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("tokens", "expected"),
    # max_len 1024, buffer 256: free up to 768, then linear to -factor at 1024.
    [(100, 0.0), (768, 0.0), (832, -0.25), (896, -0.5), (1024, -1.0)],
)
def test_overlong_penalty_matches_verl(tokens, expected):
    # veRL dapo.py: exceed = L - (max_resp_len - buffer_len); min(-exceed / buffer_len * f, 0)
    assert overlong_penalty(tokens, 1024, 256, 1.0) == pytest.approx(expected)


def test_overlong_penalty_scales_with_the_factor():
    assert overlong_penalty(1024, 1024, 256, 0.5) == pytest.approx(-0.5)


def test_only_enabled_terms_are_reported():
    p = math_problem("p", "18")
    assert shaping_components(config(), p, sample(p, "#### 18", 10)) == {}


def test_each_term_is_its_own_component():
    cfg = config(
        "reward.shaping.length_limit=10", "reward.shaping.length_penalty_per_100=1.0",
        "reward.shaping.overlong_buffer=16", "rollout.sampling.max_new_tokens=64",
        "reward.shaping.format_reward=0.2", "reward.shaping.format_penalty=0.5",
    )
    p = math_problem("p", "18")
    good = shaping_components(cfg, p, sample(p, "#### 18", 60))
    assert good == pytest.approx({"length": -0.5, "overlong": -0.75, "format": 0.2})
    bad = shaping_components(cfg, p, sample(p, "eighteen", 5))
    assert bad == pytest.approx({"length": 0.0, "overlong": 0.0, "format": -0.5})


def test_format_follows_the_configured_extractor():
    cfg = config("reward.math_extractor=boxed", "reward.shaping.format_penalty=1.0")
    p = math_problem("p", "18")
    assert shaping_components(cfg, p, sample(p, "#### 18"))["format"] == -1.0
    assert shaping_components(cfg, p, sample(p, "\\boxed{18}"))["format"] == 0.0
