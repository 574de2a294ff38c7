"""The study's report tables from constructed records: concatenation, buckets, row (E), cells."""

import statistics
from dataclasses import replace

import pytest
from scipy import stats

from evaluation.plots import pyplot
from evaluation.statistics import RATIO_EQUIVALENCE_MARGIN, power_statement
from studies.buckets import bucket_markdown, bucket_ratio_figure, bucket_table
from studies.cells import equivalence_cell, seeds_cell, signed_cell
from studies.concat import concat_markdown, concat_table
from studies.plan import KS, POOLED, SEARCH
from studies.records import BucketRow, ConcatRow, StudyRecord, Table3Scores
from studies.report import RunRow, differences_to, provenance_line, row_e, row_e_markdown

# the German study's roles (configs/study/pe_multi30k.yaml), as studies/reported.py reads them
ROW_E = ("sinusoidal", "learned")
BUCKETS = ("short", "all")
JOINED = ("joined", "all")


def scores(bleu: float, chrf: float = 50.0, tok_bleu: float | None = None) -> Table3Scores:
    """A Table 3 evaluation's scores."""
    return Table3Scores("test-last-beam4", bleu, chrf, 1000, tok_bleu, None)


def concat_row(k: int, bleu: float, length_ratio: float = 1.0, chrf: float | None = None):
    """A pooled concatenation row of 100 lines joined k at a time."""
    chrf = bleu if chrf is None else chrf
    return ConcatRow(POOLED, k, 100 // k, 100 % k, bleu, chrf, 1.0, length_ratio, 0, 0, 50.0)


def bucket_row(low: int, bleu: float, n: int = 7, high: int | None = None, **lengths):
    """A length bucket of L = 10 from low (5 words wide unless high), lengths: bp, length_ratio."""
    high = low + 4 if high is None else high
    return BucketRow(f"{low}-{high}", low, high, low > 10, n, bleu, **lengths)


def record_of(condition: str, variant: str, seed: int, **fields) -> StudyRecord:
    """A scored run's record with the fields a table reads set, the others plain."""
    plain = {
        "run_dir": f"/runs/{condition}/{variant}/seed-{seed}",
        "step": 5,
        "search": SEARCH,
        "precision": "fp32",
        "train_cleaning": None,
        "dev_ppl": 10.0,
        "wall_seconds": 1.0,
        "hardware": ["A"],
        "code": ["c"],
        "test": scores(20.0),
        "concat": [],
        "max_words": 10,
        "by_bucket": [],
    }
    return StudyRecord(condition=condition, variant=variant, seed=seed, **(plain | fields))


def test_ratios_per_seed_and_per_bucket():
    """BLEU(k)/BLEU(1) is taken per seed before summarizing; short/control per bucket."""

    def record(condition, seed, bleus, buckets):
        concat = [concat_row(k, b) for k, b in zip(KS, bleus, strict=True)]
        rows = [bucket_row(low, b) for low, b in zip((1, 6, 11), buckets, strict=True)]
        return record_of(condition, "rope", seed, concat=concat, by_bucket=rows, max_words=10)

    records = [
        record("all", 1, [40, 20, 10, 8], [40, 30, 20]),
        record("all", 2, [20, 20, 20, 20], [40, 30, 10]),
        record("short", 1, [30, 15, 9, 6], [40, 15, 5]),
    ]
    concat = concat_table(records, ROW_E, JOINED)
    k2 = next(r for r in concat.summary if r.condition == "all" and r.k == 2)
    assert k2.bleu_ratio_to_k1.mean == pytest.approx((20 / 40 + 20 / 20) / 2)
    assert k2.bleu.mean == 20 and k2.lines == 50 and k2.left_out == 0
    buckets = {r.bucket: r for r in bucket_table(records, BUCKETS, "sinusoidal").rows}
    assert buckets["11-15"].ratio == pytest.approx(5 / 15, abs=1e-4)  # short / control means
    baseline = [
        replace(
            r,
            variant="sinusoidal",
            concat=[replace(row, bleu=b) for row, b in zip(r.concat, bleus, strict=True)],
        )
        for r, bleus in zip(
            records, ([30, 20, 10, 5], [20, 10, 10, 10], [30, 15, 9, 6]), strict=True
        )
    ]
    concat = concat_table(records + baseline, ROW_E, JOINED)
    diffs = {(d.condition, d.k): d for d in concat.differences}
    assert {d.variant for d in concat.differences} == {"rope"}  # none of the baseline
    k2 = diffs["all", 2]  # rope minus sinusoidal, seeds 1 and 2 paired
    assert k2.bleu["seeds"] == [1, 2] and k2.bleu["difference"] == pytest.approx(5.0)
    ratio_diffs = [20 / 40 - 20 / 30, 20 / 20 - 10 / 20]
    assert k2.bleu_ratio_to_k1["difference"] == pytest.approx(
        statistics.fmean(ratio_diffs), abs=1e-3
    )
    assert k2.bleu_ratio_to_k1["low"] is not None and diffs["short", 1].bleu["low"] is None
    assert "## Each variant minus sinusoidal, per condition and k" in concat_markdown(concat)
    learned = [
        replace(r, variant="learned") for r in records
    ]  # row E's other encoding, also a base
    concat = concat_table(records + baseline + learned, ROW_E, JOINED)
    pairs = {(d.variant, d.baseline) for d in concat.differences}
    assert pairs == {("rope", "sinusoidal"), ("learned", "sinusoidal"), ("rope", "learned")}
    rope_vs_learned = [d for d in concat.differences if d.baseline == "learned"]
    assert all(d.bleu["difference"] == pytest.approx(0.0) for d in rope_vs_learned)  # copies
    text = concat_markdown(concat)
    assert text.count("## Each variant minus ") == 2 and "## Each variant minus learned" in text
    # Holm within each (baseline, condition, k): rope and learned minus sinusoidal, the same p
    family = [d for d in concat.differences if (d.baseline, d.k) == ("sinusoidal", 2)]
    family = [d.bleu_ratio_to_k1 for d in family if d.condition == "all"]
    assert len(family) == 2 and family[0]["p"] == family[1]["p"] is not None
    assert [d["p_holm"] for d in family] == pytest.approx([min(1, 2 * family[0]["p"])] * 2)
    assert all(d["family_size"] == 2 for d in family)
    alone = [d for d in concat.differences if d.baseline == "learned"]
    assert all(d.bleu["family_size"] <= 1 for d in alone)  # rope alone at each k
    assert f"Holm p {min(1, 2 * family[0]['p']):.3f}" in text
    assert buckets["11-15"].ratio_by_seed == {"1": pytest.approx(5 / 20, abs=1e-4)}
    assert buckets["6-10"].n == 7 and buckets["6-10"].control_seeds == [1, 2]


def test_joined_minus_all_pairs_each_variant_with_its_control():
    """The remedy's effect: each variant's joined runs minus its all-lengths runs, by seed."""

    def record(condition, seed, bleus, ratios):
        concat = [concat_row(k, b, r) for k, b, r in zip(KS, bleus, ratios, strict=True)]
        return record_of(condition, "rope", seed, concat=concat)

    records = [
        record("all", 1, [40, 20, 10, 8], [1.0, 0.6, 0.5, 0.4]),
        record("all", 2, [30, 15, 10, 6], [1.0, 0.7, 0.5, 0.3]),
        record("all", 3, [30, 15, 10, 6], [1.0, 0.7, 0.5, 0.3]),  # no joined seed 3: left out
        record("joined", 1, [38, 30, 25, 20], [1.0, 0.9, 0.9, 0.8]),
        record("joined", 2, [30, 24, 21, 19], [1.0, 1.0, 0.9, 0.9]),
    ]
    concat = concat_table(records, ROW_E, JOINED)
    remedy = {d.k: d for d in concat.joined_minus_all}
    assert sorted(remedy) == list(KS) and concat.differences == []  # no sinusoidal runs
    k4 = remedy[4]
    assert k4.variant == "rope" and k4.length_ratio["seeds"] == [1, 2]
    assert k4.length_ratio["difference"] == pytest.approx(((0.8 - 0.4) + (0.9 - 0.3)) / 2)
    ratio_diffs = [20 / 38 - 8 / 40, 19 / 30 - 6 / 30]
    assert k4.bleu_ratio_to_k1["difference"] == pytest.approx(
        statistics.fmean(ratio_diffs), abs=1e-3
    )
    assert k4.bleu["method"] == "paired t, shared seeds" and k4.bleu["low"] is not None
    text = concat_markdown(concat)
    assert "## Trained on joined lines minus trained on single sentences" in text
    assert k4.bleu_over_control.mean == pytest.approx((20 / 8 + 19 / 6) / 2)  # seed 3 out
    assert remedy[1].bleu_over_control.n == 2
    assert f"| rope | 4 | 1, 2 | {(20 / 8 + 19 / 6) / 2:.3f} ± " in text
    # what two seeds can detect, from the paired BLEU differences 12 and 13
    power = power_statement(statistics.stdev([20 - 8, 19 - 6]), 2)
    assert k4.power.n == 2 and k4.power.detectable == pytest.approx(power.detectable)
    assert f"| {power.detectable:.2f} (SD 0.71, n 2) |" in text
    assert "80% power detects (Δ BLEU)" in text


def test_bucket_ratios_minus_sinusoidal_are_paired_by_seed():
    """Per bucket: a variant's short/control ratio minus sinusoidal's, over the seeds both ran."""

    def record(condition, variant, seed, bleus):
        rows = [
            bucket_row(low, b, n=9)
            for low, b in zip((1, 6, 11), [30, *bleus], strict=True)  # 1-5: all alike
        ]
        return record_of(condition, variant, seed, by_bucket=rows, max_words=10)

    records = [
        record("all", "sinusoidal", 1, [30, 20]),
        record("all", "sinusoidal", 2, [30, 30]),
        record("short", "sinusoidal", 1, [30, 10]),
        record("short", "sinusoidal", 2, [30, 18]),
        record("all", "learned", 1, [40, 20]),
        record("all", "learned", 2, [40, 40]),
        record("all", "learned", 3, [40, 40]),
        record("short", "learned", 1, [20, 8]),  # half its control within the lengths
        record("short", "learned", 2, [40, 16]),
        record("short", "learned", 3, [40, 4]),  # no sinusoidal seed 3: left out of the pairs
    ]
    table = bucket_table(records, BUCKETS, "sinusoidal")
    diffs = {d.bucket: d for d in table.differences}
    assert {d.variant for d in table.differences} == {"learned"}
    beyond = diffs["11-15"]
    assert beyond.ratio["seeds"] == [1, 2] and beyond.n == 9 and beyond.beyond
    # learned 8/20, 16/40 against sinusoidal 10/20, 18/30
    assert beyond.ratio["difference"] == pytest.approx(((0.4 - 0.5) + (0.4 - 0.6)) / 2)
    assert beyond.ratio["low"] < beyond.ratio["difference"] < beyond.ratio["high"]
    assert diffs["6-10"].ratio["difference"] == pytest.approx(((0.5 - 1) + (1 - 1)) / 2)
    # over the in-range (6-10) ratio: learned seed 1 0.4 / 0.5, seed 2 0.4 / 1; sinusoidal 0.5, 0.6
    assert table.in_range == "6-10"
    rows = {(r.variant, r.bucket): r for r in table.rows}
    assert rows["learned", "11-15"].over_in_range_by_seed == {"1": 0.8, "2": 0.4, "3": 0.1}
    assert rows["learned", "6-10"].over_in_range.mean == pytest.approx(1.0)
    relative = beyond.over_in_range
    assert relative["seeds"] == [1, 2]
    assert relative["difference"] == pytest.approx(((0.8 - 0.5) + (0.4 - 0.6)) / 2)
    assert beyond.ratio["family_size"] == 1  # one variant at each bucket: a family of one
    assert beyond.ratio["p_holm"] == beyond.ratio["p"] is not None
    text = bucket_markdown(table)
    assert "## Each variant's ratio minus sinusoidal's, per bucket" in text
    assert f"Holm p {beyond.ratio['p']:.3f}" in text
    assert "| learned | 11-15* | 9 | 1, 2 | -0.150 [" in text
    assert "ratio over its ratio at 6-10 words" in text
    power = power_statement(statistics.stdev([0.4 - 0.5, 0.4 - 0.6]), 2)  # the pairs' spread
    assert beyond.power.detectable == pytest.approx(power.detectable)
    assert f"| {power.detectable:.3f} (SD 0.071, n 2) |" in text


def test_buckets_without_short_runs_say_so_and_keep_l():
    """Control runs alone: no rows, the short condition's L in the title, one line saying why."""
    record = record_of(
        "all",
        "sinusoidal",
        1,
        max_words=10,
        by_bucket=[bucket_row(1, 3.0, n=5, high=10)],
    )
    table = bucket_table([record], BUCKETS, "sinusoidal")
    assert table.rows == [] and table.max_words == 10
    text = bucket_markdown(table)
    assert text.startswith("# Trained on <= 10 source words")
    assert "No run of the short condition is scored yet." in text and "| variant |" not in text


def test_the_provenance_lines_name_the_runs_whose_machine_or_code_is_unrecorded():
    def run(condition, variant, seed, hardware, code=("unrecorded",)):
        return RunRow(condition, variant, seed, 5, 10.0, 1.0, 20.0, 50.0, hardware, [*code], "")

    runs = [
        run("all", "learned", 1, ["A", "unrecorded"]),
        run("all", "sinusoidal", 2, ["A", "B"]),
        run("short", "rope", 3, ["B"], ["c1"]),
    ]
    line = provenance_line(runs, "hardware", "on")
    assert line.startswith("Trained on (runs; one resumed on other hardware counts under each): ")
    assert "each): A (2); B (2); unrecorded (1: all/learned/seed-1, with a segment" in line
    assert "all/sinusoidal/seed-2" not in line
    assert "unrecorded" not in provenance_line(runs[1:], "hardware", "on")
    code = provenance_line(runs, "code", "with")  # records from before the code was recorded
    assert "each): c1 (1); unrecorded (2: all/learned/seed-1, all/sinusoidal/seed-2," in code
    assert "each): unrecorded (1: all/learned" in provenance_line(runs[:1], "code", "with")


def test_an_unpaired_difference_names_each_side_s_seeds():
    paired = {"method": "paired t, shared seeds", "seeds": [1, 2]}
    assert seeds_cell(paired) == "1, 2"
    welch = {"method": "Welch t (unpaired seeds)", "seeds": [1, 2, 3]}
    assert seeds_cell(welch | {"base_seeds": [1, 2, 3], "other_seeds": [1]}) == (
        "1 vs 1, 2, 3 (unpaired)"
    )
    assert seeds_cell(welch) == "1, 2, 3 (unpaired)"  # a record from before the sides were kept


def test_row_e_tests_equivalence_and_states_power_from_eight_seeds():
    """Learned minus sinusoidal over 8 seeds: t-interval, TOST at ±1 BLEU, power, the paper."""
    sinusoidal = [30.0, 31.0, 29.5, 30.5, 31.5, 30.0, 29.0, 30.8]
    shifts = {"close": [0.2, -0.3, 0.1, 0.0, 0.3, -0.1, 0.2, -0.2], "far": [-2, 1, -3, 0.5] * 2}

    def records(shift: list[float]) -> dict[str, list[StudyRecord]]:
        return {
            variant: [
                record_of("all", variant, seed, test=scores(b + d, 50 + d, b + d))
                for seed, (b, d) in enumerate(zip(sinusoidal, values, strict=True), start=1)
            ]
            for variant, values in (("sinusoidal", [0.0] * 8), ("learned", shift))
        }

    close = row_e(records(shifts["close"]), 0, ROW_E)
    assert close.seeds == list(range(1, 9)) and close.two_level_bootstrap is None
    assert close.bleu["difference"] == pytest.approx(statistics.fmean(shifts["close"]))
    eq = close.equivalence
    assert eq.margin == 1.0 and eq.equivalent and eq.smallest_margin < 1.0
    power = close.power
    assert power.n == 8 and power.sd == pytest.approx(statistics.stdev(shifts["close"]))
    assert power.detectable < 1.0
    far = row_e(records(shifts["far"]), 0, ROW_E)
    assert not far.equivalence.equivalent and far.equivalence.smallest_margin > 1.0
    assert far.power.detectable > 1.0 and far.power.seeds_for_one > 8
    assert close.paper == far.paper and far.paper.difference == -0.1
    text = "\n".join(row_e_markdown(far))
    assert "equivalence not shown" in text and "25.7 vs 25.8 (-0.1)" in text
    assert f"±{far.equivalence.smallest_margin:.2f} BLEU" in text
    assert ": equivalent |" in "\n".join(row_e_markdown(close))
    learned = differences_to(records(shifts["far"]), "learned")
    assert [d.variant for d in learned] == ["sinusoidal"]
    assert learned[0].across_seeds["difference"] == pytest.approx(-statistics.fmean(shifts["far"]))
    assert learned[0].across_seeds["p_holm"] == learned[0].across_seeds["p"]


def test_each_variant_s_equivalence_is_tested_and_holm_adjusted_in_its_family():
    """Every variant minus learned gets TOST at ±1 BLEU, Holm over the family: a variant
    within ±1 on its own (p < 0.05) need not be shown once the family is adjusted, and one
    seed decides nothing (a dash in the table)."""
    base = [30.0, 31.0, 29.5, 30.5, 31.5]
    shifts = {
        "close": [0.2, -0.3, 0.1, 0.0, 0.3],
        "near": [0.5, -0.4, 0.6, 0.1, 0.3],
        "far": [-2.0, 1.0, -3.0, 0.5, -1.0],
    }
    by_variant = {
        variant: [
            record_of("all", variant, seed, test=scores(b + d, 50 + d))
            for seed, (b, d) in enumerate(zip(base, values, strict=True), start=1)
        ]
        for variant, values in ({"learned": [0.0] * 5} | shifts).items()
    }
    by_variant["none"] = [record_of("all", "none", 1, test=scores(20.0))]
    diffs = {d.variant: d.equivalence for d in differences_to(by_variant, "learned")}
    tested = [diffs[v] for v in ("close", "near", "far")]
    assert [e["n"] for e in tested] == [5, 5, 5] and diffs["none"]["p"] is None
    assert [e["family_size"] for e in tested] == [3, 3, 3]
    assert sorted(e["p_holm"] for e in tested) == pytest.approx(
        [min(1.0, k * p) for k, p in zip((3, 2, 1), sorted(e["p"] for e in tested), strict=True)]
    )  # Holm's step-down; the increasing order holds for these p-values
    assert tested[0]["p_holm"] < 0.05 and tested[2]["p_holm"] > 0.05
    assert tested[1]["p"] < 0.05 and tested[1]["p_holm"] > tested[1]["p"]
    assert equivalence_cell(tested[0]) == (
        f"{tested[0]['p']:.3f} (Holm {tested[0]['p_holm']:.3f}), "
        f"±{tested[0]['smallest_margin']:.2f}"
    )
    assert equivalence_cell(diffs["none"]) == "—"


def test_bucket_lengths_short_vs_control_and_a_dash_for_older_records():
    """Length ratio and brevity penalty per bucket, over seeds, for each condition; a record
    scored before they were kept gives a dash, never a zero."""

    def record(condition, seed, ratio, bp, kept=True):
        lengths = {"length_ratio": ratio, "bp": bp} if kept else {}
        rows = [bucket_row(11, 20.0, n=9, **lengths)]
        return record_of(condition, "rope", seed, by_bucket=rows, max_words=10)

    records = [
        record("short", 1, 0.80, 0.7515),
        record("short", 2, 0.90, 0.8948),
        record("all", 1, 1.00, 1.0),
        record("all", 2, 0.0, 0.0, kept=False),
    ]
    (row,) = bucket_table(records, BUCKETS, "sinusoidal").rows
    assert row.short_length_ratio.mean == pytest.approx(0.85)
    assert row.short_length_ratio.n == 2 and row.short_bp.mean == pytest.approx(0.82315)
    assert row.control_length_ratio.n == 1 and row.control_bp.mean == 1.0
    # BP divided out only where both sides kept it: seed 1 (BLEU 20 / 0.7515 over 20 / 1.0)
    assert row.ratio_without_bp_by_seed == {"1": pytest.approx(1 / 0.7515, abs=1e-4)}
    text = bucket_markdown(bucket_table(records, BUCKETS, "sinusoidal"))
    assert "## Output length per bucket: short vs control" in text
    assert "| rope | 11-15* | 9 | 0.850 ± 0.071 [" in text
    assert "| 1.000 |" in text  # the control's one seed: a mean, no spread
    older = bucket_table(
        [record("short", 1, 0, 0, kept=False), record("all", 1, 0, 0, False)], BUCKETS, "sinusoidal"
    )
    assert "| rope | 11-15* | 9 | — | — | — | — |" in bucket_markdown(older)


def test_bucket_length_ratio_minus_sinusoidal_is_paired_and_holm_adjusted():
    """Per bucket, each variant's short-run length ratio minus sinusoidal's, by seed: the
    end-of-sentence prior's share of a BLEU loss beyond the training lengths, told apart."""

    def record(condition, variant, seed, ratio):
        rows = [bucket_row(11, 20.0, n=9, length_ratio=ratio, bp=min(1.0, ratio))]
        return record_of(condition, variant, seed, by_bucket=rows, max_words=10)

    records = [
        record(condition, variant, seed, ratio)
        for variant, short in (
            ("sinusoidal", (0.95, 0.97)),
            ("rope", (0.80, 0.90)),
            ("learned", (0.95, 0.98)),
        )
        for seed, ratio in zip((1, 2), short, strict=True)
        for condition in ("short", "all")
    ]
    records += [record("short", "t5", 1, 0.5)]  # one seed: unpaired, no interval, no test
    table = bucket_table(records, BUCKETS, "sinusoidal")
    diffs = {d.variant: d.short_length_ratio for d in table.differences}
    rope = diffs["rope"]
    assert rope["seeds"] == [1, 2] and rope["difference"] == pytest.approx(-0.11)
    assert rope["low"] < -0.11 < rope["high"] and rope["family_size"] == 2
    assert diffs["t5"]["low"] is None and diffs["t5"]["p"] is None  # 1 seed against 2
    assert rope["p_holm"] == pytest.approx(min(1.0, 2 * min(rope["p"], diffs["learned"]["p"])))
    text = bucket_markdown(table)
    assert "| Δ length ratio (short) |" in text
    assert f"| -0.110 [{rope['low']:+.3f}, {rope['high']:+.3f}], Holm p " in text


def test_a_loss_that_is_all_brevity_penalty_is_no_loss_without_it():
    """rope keeps 0.1 less of its control's BLEU than sinusoids, but only through a harsher
    brevity penalty: with each side's BP divided out the two keep the same share."""

    def record(condition, variant, seed, bleu, bp):
        rows = [bucket_row(11, bleu, n=9, length_ratio=bp, bp=bp)]
        return record_of(condition, variant, seed, by_bucket=rows, max_words=10)

    short = {"sinusoidal": (20.0, (0.80, 0.82)), "rope": (16.0, (0.64, 0.656))}
    records = [
        record(
            condition,
            variant,
            seed,
            *((bleu, bps[seed - 1]) if condition == "short" else (40.0, 1.0)),
        )
        for variant, (bleu, bps) in short.items()
        for seed in (1, 2)
        for condition in ("short", "all")
    ]
    table = bucket_table(records, BUCKETS, "sinusoidal")
    (diff,) = table.differences
    assert diff.ratio["difference"] == pytest.approx(-0.1)
    assert diff.ratio_without_bp["difference"] == pytest.approx(0.0, abs=1e-4)
    rope = next(r for r in table.rows if r.variant == "rope")
    assert rope.ratio_without_bp.mean == pytest.approx((0.4 / 0.64 + 0.4 / 0.656) / 2, abs=1e-4)
    text = bucket_markdown(table)
    assert "| Δ ratio without BP |" in text and "| ratio without BP |" in text
    assert f"| {signed_cell(diff.ratio_without_bp, 3)} |" in text
    fig = bucket_ratio_figure(table)
    try:  # the third panel draws the share without BP
        (line,) = [x for x in fig.axes[2].get_lines() if x.get_label().startswith("rope")]
        assert list(line.get_ydata()) == pytest.approx([rope.ratio_without_bp.mean])
        assert fig.axes[0].get_legend() is not None
    finally:
        pyplot().close(fig)
    # no seed has a kept share: the legend moves to the third panel
    rows = [replace(row, ratio_by_seed={}, over_in_range_by_seed={}) for row in table.rows]
    fig = bucket_ratio_figure(replace(table, rows=rows))
    try:
        assert [ax.get_legend() is not None for ax in fig.axes] == [False, False, True]
    finally:
        pyplot().close(fig)


def tost_p(diffs: list[float], margin: float) -> float:
    """Two one-sided t-tests of -margin < mean < +margin, computed here with scipy: the larger p."""
    lower = stats.ttest_1samp([d + margin for d in diffs], 0.0, alternative="greater").pvalue
    upper = stats.ttest_1samp([d - margin for d in diffs], 0.0, alternative="less").pvalue
    return max(lower, upper)


def short_and_control(
    short: dict[str, tuple[float, ...]], control: float, lows: tuple[int, ...] = (11,)
) -> list[StudyRecord]:
    """Short and all-lengths records of each variant, seed by seed (L = 10, 5-word buckets from
    lows): the control scores control everywhere, the short run its BLEU beyond L."""

    def record(condition, variant, seed, bleu):
        rows = [bucket_row(low, bleu if low > 10 else control, n=9) for low in lows]
        return record_of(condition, variant, seed, by_bucket=rows, max_words=10)

    return [
        record(condition, variant, seed, bleu if condition == "short" else control)
        for variant, bleus in short.items()
        for seed, bleu in enumerate(bleus, start=1)
        for condition in ("short", "all")
    ]


def test_bucket_ratio_equivalence_is_tost_at_the_ratio_margin_holm_per_bucket():
    """Per bucket, each variant's kept share (short / control) minus sinusoidal's gets TOST at
    ±RATIO_EQUIVALENCE_MARGIN over the paired seeds, Holm within the bucket: a variant keeping
    the same share is shown equivalent, one keeping much less is not."""
    short = {
        "sinusoidal": (20.0, 21.0, 19.0),
        "close": (20.2, 20.9, 19.1),  # ratio within ±0.006 of sinusoidal's at every seed
        "far": (14.0, 17.0, 13.0),
    }
    table = bucket_table(short_and_control(short, control=40.0), BUCKETS, "sinusoidal")
    tests = {d.variant: d.equivalence for d in table.differences}
    for variant in ("close", "far"):
        diffs = [(o - b) / 40 for o, b in zip(short[variant], short["sinusoidal"], strict=True)]
        assert tests[variant]["p"] == pytest.approx(tost_p(diffs, RATIO_EQUIVALENCE_MARGIN))
        assert tests[variant]["margin"] == RATIO_EQUIVALENCE_MARGIN and tests[variant]["n"] == 3
    assert [tests[v]["family_size"] for v in ("close", "far")] == [2, 2]
    assert tests["close"]["p_holm"] == pytest.approx(2 * tests["close"]["p"])  # the smaller p
    assert tests["close"]["p_holm"] < 0.05
    assert tests["far"]["p_holm"] > 0.05
    text = bucket_markdown(table)
    assert f"Δ ratio within ±{RATIO_EQUIVALENCE_MARGIN:g}: TOST p (Holm)" in text
    assert f"| {equivalence_cell(tests['close'], 3)} |" in text
    # the summary above the tables lists the equivalence that survives Holm, and only it
    summary = text.split("| variant |")[0]
    assert f"- Δ ratio within ±{RATIO_EQUIVALENCE_MARGIN:g}: 1 of 2\n" in summary
    assert f"  - close at 11-15* (9): TOST {equivalence_cell(tests['close'], 3)}\n" in summary
    assert "far at 11-15* (9): TOST" not in summary


def test_concat_bleu_equivalence_is_tost_at_one_bleu_holm_per_condition_and_k():
    """Each variant minus sinusoidal at each k, and joined minus all, get TOST at ±1 BLEU over
    the paired seeds, Holm within the family; one seed against several decides nothing."""
    bleus = {
        ("all", "sinusoidal"): (30.0, 32.0, 31.0),
        ("all", "rope"): (30.2, 31.9, 31.1),
        ("all", "alibi"): (25.0, 29.0, 24.0),
        ("joined", "rope"): (30.1, 32.3, 30.8),
    }

    def record(condition, variant, seed, bleu):
        return record_of(condition, variant, seed, concat=[concat_row(1, bleu, chrf=50.0)])

    records = [
        record(condition, variant, seed, bleu)
        for (condition, variant), values in bleus.items()
        for seed, bleu in enumerate(values, start=1)
    ]
    records.append(record("all", "t5", 1, 31.0))
    table = concat_table(records, ROW_E, JOINED)
    tests = {d.variant: d.equivalence for d in table.differences if d.condition == "all"}
    for variant in ("rope", "alibi"):
        diffs = [
            o - b for o, b in zip(bleus["all", variant], bleus["all", "sinusoidal"], strict=True)
        ]
        assert tests[variant]["p"] == pytest.approx(tost_p(diffs, 1.0))
    assert tests["t5"]["p"] is None and tests["rope"]["family_size"] == 2
    assert tests["rope"]["p_holm"] == pytest.approx(2 * tests["rope"]["p"])  # the smaller p
    assert tests["rope"]["p_holm"] < 0.05
    assert tests["alibi"]["p_holm"] > 0.05
    (remedy,) = table.joined_minus_all
    diffs = [o - b for o, b in zip(bleus["joined", "rope"], bleus["all", "rope"], strict=True)]
    assert remedy.equivalence["p"] == pytest.approx(tost_p(diffs, 1.0))
    text = concat_markdown(table)
    # minus sinusoidal (no learned runs: no second baseline), and joined minus all
    assert text.count("Δ BLEU within ±1: TOST p (Holm), smallest margin") == 2
    assert f"| {equivalence_cell(tests['rope'])} |" in text
    summary = text.split("| condition |")[0]
    assert "Each variant minus sinusoidal, per condition and k:" in summary
    assert "Joined minus all, per variant and k:" in summary
    assert f"  - all rope at k = 1: TOST {equivalence_cell(tests['rope'])}\n" in summary
    assert "all alibi at k = 1: TOST" not in summary


def test_the_bucket_figure_draws_paired_means_with_the_seeds_band_in_variant_order():
    """Three panels (kept share, it over the in-range share, it without the brevity penalty); a
    line per variant in the figures' order with its seed count, through the paired seeds' mean,
    the band their range; records without BP draw nothing in the third."""
    short = {"alibi": (18.0, 12.0), "sinusoidal": (15.0, 9.0)}  # alphabetically first, drawn second
    fig = bucket_ratio_figure(
        bucket_table(short_and_control(short, 30.0, lows=(6, 11)), BUCKETS, "sinusoidal")
    )
    try:
        kept, relative, without_bp = fig.axes
        labels = [t.get_text() for t in kept.get_legend().get_texts()]
        assert labels == ["sinusoidal (2 seeds)", "alibi (2 seeds)"]
        alibi = [line for line in kept.get_lines() if line.get_label().startswith("alibi")][0]
        assert list(alibi.get_ydata()) == pytest.approx([1.0, (0.6 + 0.4) / 2])
        band = kept.collections[1].get_paths()[0].vertices[:, 1]  # alibi's, drawn second
        assert min(band) == pytest.approx(0.4) and max(band) == pytest.approx(1.0)
        assert relative.get_ylabel().startswith("that ratio ÷ its in-range ratio")
        assert without_bp.get_ylabel().startswith("BLEU / BP short / BLEU / BP control")
        drawn = [line.get_label() for line in without_bp.get_lines()]
        assert not [label for label in drawn if label.startswith(("alibi", "sinusoidal"))]
    finally:
        pyplot().close(fig)
