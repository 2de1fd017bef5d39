"""Draft-length scheduling: the choice follows expected tokens per millisecond, the cost line is
learned from passes, and a scheduled decode emits exactly what an unscheduled one does."""

from __future__ import annotations

import pytest
import torch

from burble.decoding.drafters import ModelDrafter, PromptLookupDrafter
from burble.decoding.generate import generate
from burble.decoding.options import DecodingOptions
from burble.decoding.schedule import DraftSchedule, PassCost, expected_tokens
from burble.testing.toy_models import TableModel


def test_expected_tokens_is_the_geometric_run_plus_the_verifiers_token():
    assert expected_tokens(0.0, 4) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_long_drafts_for_one_row_short_ones_for_a_large_batch():
    """The cost line measured here for tiny.en (11 ms per pass + 1.3 ms per fed token) with the
    streaming drafts' acceptance (~0.65): one row drafts 3-4 tokens, 8 or 16 rows one token or none."""
    schedule = DraftSchedule(cost=PassCost(11.0, 1.3), learn_cost=False)
    assert schedule.draft_length([0.65], [4], 4) >= 3
    assert schedule.draft_length([0.65] * 8, [4] * 8, 4) == 1
    assert schedule.draft_length([0.65] * 16, [4] * 16, 4) <= 1
    assert schedule.draft_length([0.95] * 16, [4] * 16, 4) >= 2  # drafts that are always right pay
    assert schedule.draft_length([0.0], [4], 4) == 0  # drafts that are never right never do
    assert schedule.draft_length([0.9, 0.9], [0, 0], 4) == 0  # no room: nothing to gain
    assert DraftSchedule(cost=PassCost(10.0, 0.0), learn_cost=False).draft_length([0.3] * 8, [4] * 8, 4) == 4


def test_the_cost_line_is_fitted_from_passes_and_measured_shapes_are_used_as_measured():
    schedule = DraftSchedule(cost=PassCost(50.0, 9.0))
    for rows, width in ((1, 1), (1, 5), (8, 1), (16, 1), (8, 5), (16, 5), (1, 3), (8, 3), (4, 3), (12, 5)):
        schedule.observe_pass(rows, width, (5.0 + 2.0 * rows * width) / 1000)
    assert schedule.cost.fixed_ms == pytest.approx(5.0)
    assert schedule.cost.per_token_ms == pytest.approx(2.0)
    assert schedule.pass_ms(8, 3) == pytest.approx(53.0)
    assert schedule.pass_ms(8, 2) == pytest.approx(0.8 * 37.0)  # not run yet: the line, optimistic


def test_a_draft_length_that_measured_well_is_kept_one_that_measured_badly_is_dropped():
    schedule = DraftSchedule(cost=PassCost(11.0, 1.3))
    schedule.observe_pass(16, 2, 0.030)  # one-token drafts for 16 rows ran fast: keep them
    assert schedule.draft_length([0.65] * 16, [4] * 16, 4) == 1
    schedule.observe_pass(16, 2, 10.0)  # then very slowly
    assert schedule.draft_length([0.65] * 16, [4] * 16, 4) != 1
