"""nbest_lines: fairseq's n-best lines, scores in base 2, every sentence nbest lines."""

import math

from evaluation.translate import nbest_lines


def test_nbest_lines_are_fairseqs_in_base_2_and_padded_to_nbest():
    found = [[("a b", math.log(0.5)), ("a", 2 * math.log(0.5))], [], [("c", math.log(0.25))]]
    assert nbest_lines(found, 2, [3, 4, 5]) == (
        "H-3\t-1.0000\ta b\nH-3\t-2.0000\ta\n"  # log2 P / lp: -1 and -2 bits
        "H-4\t-inf\t\nH-4\t-inf\t\n"  # an empty or skipped line: nothing searched
        "H-5\t-2.0000\tc\nH-5\t-inf\t\n"  # one hypothesis finished: the rest padded
    )
