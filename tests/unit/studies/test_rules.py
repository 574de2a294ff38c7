"""The grid rule and the check rule on rows: lowest mean dev PPL, edges, neighbours."""

import math

from studies.rules import DevResult, check_candidates, check_rule, choose_on_grid, choose_value

SEEDS = (1, 2)


def rows(ppl_by_rate: dict[float, tuple[float, float]]) -> list[DevResult]:
    """Two seeds' dev PPL at each rate."""
    return [
        DevResult(rate, seed, ppl)
        for rate, ppls in ppl_by_rate.items()
        for seed, ppl in zip(SEEDS, ppls, strict=True)
    ]


GRID = {0.25: (14.0, 14.2), 0.5: (11.0, 11.4), 1.0: (12.0, 12.2), 2.0: (30.0, math.inf)}


def test_the_grid_chooses_the_lowest_mean_among_rates_every_seed_ran():
    choice = choose_on_grid(rows(GRID), [0.25, 0.5, 1.0, 2.0], SEEDS)
    assert choice.complete and choice.rate == 0.5
    assert [m.mean for m in choice.means][:3] == [14.1, 11.2, 12.1]
    assert math.isinf(choice.means[3].mean)  # a diverged seed: infinite, never chosen


def test_the_grid_waits_while_a_seed_is_missing():
    results = rows(GRID)[:-1]  # ×2 seed 2 not run yet
    choice = choose_on_grid(results, [0.25, 0.5, 1.0, 2.0], SEEDS)
    assert not choice.complete and choice.rate is None
    assert choice.required == (0.25, 0.5, 1.0, 2.0)


def test_a_winner_at_an_edge_adds_the_rate_beyond_it_as_often_as_declared():
    edge = {0.5: (9.0, 9.0), 1.0: (10.0, 10.0)}
    first = choose_on_grid(rows(edge), [0.5, 1.0], SEEDS)
    assert not first.complete and first.required == (0.25, 0.5, 1.0)
    beyond = choose_on_grid(rows({**edge, 0.25: (9.5, 9.5)}), [0.5, 1.0], SEEDS)
    assert beyond.complete and beyond.rate == 0.5
    assert choose_on_grid(rows(edge), [0.5, 1.0], SEEDS, edge_steps=0).rate == 0.5


def test_the_check_trains_the_neighbours_within_the_factor():
    grid = choose_on_grid(rows(GRID), [0.25, 0.5, 1.0, 2.0], SEEDS)
    assert check_candidates(grid, 0.5, 2.0) == [0.25, 1.0]
    assert check_candidates(grid, 0.5, 1.1) == [1.0]  # 14.1 > 1.1 x 11.2; 12.1 is within


def test_the_grid_choice_winning_the_check_ends_it():
    grid = choose_on_grid(rows(GRID), [0.25, 0.5, 1.0, 2.0], SEEDS)
    check = check_rule(grid, rows({0.25: (7.0, 7.0), 0.5: (6.0, 6.2), 1.0: (6.5, 6.5)}), 2.0, SEEDS)
    assert check.complete and check.rate == 0.5 and check.required == (0.25, 0.5, 1.0)


def test_a_diverged_next_neighbour_is_not_checked():
    grid = choose_on_grid(rows(GRID), [0.25, 0.5, 1.0, 2.0], SEEDS)
    at_final = {0.25: (7.0, 7.0), 0.5: (6.6, 6.6), 1.0: (6.0, 6.0)}
    check = check_rule(grid, rows(at_final), 2.0, SEEDS)
    # ×2's grid mean is infinite (a diverged seed): not within ×2.0 of ×1's, so ×1 is final
    assert check.complete and check.rate == 1.0 and check.required == (0.25, 0.5, 1.0)
    assert check_candidates(grid, 1.0, 2.0) == [0.5]


def test_a_neighbour_winning_with_no_further_candidate_is_final():
    grid_rows = {0.25: (14.0, 14.2), 0.5: (11.0, 11.4), 1.0: (12.0, 12.2), 2.0: (20.0, 21.0)}
    grid = choose_on_grid(rows(grid_rows), [0.25, 0.5, 1.0, 2.0], SEEDS)
    at_final = {0.25: (7.0, 7.0), 0.5: (6.6, 6.6), 1.0: (6.0, 6.0)}
    check = check_rule(grid, rows(at_final), 2.0, SEEDS)
    assert not check.complete and check.required == (0.25, 0.5, 1.0, 2.0)
    done = check_rule(grid, rows({**at_final, 2.0: (6.4, 6.5)}), 2.0, SEEDS)
    assert done.complete and done.rate == 1.0


def test_a_setting_is_chosen_once_every_value_has_its_mean():
    assert choose_value(["10", "25", "100"], {"10": 11.8, "25": 12.6}) is None
    assert choose_value(["10", "25", "100"], {"10": 11.8, "25": 12.6, "100": 11.7}) == "100"
    assert choose_value(["25", "10"], {"10": 11.8, "25": 11.8}) == "25"  # ties: the first declared
