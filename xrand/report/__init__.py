"""What a person opens: report.json, the pictures and one self-contained report.html per result
(compare, the scheduler matrix, a sweep), and layers.csv in the columns of Ascend's msprobe compare."""
