"""The answer of a declared study: differences paired by seed, Holm and BH per family, flips."""

import pytest
from statsmodels.stats.multitest import multipletests

from evaluation.plots import plot_differences
from evaluation.statistics import difference_over_seeds, holm
from studies.answer import Final, answer
from studies.finals import FinalScores, SplitScore
from studies.protocol import load_study
from studies.stages import analyses_line, headlines
from studies.store import Point, Record

STUDY = load_study("pe_multi30k_fr")
BLEU = {  # variant -> (last, averaged) per seed 1..5
    "sinusoidal": ([40.0, 40.5, 39.8, 40.2, 40.1], [40.2, 40.6, 40.0, 40.3, 40.2]),
    "learned": ([39.0, 39.6, 38.9, 39.1, 39.3], [40.3, 40.9, 40.1, 40.2, 40.4]),
    "rope": ([41.2, 41.4, 41.0, 41.5, 41.1], [41.3, 41.6, 41.1, 41.5, 41.2]),
    "relative": ([40.1, 40.4, 40.0, 40.3, 40.0], [40.2, 40.5, 40.1, 40.4, 40.2]),
}


def final(variant: str, seed: int) -> Final:
    """A scored final with the BLEU of the table above."""
    point = Point("final", "all", variant, 0.5, seed, 8000)
    record = Record(1, STUDY.name, "final", "all", variant, 0.5, seed, 8000, [], 6.0, 1.0,
                    "python train.py", "abc", {})  # fmt: skip
    last, averaged = (BLEU[variant][i][seed - 1] for i in (0, 1))
    scores = [
        SplitScore("test", checkpoint, 8000, bleu, 60.0, None, 1000, "sig", "w", "h")
        for checkpoint, bleu in (("last", last), ("avg:5", averaged))
    ]
    return Final(point, record, FinalScores(1, 4, 0.6, scores))


@pytest.fixture(scope="module")
def result():
    finals = [final(v, s) for v in BLEU for s in range(1, 6)]
    return answer(STUDY, finals, ["last", "avg:5"])


def test_each_difference_is_paired_by_seed_and_corrected_within_its_family(result):
    family = [
        d for d in result["differences"] if d.baseline == "sinusoidal" and d.checkpoint == "last"
    ]
    assert [d.variant for d in family] == ["learned", "rope", "relative"]
    base = dict(enumerate(BLEU["sinusoidal"][0], start=1))
    expected = [difference_over_seeds(base, dict(enumerate(BLEU[v][0], start=1))) for v in
                ("learned", "rope", "relative")]  # fmt: skip
    assert [d.difference for d in family] == pytest.approx([e["difference"] for e in expected])
    assert [d.p_holm for d in family] == pytest.approx(holm([e["p"] for e in expected]))
    bh = multipletests([e["p"] for e in expected], method="fdr_bh")[1]
    assert [d.q_bh for d in family] == pytest.approx(list(bh))
    assert all(d.n == 5 for d in family)


def test_every_baseline_and_checkpoint_is_a_family_of_its_own(result):
    families = {(d.baseline, d.checkpoint) for d in result["differences"]}
    assert families == {(b, c) for b in ("sinusoidal", "learned") for c in ("last", "avg:5")}
    assert len(result["differences"]) == 12


def test_a_difference_averaging_changes_is_named(result):
    # the learned table is ~1 BLEU behind sinusoids at the last checkpoint, level when averaged
    assert any("learned − sinusoidal" in line for line in result["flips"])
    assert not any("rope − sinusoidal" in line for line in result["flips"])


def test_the_headline_figure_is_the_first_baseline_at_the_last_checkpoint(result, tmp_path):
    (name, title, diffs), *others = headlines(STUDY, result)
    assert not others  # one condition, one budget
    assert name == "bleu_minus_sinusoidal_all_8000.png" and "8,000 steps" in title
    assert {(d.baseline, d.checkpoint) for d in diffs} == {("sinusoidal", "last")}
    assert [d.variant for d in diffs] == ["learned", "rope", "relative"]
    plot_differences(diffs, "sinusoidal", title, tmp_path / name)
    assert (tmp_path / name).stat().st_size > 0


def test_the_readme_says_which_declared_analyses_the_stages_do_not_make():
    """A condition's analyses (buckets, concat) are not made by run_study.py yet: its README
    says so (was: declared and silently not made)."""
    line = analyses_line(load_study("pe_multi30k"))
    assert line is not None and "(short: buckets; joined: concat)" in line
    assert "scripts/study.py report" in line
    assert analyses_line(load_study("pe_multi30k_fr")) is None
